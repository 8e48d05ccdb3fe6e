/**
 * The other policies a deploy depends on allow what is asked of them, as IAM evaluates them
 * (@cloud-copilot/iam-simulate): the GitHub deploy and plan roles (lib/constructs/deploy-role.ts),
 * and the roles of the Lambda functions CloudFormation runs for the stack (the migrations
 * provider, the CDK's custom resources), each against the calls its code makes
 * (lib/deploy-permissions/helper-calls.ts).
 */
import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { DeployRoleStack } from '../../lib/constructs/deploy-role.js';
import { helperRequests, HELPERS } from '../../lib/deploy-permissions/helper-calls.js';
import { ACCOUNT, generatedName, REGION, Resolver, type DeployRequest } from '../../lib/deploy-permissions/requests.js';
import { rolePolicy } from '../../lib/deploy-permissions/role-policies.js';
import { denials, type PolicyDocument } from '../../lib/deploy-permissions/simulate.js';
import { deployedTemplates, type DeployedTemplate } from '../../lib/deploy-permissions/templates.js';

const messages = async (policy: PolicyDocument, requests: DeployRequest[]) => (await denials(policy, requests)).map((d) => d.message);
const withoutStatements = (policy: PolicyDocument, action: string): PolicyDocument =>
  ({ ...policy, Statement: policy.Statement.filter((s) => ![s.Action].flat().includes(action)) });

let backend: DeployedTemplate[];
beforeAll(() => {
  backend = deployedTemplates();
}, 300_000);

const parents = () => backend.filter((t) => !t.nestedLogicalId && !t.stackName.endsWith('-deploy-role'));
const resolverOf = (t: DeployedTemplate) => new Resolver(t, t.stackName);
/** The helpers of a template: a stage may lack some (dev has no release hook). */
const helpersOf = (r: Resolver) => HELPERS.filter((h) => r.has(h.role, 'AWS::IAM::Role'));

describe('the roles of the functions CloudFormation runs for the stack', () => {
  it('every entry names a role of some stage', () => {
    const found = new Set(parents().flatMap((t) => helpersOf(resolverOf(t)).map((h) => h.role)));
    expect(HELPERS.map((h) => h.role).filter((role) => !found.has(role))).toEqual([]);
  });

  it('every function\'s role has its list of calls', () => {
    for (const t of parents()) {
      const r = resolverOf(t);
      const roles = Object.values(t.resources).filter((x) => x.Type === 'AWS::Lambda::Function').map((f) => (f.Properties!.Role as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0]);
      const listed = helpersOf(r).map((h) => r.id(h.role));
      expect(roles.filter((id) => !listed.includes(id)), `${t.label}: add these roles' calls to lib/deploy-permissions/helper-calls.ts`).toEqual([]);
    }
  });

  it.each(['lib/lambda/run-migrations.mjs', 'lib/hooks/smoke-test.mjs'])('lists every SDK command of %s', (file) => {
    const code = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
    // The IAM prefix of a client: @aws-sdk/client-secrets-manager is secretsmanager.
    const clients = Object.fromEntries([...code.matchAll(/import \{([^}]+)\} from '@aws-sdk\/client-([a-z0-9-]+)'/g)]
      .flatMap(([, names, service]) => names!.split(',').map((n) => [n.trim(), service!.replaceAll('-', '')])));
    const commands = [...code.matchAll(/new (\w+)Command\(/g)].map(([, name]) => `${clients[`${name}Command`]}:${name}`);
    expect(commands.length).toBeGreaterThan(0);
    const r = resolverOf(parents().find((t) => t.stackName.endsWith('prod'))!);
    const listed = HELPERS.filter((h) => h.code.startsWith(file)).flatMap((h) => h.calls(r).map((c) => c.action));
    expect(commands.filter((c) => !listed.includes(c)), `SDK calls of ${file} missing from lib/deploy-permissions/helper-calls.ts`).toEqual([]);
  });

  it('each role allows every call its code makes, in both stages', async () => {
    for (const t of parents()) {
      const r = resolverOf(t);
      for (const helper of helpersOf(r)) expect(await messages(rolePolicy(r, r.id(helper.role)), helperRequests(helper, r))).toEqual([]);
    }
  });

  it('fails, naming the call, when a role loses the statement that allows it', async () => {
    const r = resolverOf(parents()[0]!);
    const start = HELPERS.find((h) => h.role === 'MigrationsStartServiceRole')!;
    const failures = await messages(withoutStatements(rolePolicy(r, r.id(start.role)), 'ecs:RunTask'), helperRequests(start, r));
    expect(failures).toEqual([expect.stringMatching(/MigrationsStartServiceRole \(lib\/lambda\/run-migrations\.mjs \(onEvent\)\): ecs:RunTask on arn:aws:ecs:\S+:task-definition\/\S+ with ecs:cluster=arn:aws:ecs:\S+ is not allowed/)]);
  });
});

