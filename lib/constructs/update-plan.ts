/**
 * The update guard's judgement: what CloudFormation would do to go from one set of templates to
 * another (read with @aws-cdk/cloudformation-diff, what `cdk diff` prints), and which of those
 * steps would fail or misroute traffic:
 *
 * - a resource created while another still holds its fixed name or port: CloudFormation creates
 *   a new or replacing resource before it deletes the old one, so the create fails (a listener on
 *   the same port, a queue, log group, schedule or alarm of the same name);
 * - any change to the production (or test) listener rule of an ECS blue/green or canary service:
 *   ECS moves its weights during a deploy, and an update writes the template's weights back;
 * - a stateful resource replaced (lib/constructs/stateful-changes.ts lists the types).
 *
 * bin/check-updates.ts synthesizes the transitions (lib/update-transitions.ts) and reports.
 */
import { fullDiff, ResourceImpact } from '@aws-cdk/cloudformation-diff';
import { compareTemplateSets, type TemplateSet } from './stateful-changes.js';

type Resource = { Type: string; Properties?: Record<string, unknown>; DependsOn?: string | string[]; Metadata?: Record<string, unknown> };

/** The properties that name a resource of each type in its account and region: two cannot share them. */
const FIXED_NAME_PROPERTIES: Record<string, readonly string[]> = {
  'AWS::ElasticLoadBalancingV2::Listener': ['LoadBalancerArn', 'Port'],
  'AWS::ElasticLoadBalancingV2::ListenerRule': ['ListenerArn', 'Priority'],
  'AWS::ElasticLoadBalancingV2::TargetGroup': ['Name'],
  'AWS::ElasticLoadBalancingV2::LoadBalancer': ['Name'],
  'AWS::SQS::Queue': ['QueueName'],
  'AWS::SNS::Topic': ['TopicName'],
  'AWS::Logs::LogGroup': ['LogGroupName'],
  'AWS::Scheduler::Schedule': ['GroupName', 'Name'],
  'AWS::Scheduler::ScheduleGroup': ['Name'],
  'AWS::Events::Rule': ['EventBusName', 'Name'],
  'AWS::CloudWatch::Alarm': ['AlarmName'],
  'AWS::CloudWatch::CompositeAlarm': ['AlarmName'],
  'AWS::CloudWatch::Dashboard': ['DashboardName'],
  'AWS::StepFunctions::StateMachine': ['StateMachineName'],
  'AWS::Lambda::Function': ['FunctionName'],
  'AWS::IAM::Role': ['RoleName'],
  'AWS::ECS::Cluster': ['ClusterName'],
  'AWS::ECS::Service': ['Cluster', 'ServiceName'],
  'AWS::S3::Bucket': ['BucketName'],
  'AWS::SecretsManager::Secret': ['Name'],
  'AWS::RDS::DBInstance': ['DBInstanceIdentifier'],
  'AWS::RDS::DBSubnetGroup': ['DBSubnetGroupName'],
  'AWS::KMS::Alias': ['AliasName'],
  'AWS::WAFv2::WebACL': ['Scope', 'Name'],
};

/**
 * What a resource holds that no other may, as one comparable string; undefined when
 * CloudFormation generates its name. Names built from the same intrinsics compare equal.
 */
export function fixedIdentity(resource: Resource | undefined): string | undefined {
  const keys = resource && FIXED_NAME_PROPERTIES[resource.Type];
  if (!keys) return undefined;
  const props = resource.Properties ?? {};
  // The last key is the name (or port); without it CloudFormation generates one.
  if (props[keys.at(-1)!] === undefined) return undefined;
  return `${resource.Type} ${keys.map((k) => `${k}=${JSON.stringify(props[k] ?? null)}`).join(' ')}`;
}

export type FindingKind = 'collision' | 'production-rule' | 'stateful-replaced';

