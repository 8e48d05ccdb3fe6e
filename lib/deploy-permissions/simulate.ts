/**
 * Evaluates a policy against the requests a deploy makes, with @cloud-copilot/iam-simulate (IAM's
 * evaluation logic: actions, resources and conditions), and says of each request it does not
 * allow which statement should allow it.
 */
import { runSimulation, runUnsafeSimulation, type Simulation } from '@cloud-copilot/iam-simulate';
import { matches, type PolicyDocument, type PolicyStatement } from './policy.js';
import { ACCOUNT, type DeployRequest } from './requests.js';

export type { PolicyDocument, PolicyStatement } from './policy.js';

/** The principal the requests come from: CloudFormation's execution role of the CDK bootstrap. */
export const CFN_EXEC_ROLE = `arn:aws:iam::${ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-${ACCOUNT}-us-east-1`;

/**
 * The first statement of every key policy the stack writes (CDK's default): it lets IAM policies
 * of the account grant use of the key. A KMS request needs it besides the identity policy;
 * the test checks that each key of the templates has it.
 */
export const KEY_POLICY_OF_THE_ACCOUNT: PolicyDocument = {
  Version: '2012-10-17',
  Statement: [{ Effect: 'Allow', Principal: { AWS: `arn:aws:iam::${ACCOUNT}:root` }, Action: 'kms:*', Resource: '*' } as PolicyStatement],
};

/** A request the policy does not allow, and why, in one line. */
export interface Denial {
  readonly request: DeployRequest;
  readonly message: string;
}

const actionsOf = (s: PolicyStatement) => [s.Action].flat();

/** The statement that names `action` (or, failing that, its service): the one to change. */
function statementFor(policy: PolicyDocument, action: string): string {
  const service = `${action.split(':')[0]}:`;
  const exact = policy.Statement.find((s) => actionsOf(s).some((a) => matches(a, action)));
  if (exact) return `statement ${exact.Sid ?? '(no Sid)'} names it, but its Resource or Condition does not match`;
  const same = policy.Statement.find((s) => actionsOf(s).some((a) => a.startsWith(service)));
  return same ? `add it to statement ${same.Sid ?? '(no Sid)'}` : `no statement names ${service}*: add one`;
}

export function describe(request: DeployRequest, policy: PolicyDocument): string {
  const context = Object.entries(request.context).map(([k, v]) => ` with ${k}=${v}`).join('');
  return `${request.for}: ${request.action} on ${request.resource}${context} is not allowed; ${statementFor(policy, request.action)}`;
}

/** Whether `policy` allows `request` for CloudFormation's execution role; throws on a simulator error. */
export async function allows(policy: PolicyDocument, request: DeployRequest): Promise<boolean> {
  const simulation: Simulation = {
    identityPolicies: [{ name: 'policy', policy }],
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    ...(request.action.startsWith('kms:') && request.resource !== '*' ? { resourcePolicy: KEY_POLICY_OF_THE_ACCOUNT } : {}),
    request: {
      principal: CFN_EXEC_ROLE,
      action: request.action,
      resource: { resource: request.resource, accountId: ACCOUNT },
      contextVariables: { ...request.context },
    },
  };
  const result = await runSimulation(simulation, {});
  if (result.resultType !== 'error') return result.overallResult === 'Allowed';
  // An ARN that fits two of the action's resource types (`function:<name>` and `function:<name>:<qualifier>`):
  // the same evaluation, without the check that picks one.
  if (result.errors.message === 'multiple.resource.types') return runUnsafeSimulation(simulation, {}) === 'Allowed';
  throw new Error(`${request.for}: ${request.action} on ${request.resource} cannot be simulated: ${JSON.stringify(result.errors)}`);
}

/** The requests `policy` does not allow, each with its message. */
export async function denials(policy: PolicyDocument, requests: readonly DeployRequest[]): Promise<Denial[]> {
  const results = new Map<string, Promise<boolean>>();
  const allowed = await Promise.all(requests.map((r) => {
    const key = dependsOnlyOnAction(policy, r.action) ? r.action : `${r.action} ${r.resource} ${JSON.stringify(r.context)}`;
    if (!results.has(key)) results.set(key, allows(policy, r));
    return results.get(key)!;
  }));
  return requests.filter((_, i) => !allowed[i]).map((request) => ({ request, message: describe(request, policy) }));
}

/**
 * Whether every statement that names `action` allows it on any resource, unconditionally: then
 * one evaluation of the action answers for every resource (most of the requests, and the speed).
 */
function dependsOnlyOnAction(policy: PolicyDocument, action: string): boolean {
  return policy.Statement.every((s) => !actionsOf(s).some((a) => matches(a, action)) || (s.Effect === 'Allow' && [s.Resource].flat().includes('*') && !s.Condition));
}
