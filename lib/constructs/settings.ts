/**
 * The deployment settings, read from CDK context (cdk.json, or `-c key=value`).
 *
 * Every key is listed here with what it sets and its default, and docs/infrastructure.md
 * documents the same list (a test checks that it does). A value from the command line arrives as a string,
 * so numbers and booleans are parsed from strings as well as taken as JSON values.
 * Every problem, of any key, is reported in one error.
 */
import { Duration, type Environment } from 'aws-cdk-lib';
import type { Node } from 'constructs';
import { DEFAULT_STAGE, LIMITS, NETWORK_DEFAULTS, OBSERVABILITY_DEFAULTS, SERVICE_DEFAULTS, STACK_DEFAULTS, STAGE_DEFAULTS, STAGES, STORAGE_DEFAULTS, WAF_DEFAULTS, type Stage, type StageDefaults } from '../defaults.js';
import type { JobDefinition } from '../jobs.js';
import { validateBackendStackProps, type BackendStackProps } from './stack.js';
import { JOBS_TABLE, Problems, throwIfAnyProblems } from './validation.js';

type Kind = 'string' | 'integer' | 'boolean';

interface Setting {
  readonly kind: Kind;
  /** What the key sets, for the docs. */
  readonly doc: string;
  /** The default, as the docs show it. */
  readonly default: string | number | boolean | undefined;
  /** The default's name in STAGE_DEFAULTS, when it follows the stage. */
  readonly perStage?: keyof StageDefaults;
}

const setting = (kind: Kind, doc: string, value?: string | number | boolean): Setting => ({ kind, doc, default: value });
/** A setting whose default is the stage's (STAGE_DEFAULTS in lib/defaults.ts). */
const staged = (kind: Kind, doc: string, perStage: keyof StageDefaults): Setting => ({ kind, doc, default: undefined, perStage });