export interface UpdateFinding {
  readonly kind: FindingKind;
  /** The template's key in its TemplateSet. */
  readonly stack: string;
  readonly logicalId: string;
  readonly message: string;
}

export interface PlanStep {
  readonly stack: string;
  readonly logicalId: string;
  readonly type: string;
  readonly action: 'add' | 'update' | 'replace' | 'may replace' | 'remove' | 'orphan';
  /** The properties that changed. */
  readonly properties: readonly string[];
}

export interface UpdateJudgement {
  readonly plan: readonly PlanStep[];
  readonly findings: readonly UpdateFinding[];
}

const ACTIONS: Partial<Record<ResourceImpact, PlanStep['action']>> = {
  [ResourceImpact.WILL_CREATE]: 'add',
  [ResourceImpact.WILL_UPDATE]: 'update',
  [ResourceImpact.NO_CHANGE]: 'update',
  [ResourceImpact.WILL_REPLACE]: 'replace',
  [ResourceImpact.MAY_REPLACE]: 'may replace',
  [ResourceImpact.WILL_DESTROY]: 'remove',
  [ResourceImpact.WILL_ORPHAN]: 'orphan',
};

interface Change extends PlanStep {
  readonly before: Resource | undefined;
  readonly after: Resource | undefined;
}

function changesOf(before: TemplateSet, after: TemplateSet): Change[] {
  const changes: Change[] = [];
  for (const stack of [...new Set([...before.keys(), ...after.keys()])].sort()) {
    const diff = fullDiff(before.get(stack) ?? {}, after.get(stack) ?? {});
    diff.resources.forEachDifference((logicalId, change) => {
      changes.push({
        stack,
        logicalId,
        type: change.newResourceType ?? change.oldResourceType ?? '',
        action: ACTIONS[change.changeImpact] ?? 'update',
        properties: Object.keys(change.propertyUpdates),
        before: change.oldValue as Resource | undefined,
        after: change.newValue as Resource | undefined,
      });
    });
  }
  return changes;
}

const creates = (c: Change) => c.action === 'add' || c.action === 'replace' || c.action === 'may replace';
const deletes = (c: Change) => c.action === 'remove' || c.action === 'replace' || c.action === 'may replace';
const dependsOn = (resource: Resource | undefined, logicalId: string) => [resource?.DependsOn ?? []].flat().includes(logicalId)
  || [`{"Ref":"${logicalId}"}`, `{"Fn::GetAtt":["${logicalId}"`].some((ref) => JSON.stringify(resource?.Properties ?? {}).includes(ref));
const name = (c: { stack: string; logicalId: string }) => `${c.logicalId} in ${c.stack}`;

/**
 * Collisions: what a step claims (a create, or an update to a new name or port) that another
 * step's resource still holds at that moment. CloudFormation deletes only after every create and
 * update, so a deleted resource holds its name throughout; a resource updated away from a name
 * frees it only for resources that wait for it (DependsOn, or a reference).
 */
function collisions(changes: readonly Change[]): UpdateFinding[] {
  const findings: UpdateFinding[] = [];
  const claims = changes.flatMap((c) => {
    const identity = fixedIdentity(c.after);
    if (identity === undefined) return [];
    const isNew = creates(c) || (c.action === 'update' && identity !== fixedIdentity(c.before));
    return isNew ? [{ change: c, identity }] : [];
  });
  for (const { change, identity } of claims) {
    for (const holder of changes) {
      if (fixedIdentity(holder.before) !== identity) continue;
      const isSelf = holder === change;
      if (deletes(holder)) {
        findings.push({
          kind: 'collision',
          stack: change.stack,
          logicalId: change.logicalId,
          message: isSelf
            ? `${change.type} ${name(change)} would be replaced, but keeps its fixed ${identity.slice(change.type.length + 1)}: CloudFormation creates the replacement first, and the name is taken`
            : change.action === 'update'
              ? `${change.type} ${name(change)} would be updated to ${identity.slice(change.type.length + 1)} while ${name(holder)}, deleted only afterwards, still holds it`
              : `${change.type} ${name(change)} would be created (${change.action}) while ${name(holder)}, deleted only afterwards, still holds ${identity.slice(change.type.length + 1)}`,
        });
      } else if (!isSelf && holder.action === 'update' && fixedIdentity(holder.after) !== identity && !(holder.stack === change.stack && dependsOn(change.after, holder.logicalId))) {
        findings.push({
          kind: 'collision',
          stack: change.stack,
          logicalId: change.logicalId,
          message: `${change.type} ${name(change)} claims ${identity.slice(change.type.length + 1)}, which ${name(holder)} leaves in the same update, but nothing makes it wait for that (add a dependency)`,
        });
      }
    }
  }
  return findings;
}

