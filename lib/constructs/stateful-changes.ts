/**
 * The stateful guard's judgement: which stateful resources a deploy from one set of templates
 * to another would replace or delete, read with the CDK team's own diff library
 * (@aws-cdk/cloudformation-diff, what `cdk diff` prints), nested stacks included.
 *
 * bin/check-stateful.ts gets the two sides (a synthesized cloud assembly, or the deployed
 * stack's templates) and reports; this module only compares.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fullDiff, ResourceImpact } from '@aws-cdk/cloudformation-diff';

/** Resource types that hold data or a key to it: replacing or deleting one loses what is in it. */
export const STATEFUL_TYPES = [
  'AWS::RDS::DBInstance',
  'AWS::RDS::DBCluster',
  'AWS::RDS::DBSubnetGroup',
  'AWS::RDS::DBParameterGroup',
  'AWS::RDS::DBClusterParameterGroup',
  'AWS::SecretsManager::Secret',
  'AWS::KMS::Key',
  'AWS::S3::Bucket',
  'AWS::Logs::LogGroup',
  'AWS::DynamoDB::Table',
  'AWS::EFS::FileSystem',
  // Messages that could not be delivered (the schedules' dead-letter queues) wait here to be read.
  'AWS::SQS::Queue',
] as const;

/**
 * Updates RDS refuses in place, by resource type and property: they lose nothing, but the deploy
 * fails and rolls back. Moving an instance to other subnets is a migration of its own.
 */
const REFUSED_UPDATES: Record<string, { readonly properties: readonly string[]; readonly what: string }> = {
  'AWS::RDS::DBSubnetGroup': { properties: ['SubnetIds'], what: 'would move the database to other subnets, which RDS refuses while the instance runs in them (the deploy fails)' },
  'AWS::RDS::DBInstance': { properties: ['DBSubnetGroupName'], what: 'would move to another subnet group, which RDS refuses within one VPC (the deploy fails)' },
};

type Template = { Resources?: Record<string, { Type: string; Properties?: Record<string, unknown>; Metadata?: Record<string, unknown> }> } & Record<string, unknown>;

/** A stack's template and its nested stacks', keyed by path: `Stack`, `Stack/NestedLogicalId`, ... */
export type TemplateSet = ReadonlyMap<string, Template>;

/** What would happen to a stateful resource, in the words the report uses. */
const LOSSES: Partial<Record<ResourceImpact, string>> = {
  [ResourceImpact.WILL_REPLACE]: 'would be replaced',
  [ResourceImpact.MAY_REPLACE]: 'may be replaced',
  [ResourceImpact.WILL_DESTROY]: 'would be deleted',
  [ResourceImpact.WILL_ORPHAN]: 'would leave the stack (retained, but no longer managed; a rename then creates an empty twin)',
};

export interface StatefulLoss {
  /** The template's key in its TemplateSet. */
  readonly stack: string;
  readonly logicalId: string;
  readonly type: string;
  /** The construct path from the resource's aws:cdk:path metadata, when it has one. */
  readonly constructPath: string | undefined;
  readonly what: string;
  /** Replaced (rather than deleted, orphaned or refused): what it held is gone while the stack goes on. */
  readonly replaced: boolean;
  /** The properties whose change forces the replacement, when that is why. */
  readonly because: readonly string[];
}

export interface Comparison {
  readonly losses: readonly StatefulLoss[];
  /** Resources changed in any way, stateful or not, across all templates. */
  readonly changedResources: number;
}

/** Compares every template of `before` with its counterpart in `after`; a missing one counts as empty. */
export function compareTemplateSets(before: TemplateSet, after: TemplateSet): Comparison {
  const losses: StatefulLoss[] = [];
  let changedResources = 0;
  const keys = [...new Set([...before.keys(), ...after.keys()])].sort();
  for (const stack of keys) {
    const diff = fullDiff(before.get(stack) ?? {}, after.get(stack) ?? {});
    diff.resources.forEachDifference((logicalId, change) => {
      changedResources += 1;
      const type = change.oldResourceType ?? change.newResourceType ?? '';
      const refused = REFUSED_UPDATES[type];
      const refusedBecause = change.changeImpact === ResourceImpact.WILL_UPDATE ? (refused?.properties ?? []).filter((p) => p in change.propertyUpdates) : [];
      const what = refusedBecause.length > 0 ? refused!.what : LOSSES[change.changeImpact];
      if (what === undefined || !(STATEFUL_TYPES as readonly string[]).includes(change.oldResourceType ?? '')) return;
      const because = refusedBecause.length > 0 ? refusedBecause : Object.entries(change.propertyUpdates)
        .filter(([, p]) => p.changeImpact === ResourceImpact.WILL_REPLACE || p.changeImpact === ResourceImpact.MAY_REPLACE)
        .map(([name]) => name);
      const constructPath = change.oldValue?.Metadata?.['aws:cdk:path'];
      const replaced = refusedBecause.length === 0 && (change.changeImpact === ResourceImpact.WILL_REPLACE || change.changeImpact === ResourceImpact.MAY_REPLACE);
      losses.push({ stack, logicalId, type, constructPath: typeof constructPath === 'string' ? constructPath : undefined, what, replaced, because });
    });
  }
  return { losses, changedResources };
}