/** Every context key the app reads. */
export const CONTEXT_SETTINGS = {
  stage: setting('string', `The environment: ${STAGES.join(' or ')}; its defaults fill every setting marked "per stage"`, DEFAULT_STAGE),
  stackName: setting('string', 'The CloudFormation stack name; also the prefix of rule, alarm and dashboard names', `${STACK_DEFAULTS.stackName}-<stage>`),
  account: setting('string', 'AWS account to pin the stack to (with `region`); unset, the stack is environment-agnostic'),
  region: setting('string', 'AWS region to pin the stack to (with `account`)'),
  alertEmail: setting('string', 'Receives every alarm and crash alert (required; confirm the subscription email AWS sends); `none` when the alert topic is subscribed elsewhere'),
  minCapacity: staged('integer', 'Fewest API tasks auto-scaling keeps', 'minCapacity'),
  maxCapacity: staged('integer', 'Most API tasks auto-scaling starts', 'maxCapacity'),
  canaryDeploys: staged('boolean', 'Deploy the API with ECS canary deploys (a slice of traffic first, alarms that roll back, a bake time) instead of rolling ones', 'canaryDeploys'),
  cpu: setting('integer', 'Fargate CPU units per API task', SERVICE_DEFAULTS.cpu),
  memoryMiB: setting('integer', 'Fargate memory (MiB) per API task; must suit `cpu`', SERVICE_DEFAULTS.memoryMiB),
  targetCpuPercent: setting('integer', 'Auto-scaling target: average CPU of the API, percent', SERVICE_DEFAULTS.targetCpuPercent),
  requestsPerTarget: setting('integer', 'Auto-scaling target: ALB requests per API task per minute', SERVICE_DEFAULTS.requestsPerTarget),
  stopTimeout: setting('integer', 'Seconds from SIGTERM to SIGKILL for an API task (2-120); SHUTDOWN_TIMEOUT_MS is derived from it', SERVICE_DEFAULTS.stopTimeoutSeconds),
  deregistrationDelay: setting('integer', 'Seconds the ALB drains a task before ECS stops it (0-3600)', SERVICE_DEFAULTS.deregistrationDelaySeconds),
  albIdleTimeout: setting('integer', 'ALB idle timeout in seconds (1-4000); KEEP_ALIVE_TIMEOUT_MS is derived from it', SERVICE_DEFAULTS.albIdleTimeoutSeconds),
  certificateArn: setting('string', 'An existing ACM certificate\'s ARN: HTTPS on 443 and a permanent redirect from 80 (instead of the domain\'s new certificate)'),
  domainName: setting('string', 'The API\'s domain, like api.acme.io (with `hostedZoneId` and `hostedZoneName`): a DNS-validated certificate, HTTPS on 443, a permanent redirect from 80, and an alias record'),
  hostedZoneId: setting('string', 'The Route 53 public hosted zone of `domainName`, by id (no lookup)'),
  hostedZoneName: setting('string', 'That hosted zone\'s name, like acme.io'),
  allowHttp: setting('boolean', 'Lets stage prod serve plain HTTP, for a stack fronted by something else that terminates TLS; without it, prod needs `domainName` or `certificateArn`', false),
  databaseSecretArn: setting('string', 'Complete ARN of an existing database\'s secret (fields host, port, dbname, username, password); unset, a new RDS PostgreSQL instance is created'),
  databaseInstanceType: staged('string', 'New RDS instance class, without `db.`', 'databaseInstanceType'),
  databaseMultiAz: staged('boolean', 'New RDS instance in two availability zones', 'databaseMultiAz'),
  deletionProtection: staged('boolean', 'The new RDS instance and the load balancer refuse deletion', 'deletionProtection'),
  databaseDeletionProtection: staged('boolean', 'The new RDS instance alone refuses deletion (overrides `deletionProtection` for it)', 'deletionProtection'),
  retainData: staged('boolean', 'Keep the database (final snapshot and secret), the log group and the alert key when the stack is deleted or rolled back', 'retainData'),
  natGateways: staged('integer', `NAT gateways, 1 to ${NETWORK_DEFAULTS.maxAzs} (one per availability zone)`, 'natGateways'),
  logRetentionDays: staged('integer', 'Days the tasks\' logs are kept (a CloudWatch Logs value: 1, 3, 5, 7, 14, 30, 60, 90, ...)', 'logRetentionDays'),
  waf: staged('boolean', `An AWS WAF web ACL on the load balancer: rate limits per client IP and per API key, and the AWS managed common rule set (about ${WAF_DEFAULTS.monthlyPriceUsd} USD a month plus ${WAF_DEFAULTS.pricePerMillionRequestsUsd} USD per million requests)`, 'waf'),
  guard: setting('boolean', 'Adds the Control Tower guard rules to synth (what `npm run check:guard` does)'),
  wafRateLimit: setting('integer', 'Requests per client IP in any 5 minutes before WAF blocks it (with `waf`)', WAF_DEFAULTS.rateLimit),
  wafKeyRateLimit: setting('integer', 'Requests per API key (the Authorization header) in any 5 minutes, across every task, before WAF blocks it (with `waf`)', WAF_DEFAULTS.keyRateLimit),
  logLevel: setting('string', 'LOG_LEVEL of every task', OBSERVABILITY_DEFAULTS.logLevel),
  metricsNamespace: setting('string', 'CloudWatch namespace of the job metrics (METRICS_NAMESPACE)', OBSERVABILITY_DEFAULTS.metricsNamespace),
  exportRetentionDays: setting('integer', 'Days an export is kept in the export bucket', STORAGE_DEFAULTS.exportRetentionDays),
} as const satisfies Record<string, Setting>;

export type ContextKey = keyof typeof CONTEXT_SETTINGS;

export interface Settings {
  readonly stackName: string;
  readonly props: BackendStackProps;
}

/** Context keys the CDK itself and its CLI use; they are not ours to check. */
const FOREIGN_KEY = /^(@aws-cdk\/|aws:|aws-cdk:|cdk[-:]|acknowledged-issue-numbers$|cli-telemetry$)/;

/**
 * Reads the settings from `node`'s context (the App's). Throws an InvalidSettingsError that
 * lists every problem: unparseable values, unknown keys that look like typos of ours, values
 * out of range, and the jobs table's problems.
 */
