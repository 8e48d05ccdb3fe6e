/**
 * Every default and every AWS limit of the infrastructure, in one place.
 *
 * The constructs read their defaults from here and the context reader (lib/constructs/settings.ts)
 * documents the same values, so a reader sees at a glance what a bare `cdk deploy` builds.
 * Numbers that cross into the container (stopTimeout, the ALB idle timeout, the metrics
 * namespace) come from lib/timing.ts and lib/metrics.ts, which the container reads too.
 */
import { ALB_DEFAULT_IDLE_TIMEOUT_SECONDS, FARGATE_MAX_STOP_TIMEOUT_SECONDS, FARGATE_MIN_STOP_TIMEOUT_SECONDS } from './timing.js';
import { DEFAULT_METRICS_NAMESPACE } from './metrics.js';

/** The stack itself. */
export const STACK_DEFAULTS = {
  /** The CloudFormation stack name, and the prefix of the rule, state machine, alarm and task-family names. */
  stackName: 'EcsSaasBackend',
} as const;

/** The application container, as the stack runs it in every task definition. */
export const CONTAINER = {
  /** The container's name; the rules' container overrides address it by this name. */
  name: 'app',
  /** The HTTP port the server listens on (PORT); the target group forwards to it. */
  port: 8080,
  /** uid:gid of the image's non-root `node` user (see the Dockerfile). */
  user: '1000:1000',
  /** The writable scratch volume's mount point; the root filesystem is read-only. */
  scratchPath: '/tmp',
  /** EXPORT_DIR: where weekly-export stages its CSV, inside the scratch volume. */
  exportDir: '/tmp/exports',
  /** `node dist/app/main.js` is the image's CMD; a job appends its name. */
  command: ['node', 'dist/app/main.js'],
} as const;

/** The web service (API) behind the ALB. */
export const SERVICE_DEFAULTS = {
  /**
   * Auto-scaling keeps the task count between these. The template gives the service no
   * DesiredCount, so a deploy never resets the count auto-scaling chose: ECS creates the service
   * with one task and registering the scalable target raises it to minCapacity.
   */
  minCapacity: 2,
  maxCapacity: 6,
  /** Deployments start the new tasks before stopping the old: up to twice maxCapacity at once (lib/pool-budget.ts counts them). */
  maxHealthyPercent: 200,
  /** Fargate CPU units and memory (MiB) per API task. */
  cpu: 512,
  memoryMiB: 1024,
  /** SIGTERM to SIGKILL; the container's SHUTDOWN_TIMEOUT_MS is derived from it. */
  stopTimeoutSeconds: 60,
  /** ALB connection draining before ECS sends SIGTERM; AWS's own default of 300 s makes every deploy slow. */
  deregistrationDelaySeconds: 30,
  /** The ALB idle timeout; the container's KEEP_ALIVE_TIMEOUT_MS is derived from it. */
  albIdleTimeoutSeconds: ALB_DEFAULT_IDLE_TIMEOUT_SECONDS,
  /** Target tracking: average CPU of the service. */
  targetCpuPercent: 60,
  /** Target tracking: ALB requests per task per minute. */
  requestsPerTarget: 1_000,
  /** The liveness endpoint: 503 only for what replacing the task fixes (draining, event loop stalled, pool broken), never for a slow database. */
  healthCheckPath: '/livez',
  healthCheckIntervalSeconds: 10,
  healthCheckTimeoutSeconds: 5,
  healthyThresholdCount: 2,
  unhealthyThresholdCount: 3,
  /** ECS ignores failing ALB health checks this long after a task starts (migrations, warm-up). */
  healthCheckGracePeriodSeconds: 60,
  /** awslogs buffer for the API: logging never blocks a request. */
  logBufferBytes: 25 * 1024 * 1024,
  /** The no-healthy-targets alarm fires after this many minutes with no task passing /readyz. */
  noHealthyTargetsMinutes: 3,
  /** The 5xx alarm fires at this many 5xx answers (load balancer's and tasks') in one period... */
  serverErrorsThreshold: 10,
  /** ...of this many minutes. */
  serverErrorsPeriodMinutes: 5,
  /** A canary deploy first sends this percentage of requests to the new tasks... */
  canaryPercent: 10,
  /** ...for this many minutes, while the deployment alarms watch, then all of them. */
  canaryBakeMinutes: 5,
  /** The old tasks stay up this long after all traffic moved, so a rollback is one listener change. */
  deploymentBakeMinutes: 5,
  /** The latency deployment alarm: p99 target response time above this many seconds... */
  p99LatencySeconds: 2,
  /** ...or any unhealthy target, for this many one-minute periods in a row, rolls a deploy back. */
  deploymentAlarmMinutes: 2,
  /** A target group's 5xx rate (its tasks' 5xx over its requests) above this, during a deploy, rolls it back... */
  deployment5xxRatePercent: 5,
  /** ...judged, like its p99, only in minutes with at least this many requests to the group: below it, a rate is noise. */
  deploymentMinRequestsPerMinute: 20,
} as const;

