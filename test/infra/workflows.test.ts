/**
 * The GitHub workflows: valid for GitHub's schema (action-validator, a real linter), CI runs
 * what .ci/run runs, and the deploy workflow uses OIDC with one job per stage, prod gated.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { STAGES } from '../../lib/defaults.js';
import { DeployRoleStack, deployRoleName } from '../../lib/constructs/deploy-role.js';
import { REPO_ROOT } from '../../lib/constructs/stack.js';
import { errorMessage, newApp } from './synth.js';

const WORKFLOWS = path.join(REPO_ROOT, '.github/workflows');
const read = (file: string) => readFileSync(path.join(WORKFLOWS, file), 'utf8');
const VALIDATOR = path.join(REPO_ROOT, 'node_modules/.bin/action-validator');

describe('the workflow files', () => {
  it.each(readdirSync(WORKFLOWS))('%s passes action-validator', (file) => {
    const run = spawnSync(VALIDATOR, [path.join(WORKFLOWS, file)], { encoding: 'utf8' });
    expect(run.status, run.stdout + run.stderr).toBe(0);
  });

  it('are checked by a linter that does catch a mistake', () => {
    const run = spawnSync(VALIDATOR, [path.join(REPO_ROOT, 'test/fixtures/bad-workflow.yml')], { encoding: 'utf8' });
    expect(run.status).toBe(1);
    expect(run.stdout + run.stderr).toContain("Additional property 'step' is not allowed");
  });

  it('CI runs the install and test commands, both stages\' synth with cdk-nag, the guard rules and the linter', () => {
    const ci = read('ci.yml');
    for (const command of ['npm ci', 'npm test', '-c stage=dev', '-c stage=prod', 'npm run check:guard', 'npm run lint:workflows']) {
      expect(ci, command).toContain(`- run: ${command.startsWith('-c') ? 'npx cdk synth --quiet -c alertEmail=none ' + command : command}`);
    }
    const local = readFileSync(path.join(REPO_ROOT, '.ci/run'), 'utf8');
    for (const command of ['npm ci', 'npm test', 'npm run check:guard', 'npm run lint:workflows']) expect(local, command).toContain(command);
  });

  it('deploys with GitHub OIDC and no stored keys, one job per stage, prod after dev behind its environment', () => {
    const deploy = read('deploy.yml');
    expect(deploy).toMatch(/^permissions:\n {2}contents: read\n {2}id-token: write$/m);
    expect(deploy).not.toMatch(/secrets\.|aws-access-key-id|aws-secret-access-key/i);
    for (const stage of STAGES) {
      expect(deploy).toMatch(new RegExp(`^ {2}${stage}:\\n(?: {4}.*\\n)*? {4}environment: ${stage}$`, 'm'));
      expect(deploy).toContain(`role/${deployRoleName(stage)}`);
      expect(deploy).toContain(`-c stage=${stage}`);
    }
    expect(deploy).toMatch(/^ {2}prod:\n {4}needs: dev$/m);
  });
});

describe('the deploy role', () => {
  const app = newApp();
  const stack = new DeployRoleStack(app, 'DeployRole', { githubRepo: 'acme/ecs-saas-backend', stage: 'prod' });
  const template = Template.fromStack(stack);

  it('trusts only GitHub\'s OIDC tokens of that repository\'s jobs in the stage\'s environment', () => {
    const [role] = Object.values(template.findResources('AWS::IAM::Role'));
    expect(role!.Properties).toMatchObject({
      RoleName: deployRoleName('prod'),
      AssumeRolePolicyDocument: {
        Statement: [{
          Action: 'sts:AssumeRoleWithWebIdentity',
          Effect: 'Allow',
          Principal: { Federated: { Ref: expect.stringMatching(/^GitHub/) } },
          Condition: { StringEquals: { 'token.actions.githubusercontent.com:aud': 'sts.amazonaws.com', 'token.actions.githubusercontent.com:sub': 'repo:acme/ecs-saas-backend:environment:prod' } },
        }],
      },
    });
    template.resourceCountIs('AWS::IAM::OIDCProvider', 1);
    template.resourceCountIs('AWS::Lambda::Function', 0);
  });

  it('may only assume the account\'s CDK bootstrap roles', () => {
    const policies = Object.values(template.findResources('AWS::IAM::Policy'));
    expect(policies).toHaveLength(1);
    const [statement, ...rest] = policies[0]!.Properties.PolicyDocument.Statement;
    expect(rest).toEqual([]);
    expect(statement.Action).toEqual(['sts:AssumeRole', 'sts:TagSession']);
    const resources = JSON.stringify(stack.resolve(statement.Resource));
    for (const kind of ['deploy', 'file-publishing', 'image-publishing', 'lookup']) expect(resources).toContain(`:role/cdk-hnb659fds-${kind}-role-`);
    template.resourceCountIs('AWS::IAM::ManagedPolicy', 0);
  });

  it('rejects a repository that is not owner/name', () => {
    expect(errorMessage(() => new DeployRoleStack(newApp(), 'Bad', { githubRepo: 'https://github.com/acme/x', stage: 'dev' }))).toContain('githubRepo must be owner/name, got "https://github.com/acme/x"');
  });

  it('synthesizes from its own app entry', () => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', 'bin/deploy-role.ts'], {
      cwd: REPO_ROOT,
      env: { ...process.env, CDK_OUTDIR: path.join(REPO_ROOT, 'cdk.out', 'deploy-role-test'), CDK_CONTEXT_JSON: JSON.stringify({ githubRepo: 'acme/x', stage: 'dev' }) },
      encoding: 'utf8',
    });
    expect(out).toBe('');
    expect(readFileSync(path.join(REPO_ROOT, 'cdk.out/deploy-role-test/EcsSaasBackend-dev-deploy-role.template.json'), 'utf8')).toContain(deployRoleName('dev'));
  });
});