export function settingsFromContext(node: Node, options: { readonly jobs?: readonly JobDefinition[] } = {}): Settings {
  const problems: string[] = [];
  const raw = (key: ContextKey): unknown => {
    const value = node.tryGetContext(key);
    return value === '' ? undefined : value;
  };
  const str = (key: ContextKey): string | undefined => {
    const value = raw(key);
    if (value === undefined || typeof value === 'string') return value;
    problems.push(`${key} must be a string, got ${JSON.stringify(value)}`);
    return undefined;
  };
  const int = (key: ContextKey): number | undefined => {
    const value = raw(key);
    if (value === undefined) return undefined;
    const n = typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value) : value;
    if (typeof n === 'number' && Number.isInteger(n)) return n;
    problems.push(`${key} must be a whole number, got ${JSON.stringify(value)}`);
    return undefined;
  };
  const bool = (key: ContextKey): boolean | undefined => {
    const value = raw(key);
    if (value === undefined || typeof value === 'boolean') return value;
    if (value === 'true' || value === 'false') return value === 'true';
    problems.push(`${key} must be true or false, got ${JSON.stringify(value)}`);
    return undefined;
  };
  // A Duration cannot even hold a negative number, so the range is checked here, in the construct's words.
  const range = new Problems();
  const seconds = (key: 'stopTimeout' | 'deregistrationDelay' | 'albIdleTimeout'): Duration | undefined => {
    const n = int(key);
    return n !== undefined && range.seconds(key, n, LIMITS[`${key}Seconds`]) ? Duration.seconds(n) : undefined;
  };

  const known = Object.keys(CONTEXT_SETTINGS);
  for (const key of Object.keys(node.getAllContext())) {
    if (FOREIGN_KEY.test(key) || known.includes(key)) continue;
    const meant = known.find((k) => k.toLowerCase() === key.toLowerCase());
    if (meant) problems.push(`unknown context key ${JSON.stringify(key)}: did you mean ${JSON.stringify(meant)}?`);
  }

  const account = str('account');
  const region = str('region');
  if ((account === undefined) !== (region === undefined)) {
    problems.push(`account and region must be set together, got account ${JSON.stringify(account)} and region ${JSON.stringify(region)}`);
  }
  const env: Environment | undefined = account !== undefined && region !== undefined ? { account, region } : undefined;
  const stage = (str('stage') ?? DEFAULT_STAGE) as Stage;
  const stackName = str('stackName') ?? `${STACK_DEFAULTS.stackName}-${stage}`;
  const deletionProtection = bool('deletionProtection');
  const certificateArn = str('certificateArn');
  const domainName = str('domainName');
  const hostedZoneId = str('hostedZoneId');
  const hostedZoneName = str('hostedZoneName');
  const domain = domainName !== undefined || hostedZoneId !== undefined || hostedZoneName !== undefined
    ? { domainName: domainName!, hostedZoneId: hostedZoneId!, hostedZoneName: hostedZoneName! }
    : undefined;
  // Keys of every admin and account would cross the internet in clear text.
  if (stage === 'prod' && certificateArn === undefined && domain === undefined && bool('allowHttp') !== true) {
    problems.push('stage prod serves the API over HTTPS: set domainName, hostedZoneId and hostedZoneName (a new certificate), or certificateArn (an existing one); or -c allowHttp=true when something in front terminates TLS');
  }

  const props: BackendStackProps = {
    env,
    stackName,
    description: 'ECS SaaS backend: API on Fargate behind an ALB, scheduled jobs, alerts and the database',
    alertEmail: str('alertEmail') ?? '',
    stage,
    deletionProtection,
    retainData: bool('retainData'),
    // Unset, the stage decides (on in prod).
    waf: (bool('waf') ?? STAGE_DEFAULTS[stage]?.waf) ? { rateLimit: int('wafRateLimit'), keyRateLimit: int('wafKeyRateLimit') } : false,
    jobs: options.jobs,
    service: {
      minCapacity: int('minCapacity'),
      maxCapacity: int('maxCapacity'),
      canaryDeploys: bool('canaryDeploys'),
      cpu: int('cpu'),
      memoryMiB: int('memoryMiB'),
      targetCpuPercent: int('targetCpuPercent'),
      requestsPerTarget: int('requestsPerTarget'),
      stopTimeout: seconds('stopTimeout'),
      deregistrationDelay: seconds('deregistrationDelay'),
      albIdleTimeout: seconds('albIdleTimeout'),
      certificateArn,
      domain,
      deletionProtection,
    },
    database: {
      secretArn: str('databaseSecretArn'),
      instanceType: str('databaseInstanceType'),
      multiAz: bool('databaseMultiAz'),
      deletionProtection: bool('databaseDeletionProtection'),
    },
    natGateways: int('natGateways'),
    logRetentionDays: int('logRetentionDays'),
    logLevel: str('logLevel'),
    metricsNamespace: str('metricsNamespace'),
    exportRetentionDays: int('exportRetentionDays'),
    now: new Date(),
  };

  const { settings, jobsTable } = validateBackendStackProps(stackName, props);
  throwIfAnyProblems([
    { what: `The settings (cdk.json context) of stack ${stackName}`, problems: [...problems, ...range.list, ...settings], plural: true },
    { what: JOBS_TABLE, problems: jobsTable },
  ]);
  return { stackName, props };
}