/** The scheduled jobs. */
export const JOB_DEFAULTS = {
  /**
   * The longest stopTimeout Fargate allows: a job interrupted by SIGTERM (a Spot reclaim, a
   * stopped task) gets the most time to save its checkpoint before SIGKILL.
   */
  stopTimeoutSeconds: FARGATE_MAX_STOP_TIMEOUT_SECONDS,
  /** EventBridge retries a failed StartExecution of a job's state machine this many times... */
  retryAttempts: 3,
  /** ...for at most this long, or the schedule's shortest gap if that is shorter. */
  maxEventAgeSeconds: 60 * 60,
  /** The failure, delivery and dead-letter alarms look at this period. */
  alarmPeriodSeconds: 5 * 60,
  /** How long an undelivered schedule event waits in a job's dead-letter queue. */
  deadLetterRetentionDays: 14,
} as const;

/** The migrations task each deploy runs before the API's new tasks (lib/constructs/migrations.ts). */
export const MIGRATION_DEFAULTS = {
  /** The smallest Fargate size: a migration's work happens in the database. */
  cpu: 256,
  memoryMiB: 512,
  /** A SIGTERM (a stopped deploy) lets node-pg-migrate's transaction roll back before SIGKILL. */
  stopTimeoutSeconds: 30,
  /** The awslogs stream prefix: the task's log stream is migrate/app/<task id>. */
  streamPrefix: 'migrate',
  /** How often the deploy asks ECS whether the task has stopped. */
  pollSeconds: 10,
  /** The deploy fails if the task is still running after this long (a lock-heavy migration, a stuck lock). */
  timeoutMinutes: 30,
} as const;

/** The smoke test a canary deploy's new revision passes before production traffic (lib/constructs/release-smoke-test.ts). */
export const RELEASE_SMOKE_DEFAULTS = {
  /** Tries before the hook fails the deploy: one lost request must not roll a good release back. */
  attempts: 3,
  /** Seconds ECS waits before it runs the hook again after a failed try. */
  retrySeconds: 15,
} as const;

/** A new RDS PostgreSQL instance (when no existing database's secret is given). */
export const DATABASE_DEFAULTS = {
  instanceType: 't4g.micro',
  allocatedStorageGiB: 20,
  maxAllocatedStorageGiB: 100,
  backupRetentionDays: 7,
  multiAz: false,
  deletionProtection: true,
  databaseName: 'app',
  /** The master user: only the migrations task logs in as it. */
  username: 'app',
  /** The login role of the API and the jobs, which the migrations task creates (app/login-role.ts). */
  loginUsername: 'ecs_saas_login',
  /** DB_SSL in AWS: TLS with the server's certificate checked against the RDS CA bundle in the image. */
  ssl: 'verify',
} as const;

export const NETWORK_DEFAULTS = {
  maxAzs: 2,
  /** One NAT gateway for the whole VPC: the cheapest egress for the private subnets. */
  natGateways: 1,
} as const;

export const OBSERVABILITY_DEFAULTS = {
  /** Must be one of CloudWatch Logs' retention values (1, 3, 5, 7, 14, 30, 60, 90, ...). */
  logRetentionDays: 30,
  metricsNamespace: DEFAULT_METRICS_NAMESPACE,
  logLevel: 'info',
} as const;