describe('the GitHub deploy and plan roles', () => {
  const bootstrapRole = (kind: string) => `arn:aws:iam::${ACCOUNT}:role/cdk-hnb659fds-${kind}-role-${ACCOUNT}-${REGION}`;
  const assume = (kind: string, label: string): DeployRequest[] =>
    ['sts:AssumeRole', 'sts:TagSession'].map((action) => ({ action, resource: bootstrapRole(kind), context: {}, for: label }));

  function roleStack(stage: 'dev' | 'prod'): Resolver {
    // No CloudFormation validation: it costs seconds to start, and these templates are only read.
    const app = new App({ builtinCloudFormationValidation: false });
    const stack = new DeployRoleStack(app, `EcsSaasBackend-${stage}-deploy-role`, { githubRepo: 'acme/backend', stage });
    const t = Template.fromStack(stack).toJSON();
    return new Resolver({ stackName: stack.stackName, label: stack.stackName, resources: t.Resources, parameters: {} }, stack.stackName);
  }

  it('the deploy role may assume each CDK bootstrap role cdk deploy uses, in both stages', async () => {
    for (const stage of ['dev', 'prod'] as const) {
      const r = roleStack(stage);
      const label = `${stage} deploy role (cdk deploy)`;
      const requests = ['deploy', 'file-publishing', 'image-publishing', 'lookup'].flatMap((kind) => assume(kind, label));
      expect(await messages(rolePolicy(r, r.id('Role')), requests)).toEqual([]);
      // And nothing else: not the bootstrap's CloudFormation execution role.
      expect(await messages(rolePolicy(r, r.id('Role')), assume('cfn-exec', label))).toHaveLength(2);
    }
  });

  it('the plan role may assume the lookup role and read every deployed prod stack, nested ones included', async () => {
    const r = roleStack('prod');
    const stacks = backend.filter((t) => t.stackName === 'EcsSaasBackend-prod')
      .map((t) => t.nestedLogicalId ? generatedName(t.stackName, t.nestedLogicalId) : t.stackName);
    expect(stacks.length).toBeGreaterThan(1);
    const reads = stacks.flatMap((name) => ['cloudformation:GetTemplate', 'cloudformation:DescribeStacks', 'cloudformation:ListStackResources'].map((action) => ({
      action, resource: `arn:aws:cloudformation:${REGION}:${ACCOUNT}:stack/${name}/0a1b2c3d-0000-4000-8000-000000000000`, context: {}, for: `plan role (cdk diff, check:stateful) on ${name}`,
    })));
    const policy = rolePolicy(r, r.id('PlanRole'));
    expect(await messages(policy, [...assume('lookup', 'plan role (cdk diff)'), ...reads])).toEqual([]);
    expect(await messages(policy, assume('deploy', 'plan role'))).toHaveLength(2);
    expect(await messages(withoutStatements(policy, 'cloudformation:GetTemplate'), reads)).toHaveLength(reads.length);
  });
});