type AdvancedConfiguration = { ProductionListenerRule?: { Ref?: string }; TestListenerRule?: { Ref?: string } };

/** The listener rules ECS blue/green and canary deploys shift traffic on (production and test), by template key and logical id. */
function shiftedRules(set: TemplateSet): Map<string, string> {
  const rules = new Map<string, string>();
  for (const [stack, template] of set) {
    for (const resource of Object.values((template.Resources ?? {}) as Record<string, Resource>)) {
      if (resource.Type !== 'AWS::ECS::Service') continue;
      for (const lb of (resource.Properties?.LoadBalancers ?? []) as { AdvancedConfiguration?: AdvancedConfiguration }[]) {
        const production = lb.AdvancedConfiguration?.ProductionListenerRule?.Ref;
        const test = lb.AdvancedConfiguration?.TestListenerRule?.Ref;
        if (production) rules.set(`${stack}/${production}`, 'production');
        if (test) rules.set(`${stack}/${test}`, 'test');
      }
    }
  }
  return rules;
}

function shiftedRuleChanges(before: TemplateSet, changes: readonly Change[]): UpdateFinding[] {
  const rules = shiftedRules(before);
  return changes.filter((c) => rules.has(`${c.stack}/${c.logicalId}`)).map((c) => {
    const which = rules.get(`${c.stack}/${c.logicalId}`);
    return {
      kind: 'production-rule',
      stack: c.stack,
      logicalId: c.logicalId,
      message: c.action === 'remove'
        ? `the ${which} listener rule ${name(c)} would be deleted: after a canary deploy the traffic may sit on the alternate target group, and nothing moves it back first`
        : `the ${which} listener rule ${name(c)} would ${c.action === 'update' ? 'be updated' : c.action} (${c.properties.join(', ') || 'the resource itself'}): ECS owns its weights after the first deploy, and CloudFormation would write the template's back, possibly onto a target group with no tasks`,
    };
  });
}

/** What going from `before` to `after` would do, and every step of it that would fail or misroute traffic. */
export function judgeUpdate(before: TemplateSet, after: TemplateSet): UpdateJudgement {
  const changes = changesOf(before, after);
  const stateful = compareTemplateSets(before, after).losses.filter((l) => l.replaced).map((l) => ({
    kind: 'stateful-replaced' as const,
    stack: l.stack,
    logicalId: l.logicalId,
    message: `${l.type} ${name(l)} ${l.what}${l.because.length > 0 ? ` (${l.because.join(', ')} changed)` : ''}: what it holds would be lost`,
  }));
  return {
    plan: changes.map(({ before: _b, after: _a, ...step }) => step),
    findings: [...collisions(changes), ...shiftedRuleChanges(before, changes), ...stateful],
  };
}

/** One line per step, as the check prints a plan. */
export function describeStep(step: PlanStep): string {
  const props = step.action === 'update' || step.action.endsWith('replace') ? ` [${step.properties.join(', ')}]` : '';
  return `${step.action.padEnd(11)} ${step.type} ${step.logicalId}${step.stack.includes('/') ? ` (${step.stack.slice(step.stack.indexOf('/') + 1)})` : ''}${props}`;
}