/**
 * `losses` split by the acknowledgements a team gave (`--acknowledge`), each a logical id, or
 * `<stack>/<logical id>` for one of the same id in several templates. An acknowledgement that
 * names no loss is returned too: the deploy it was meant for is not this one, so it must not
 * quietly cover the next.
 */
export function acknowledgeLosses(losses: readonly StatefulLoss[], acknowledged: readonly string[]): { readonly accepted: StatefulLoss[]; readonly remaining: StatefulLoss[]; readonly unused: string[] } {
  const names = (loss: StatefulLoss) => [loss.logicalId, `${loss.stack}/${loss.logicalId}`];
  const accepted = losses.filter((loss) => names(loss).some((n) => acknowledged.includes(n)));
  return {
    accepted,
    remaining: losses.filter((loss) => !accepted.includes(loss)),
    unused: acknowledged.filter((a) => !losses.some((loss) => names(loss).includes(a))),
  };
}

/**
 * A loss a team accepted, recorded in the repository (deploy/acknowledged-losses.json) with its
 * reason, so that every later comparison from a base before the change (CI's, a deploy's) accepts
 * it too. It matches only the same resource (template, logical id and type) lost the same way
 * (`because`, when given: the properties that force the replacement), so it cannot cover an
 * unrelated later loss of that resource.
 */
export interface RecordedAcknowledgement {
  readonly stack: string;
  readonly logicalId: string;
  readonly type: string;
  /** The properties whose change forces the replacement. @default - any */
  readonly because?: readonly string[];
  /** Why the loss is accepted: what held the data, and where it went. */
  readonly reason: string;
}

/** Every problem with a recorded acknowledgements file's contents, each naming the entry. */
export function validateRecordedAcknowledgements(value: unknown): string[] {
  if (!Array.isArray(value)) return ['must be a JSON array of { stack, logicalId, type, because?, reason }'];
  return value.flatMap((entry, i) => {
    const e = entry as Record<string, unknown>;
    const problems = (['stack', 'logicalId', 'type', 'reason'] as const)
      .filter((k) => typeof e?.[k] !== 'string' || (e[k] as string).trim() === '')
      .map((k) => `entry ${i}: ${k} must be a non-empty string, got ${JSON.stringify(e?.[k])}`);
    if (e?.because !== undefined && !(Array.isArray(e.because) && e.because.every((b) => typeof b === 'string'))) {
      problems.push(`entry ${i}: because must be a list of property names, got ${JSON.stringify(e.because)}`);
    }
    return problems;
  });
}

/** `losses` split by the recorded acknowledgements; `unused` are the entries that match none. */
export function applyRecordedAcknowledgements(losses: readonly StatefulLoss[], recorded: readonly RecordedAcknowledgement[]): { readonly accepted: { loss: StatefulLoss; reason: string }[]; readonly remaining: StatefulLoss[]; readonly unused: RecordedAcknowledgement[] } {
  const sameSet = (a: readonly string[], b: readonly string[]) => [...a].sort().join() === [...b].sort().join();
  const matches = (loss: StatefulLoss, entry: RecordedAcknowledgement) => entry.stack === loss.stack && entry.logicalId === loss.logicalId
    && entry.type === loss.type && (entry.because === undefined || sameSet(entry.because, loss.because));
  const accepted: { loss: StatefulLoss; reason: string }[] = [];
  const remaining: StatefulLoss[] = [];
  for (const loss of losses) {
    const entry = recorded.find((e) => matches(loss, e));
    if (entry) accepted.push({ loss, reason: entry.reason });
    else remaining.push(loss);
  }
  return { accepted, remaining, unused: recorded.filter((e) => !losses.some((l) => matches(l, e))) };
}

/** One line per loss, naming the resource, as the check prints it. */
export function describeLoss(loss: StatefulLoss): string {
  const where = loss.constructPath ? ` (${loss.constructPath})` : '';
  const because = loss.because.length > 0 ? `: ${loss.because.join(', ')} changed` : '';
  return `${loss.type} ${loss.logicalId}${where} in ${loss.stack} ${loss.what}${because}`;
}

/**
 * The templates of stack `stackName` in the cloud assembly at `dir` (a `cdk synth` output):
 * its template, then each nested stack's, found through the asset path CDK writes on the
 * nested stack resource.
 */
export function templatesOfAssembly(dir: string, stackName: string): TemplateSet {
  const manifest = JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as { artifacts: Record<string, { type: string; properties?: { templateFile?: string } }> };
  const artifact = manifest.artifacts[stackName];
  if (artifact?.type !== 'aws:cloudformation:stack' || !artifact.properties?.templateFile) {
    const stacks = Object.entries(manifest.artifacts).filter(([, a]) => a.type === 'aws:cloudformation:stack').map(([name]) => name);
    throw new Error(`the cloud assembly at ${dir} has no stack ${stackName} (it has ${stacks.join(', ') || 'none'})`);
  }
  const set = new Map<string, Template>();
  const add = (key: string, file: string) => {
    const template = JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as Template;
    set.set(key, template);
    for (const [id, resource] of Object.entries(template.Resources ?? {})) {
      const nested = resource.Metadata?.['aws:asset:path'];
      if (resource.Type === 'AWS::CloudFormation::Stack' && typeof nested === 'string') add(`${key}/${id}`, nested);
    }
  };
  add(stackName, artifact.properties.templateFile);
  return set;
}