export const STORAGE_DEFAULTS = {
  /** Exports older than this are deleted. */
  exportRetentionDays: 365,
  /** ALB access logs, S3 server access logs and VPC flow logs older than this are deleted. */
  accessLogRetentionDays: 90,
} as const;

/** The AWS WAF web ACL in front of the load balancer (context `waf`; on by default in prod). */
export const WAF_DEFAULTS = {
  /** Requests one client IP may send in any 5 minutes (WAF's rate-based window) before it is blocked. */
  rateLimit: 2_000,
  /**
   * Requests one API key (the Authorization header) may send in any 5 minutes across every
   * task before it is blocked: 20 a second. The in-task limit (RATE_LIMIT_REQUESTS) is the
   * backstop behind it.
   */
  keyRateLimit: 6_000,
  /** AWS WAF pricing: 5 USD per web ACL and 1 USD per rule (the two rate rules and the managed rule group) a month... */
  monthlyPriceUsd: 5 + 3 * 1,
  /** ...plus this per million requests inspected. */
  pricePerMillionRequestsUsd: 0.6,
} as const;

/** The environments `-c stage=<name>` selects; everything else about a deploy is the same. */
export const STAGES = ['dev', 'prod'] as const;
export type Stage = (typeof STAGES)[number];
/** A bare `cdk deploy` builds the cheap, disposable stage; production is asked for by name. */
export const DEFAULT_STAGE: Stage = 'dev';

/**
 * What differs between the stages. Each value is only a default: a context key of the same
 * name (lib/constructs/settings.ts) still overrides it.
 */
export const STAGE_DEFAULTS = {
  dev: {
    minCapacity: 1,
    maxCapacity: 2,
    databaseInstanceType: 't4g.micro',
    databaseMultiAz: false,
    natGateways: 1,
    logRetentionDays: 7,
    /** Deletion protection of the database and the load balancer. */
    deletionProtection: false,
    /**
     * Keep the database (a final snapshot, and its secret), the log group and the alert key
     * when the stack is deleted or a first deploy rolls back. Off, they go with the stack, so a
     * failed first deploy rolls back cleanly and a teardown leaves nothing behind.
     */
    retainData: false,
    /** Rolling deploys: the new tasks replace the old as soon as they pass the health check. */
    canaryDeploys: false,
    /** No web ACL: its monthly price buys nothing on a stage no one outside uses. */
    waf: false,
  },
  prod: {
    minCapacity: 2,
    maxCapacity: 6,
    databaseInstanceType: 't4g.small',
    databaseMultiAz: true,
    natGateways: 2,
    /** A year: the Control Tower guard rule's minimum, and a year of billing disputes. */
    logRetentionDays: 365,
    deletionProtection: true,
    retainData: true,
    /** ECS canary deploys: a slice of traffic first, deployment alarms that roll back, old tasks kept through a bake time. */
    canaryDeploys: true,
    /** The web ACL: rate limits per client IP and per API key at the edge, and AWS's common rule set. */
    waf: true,
  },
} as const satisfies Record<Stage, unknown>;

export type StageDefaults = (typeof STAGE_DEFAULTS)[Stage];

/** What AWS accepts; validation reports a value outside these with the value itself. */
export const LIMITS = {
  stopTimeoutSeconds: { min: FARGATE_MIN_STOP_TIMEOUT_SECONDS, max: FARGATE_MAX_STOP_TIMEOUT_SECONDS },
  /** Target group deregistration_delay.timeout_seconds. */
  deregistrationDelaySeconds: { min: 0, max: 3_600 },
  /** ALB idle_timeout.timeout_seconds. */
  albIdleTimeoutSeconds: { min: 1, max: 4_000 },
  /** EventBridge rule names. */
  ruleNameLength: 64,
  /** An alarm's Period × EvaluationPeriods may not exceed seven days... */
  alarmWindowSeconds: 7 * 24 * 60 * 60,
  /** ...nor one day when its period is under an hour. */
  shortPeriodAlarmWindowSeconds: 24 * 60 * 60,
  /** EventBridge target retry policy. */
  maxEventAgeSeconds: { min: 60, max: 24 * 60 * 60 },
} as const;
