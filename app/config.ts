/**
 * The container's configuration: one schema over the environment, read once at start-up.
 *
 * Every option says its default and what it affects. A bad value stops start-up with one
 * message that names each bad variable and what it accepts (exit code 2, no stack trace).
 * Defaults that mirror the infrastructure come from lib/timing.ts, the same functions the
 * CDK stack uses to set them, so a local run and a deployed task behave alike.
 */
import { z } from 'zod';
import {
  ALB_DEFAULT_IDLE_TIMEOUT_SECONDS,
  ECS_DEFAULT_STOP_TIMEOUT_SECONDS,
  keepAliveTimeoutMs,
  REQUEST_DEADLINE_MS,
  shutdownTimeoutMs,
} from '../lib/timing.js';
import { DEFAULT_METRICS_NAMESPACE } from '../lib/metrics.js';
import { adminApiKey } from './admin-key.js';
import { UsageError } from './errors.js';
import { SCHEDULED_TIME_SKEW } from './jobs/args.js';
import { LOGIN_ROLE_NAME, PRINTABLE_ASCII, type LoginRole } from './login-role.js';

/** A login role's password shorter than this is refused (the stack generates 30 characters). */
export const LOGIN_PASSWORD_MIN_LENGTH = 16;

/** The ALB accepts idle timeouts up to 4,000 s, so no sane keep-alive exceeds this. */
const MAX_KEEP_ALIVE_TIMEOUT_MS = keepAliveTimeoutMs(4_000);

const int = (what: string, min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, { message: `accepts a whole number ${what}` })
    .transform(Number)
    .pipe(z.number().int().min(min, { message: `accepts ${min} to ${max} ${what}` }).max(max, { message: `accepts ${min} to ${max} ${what}` }));

const bool = z
  .string()
  .trim()
  .toLowerCase()
  .pipe(z.enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'accepts true or false' }))
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const postgresUrl = z
  .string()
  .trim()
  .refine((v) => {
    try {
      return ['postgres:', 'postgresql:'].includes(new URL(v).protocol);
    } catch {
      return false;
    }
  }, { message: 'accepts a postgres:// or postgresql:// URL' });

const optional = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (v === '' ? undefined : v), schema.optional());

const FAULT = /^(fail-attempts)=(\d+|all)$|^(timeout-ms)=(\d+)$|^(crash)=(exception|rejection)$/;
const jobFaults = z
  .string()
  .trim()
  .refine((v) => v.split(',').every((part) => FAULT.test(part.trim())), {
    message: 'accepts comma-separated fail-attempts=<n|all>, timeout-ms=<n> and crash=<exception|rejection>',
  })
  .transform((v): JobFaults => {
    const faults: { failAttempts?: number; timeoutMs?: number; crash?: 'exception' | 'rejection' } = {};
    for (const part of v.split(',')) {
      const [key, value] = part.trim().split('=') as [string, string];
      if (key === 'fail-attempts') faults.failAttempts = value === 'all' ? Infinity : Number(value);
      else if (key === 'crash') faults.crash = value as 'exception' | 'rejection';
      else faults.timeoutMs = Number(value);
    }
    return faults;
  });

const schema = z.object({
  /** Postgres connection URL. When unset, the DB_* fields below are used (ECS injects them from the database secret). */
  DATABASE_URL: optional(postgresUrl),
  /** Database host, port, name, user and password: the fields of an RDS secret, injected by ECS as secrets. */
  DB_HOST: optional(z.string().min(1)),
  DB_PORT: optional(int('(a TCP port)', 1, 65_535)),
  DB_NAME: optional(z.string().min(1)),
  DB_USER: optional(z.string().min(1)),
  DB_PASSWORD: optional(z.string()),
  /**
   * The login role of the API and the jobs, and its password: the migrate command creates or
   * updates that role after migrating (app/login-role.ts). In AWS, ECS injects both into the
   * migrations task from the login secret; no other command reads them.
   */
  DB_LOGIN_ROLE: optional(z.string().trim().regex(LOGIN_ROLE_NAME, { message: 'accepts a lower-case Postgres role name (letters, digits and _, at most 63)' })),
  DB_LOGIN_PASSWORD: optional(z.string().min(LOGIN_PASSWORD_MIN_LENGTH, { message: `accepts a password of at least ${LOGIN_PASSWORD_MIN_LENGTH} characters` }).regex(PRINTABLE_ASCII, { message: 'accepts printable ASCII without spaces' })),
  /** TLS to the database: off, no-verify (encrypt only), or verify (encrypt and check the server's certificate). */
  DB_SSL: z.enum(['off', 'no-verify', 'verify'], { message: 'accepts off, no-verify or verify' }).default('off'),
  /** Connections in the pool; a worker's lock holds one of them for as long as it leads. */
  DB_POOL_MAX: int('(connections)', 2, 1_000).default(10),
  /** Longest wait for a free pooled connection; an API request that waits longer answers 503 with Retry-After. */
  DB_POOL_WAIT_MS: int('(milliseconds)', 1, 600_000).default(2_000),
  /** Postgres cancels an API query (and a worker batch) that runs longer; the request answers 503 with Retry-After. 0 turns it off. */
  DB_STATEMENT_TIMEOUT_MS: int('(milliseconds, 0 for none)', 0, 3_600_000).default(5_000),
  /**
   * The server applies pending migrations before it listens. The stack sets it false: in AWS a
   * deploy's one-off migrations task applies them before any new API task starts.
   */
  MIGRATE_ON_START: bool.default(true),
  /** Gives up waiting for another process's migration after this long: start-up then exits 1, naming the lock's holder. */
  MIGRATION_LOCK_TIMEOUT_MS: int('(milliseconds)', 1, 3_600_000).default(45_000),

  /** The HTTP port. */
  PORT: int('(a TCP port, 0 for any free one)', 0, 65_535).default(3000),
  /** pino level. */
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      message: 'accepts fatal, error, warn, info, debug, trace or silent',
    })
    .default('info'),
  /** The whole drain's deadline, SIGTERM to exit. Derived from stopTimeout in the stack; locally from ECS's default stopTimeout. */
  SHUTDOWN_TIMEOUT_MS: int('(milliseconds)', 1, 120_000).default(shutdownTimeoutMs(ECS_DEFAULT_STOP_TIMEOUT_SECONDS)),
  /** How long /readyz answers 503 before the listener closes, for load balancers that still route meanwhile. */
  PRE_STOP_DELAY_MS: int('(milliseconds)', 0, 120_000).default(0),
  /** How long an idle keep-alive socket stays open; must exceed the load balancer's idle timeout. */
  KEEP_ALIVE_TIMEOUT_MS: int('(milliseconds)', 1, MAX_KEEP_ALIVE_TIMEOUT_MS).default(keepAliveTimeoutMs(ALB_DEFAULT_IDLE_TIMEOUT_SECONDS)),
  /**
   * Longest a client may take to send a request's headers. Node counts it from the request's
   * first byte, not while a keep-alive socket waits idle, so it need not exceed the ALB's idle
   * timeout; the ALB forwards headers whole, so only a slow (or hostile) client comes near it.
   */
  HEADERS_TIMEOUT_MS: int('(milliseconds)', 100, 600_000).default(10_000),
  /**
   * Longest a client may take to send a whole request, headers and body. The largest body
   * (BODY_LIMIT_BYTES, 100 KiB) needs under 30 s at 4 KiB/s; a client trickling slower gets 408.
   * Handlers are not bound by it: it stops when the request has arrived.
   */
  REQUEST_TIMEOUT_MS: int('(milliseconds)', 100, 3_600_000).default(30_000),
  /** Largest JSON body accepted, in bytes. */
  BODY_LIMIT_BYTES: int('(bytes)', 1, 10 * 1024 * 1024).default(100 * 1024),
  /**
   * After an answer given before the body has arrived (401, 403, 405, 413, 415, any error),
   * the connection reads at most this many more bytes of it, then closes (app/early-answer.ts).
   */
  EARLY_ANSWER_DRAIN_BYTES: int('(bytes)', 0, 16 * 1024 * 1024).default(64 * 1024),
  /** ...and stays open at most this long after that answer. */
  EARLY_ANSWER_DRAIN_MS: int('(milliseconds)', 0, 60_000).default(1_000),
  /**
   * Every keyed request is answered within this long: past it, 503 DEADLINE_EXCEEDED with
   * Retry-After, and its database connection is closed (app/deadline.ts). The stack derives it
   * from the ALB's idle timeout (lib/timing.ts), so the task answers before the ALB gives up.
   */
  REQUEST_DEADLINE_MS: int('(milliseconds)', 100, 600_000).default(REQUEST_DEADLINE_MS),
  /** Requests one account key may make per RATE_LIMIT_WINDOW_MS on one task; then 429 (app/rate-limit.ts). 0 turns the limit off. */
  RATE_LIMIT_REQUESTS: int('(requests, 0 for no limit)', 0, 1_000_000_000).default(1_200),
  /** The same for the operator (the admin key). */
  RATE_LIMIT_OPERATOR_REQUESTS: int('(requests, 0 for no limit)', 0, 1_000_000_000).default(6_000),
  /** The rate limit's window. */
  RATE_LIMIT_WINDOW_MS: int('(milliseconds)', 1_000, 3_600_000).default(60_000),
  /** Keys the in-task limiter counts at once; past it the oldest key's count is dropped, so its memory is bounded. */
  RATE_LIMIT_KEYS: int('(keys)', 1, 10_000_000).default(10_000),
  /** The operator's API key (Bearer): at least 32 random-looking characters (app/admin-key.ts). In AWS, ECS injects it from Secrets Manager. Unset: only account keys work. */
  ADMIN_API_KEY: optional(adminApiKey),
  /** Turns on GET /debug/sleep, for the shutdown tests and benchmarks. Never in production. */
  ENABLE_DEBUG_ROUTES: bool.default(false),
  /** Runs the in-process background workers (each one leads on one replica at a time). */
  ENABLE_WORKERS: bool.default(true),
  /** Period of the usage-summary refresh worker. */
  USAGE_SUMMARY_REFRESH_MS: int('(milliseconds)', 100, 86_400_000).default(60_000),
  /** A worker with no completed batch on this replica, and no live leader elsewhere, for this many periods is reported stalled (log line and EMF metric). */
  WORKER_STALL_PERIODS: int('(periods)', 1, 1_000).default(3),

  /** How often a running job records its heartbeat and progress. */
  HEARTBEAT_INTERVAL_MS: int('(milliseconds)', 100, 3_600_000).default(15_000),
  /** CloudWatch namespace of the jobs' EMF metrics; the stack's alarms read the same one. */
  METRICS_NAMESPACE: z.string().trim().min(1, { message: 'accepts a non-empty CloudWatch namespace' }).default(DEFAULT_METRICS_NAMESPACE),
  /** SNS topic for job failure alerts. Unset locally: the alert is logged instead. */
  ALERT_TOPIC_ARN: optional(z.string().trim().regex(/^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[\w-]+$/, { message: 'accepts an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)' })),
  /** Where weekly-export writes its CSV locally (and stages it before an upload). */
  EXPORT_DIR: z.string().trim().min(1).default('.exports'),
  /** S3 bucket for weekly-export; unset means local files only. */
  EXPORT_BUCKET: optional(z.string().trim().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, { message: 'accepts an S3 bucket name' })),
  /** Items per batch of every job (accounts for billing-run and report-aggregation, rows for data-cleanup, invoices per page for weekly-export): one short statement and one checkpoint each. */
  JOB_BATCH_SIZE: int('(items per batch)', 1, 1_000_000).default(5_000),
  /**
   * Batches a job runs side by side, each on a connection of its pool (billing-run): on a
   * database with more than one core, the run takes less time than one statement would.
   * At most DB_POOL_MAX; 1 runs them one after another.
   */
  JOB_BATCH_CONCURRENCY: int('(batches at once)', 1, 16).default(2),
  /** The first in-process retry of a failed job attempt waits about this long; each next one twice as long (with jitter, at most 60 s). */
  JOB_RETRY_BACKOFF_MS: int('(milliseconds)', 0, 600_000).default(2_000),
  /** After a lost database connection (restart, terminated backend, reset), the job reconnects after about this long, doubling per try (separate from JOB_RETRY_BACKOFF_MS). */
  JOB_RECONNECT_BACKOFF_MS: int('(milliseconds)', 0, 600_000).default(250),
  /** Postgres cancels a job statement that runs longer (one batch); longer than the API's limit. 0 turns it off. */
  JOB_STATEMENT_TIMEOUT_MS: int('(milliseconds, 0 for none)', 0, 86_400_000).default(300_000),
  /** A scheduled time may be at most this far in the future (clock skew between the scheduler and the task); later is refused with exit 2. */
  SCHEDULED_TIME_SKEW_MS: int('(milliseconds)', 0, SCHEDULED_TIME_SKEW.maxMs).default(SCHEDULED_TIME_SKEW.defaultMs),
  /** data-cleanup deletes usage older than this, once invoiced and rolled up; report-aggregation refuses days older than this. */
  USAGE_RETENTION_DAYS: int('(days)', 1, 36_500).default(400),
  /** data-cleanup deletes job_runs attempts that finished longer ago than this. */
  JOB_RUNS_RETENTION_DAYS: int('(days)', 1, 36_500).default(90),
  /**
   * Tracing (OpenTelemetry): off; console (spans as JSON lines on stderr); file (appended to
   * TRACES_FILE); xray (X-Ray's OTLP endpoint with SigV4, the stack's setting). Off by default.
   */
  TRACES: z.enum(['off', 'console', 'file', 'xray'], { message: 'accepts off, console, file or xray' }).default('off'),
  /** The share of traces exported at random, 0 to 1; every failed request and every job run is kept whatever it is. */
  TRACES_SAMPLE_RATIO: z
    .string()
    .trim()
    .regex(/^(0(\.\d+)?|1(\.0+)?)$/, { message: 'accepts a ratio from 0 to 1, such as 0.05' })
    .transform(Number)
    .default(0.05),
  /** Where TRACES=file appends its spans, one JSON line each. */
  TRACES_FILE: z.string().trim().min(1).default('.traces.jsonl'),
  /** Set by a job's state machine: the Step Functions execution that started the task, which the run's trace names. */
  SFN_EXECUTION_ARN: optional(z.string().trim().regex(/^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:execution:[\w.:-]+$/, { message: 'accepts a Step Functions execution ARN' })),
  /** Makes job runs fail or time out on purpose, for the runner's tests; refused unless NODE_ENV=test. */
  JOB_FAULT_INJECTION: optional(jobFaults),
  /** Only JOB_FAULT_INJECTION reads it. */
  NODE_ENV: optional(z.string().trim()),
});

/** JOB_FAULT_INJECTION, parsed. */
export interface JobFaults {
  /** The first N attempts of each job process fail at their start (Infinity: all of them). */
  readonly failAttempts?: number;
  /** Replaces the job's timeout from the jobs table. */
  readonly timeoutMs?: number;
  /** Crashes the process (an uncaught exception or an unhandled rejection) as the first attempt starts. */
  readonly crash?: 'exception' | 'rejection';
}

/** Every variable the container reads; the README's configuration table must name each one (a test checks). */
export const CONFIG_VARIABLES = Object.keys(schema.shape) as (keyof typeof schema.shape)[];

export type Config = z.infer<typeof schema> & {
  /** node-postgres connection settings derived from DATABASE_URL or the DB_* fields. */
  readonly database: DatabaseSettings;
  /** DB_LOGIN_ROLE and DB_LOGIN_PASSWORD, when both are set. */
  readonly loginRole: LoginRole | undefined;
  /** http.Server headersTimeout (HEADERS_TIMEOUT_MS). */
  readonly headersTimeoutMs: number;
  /** http.Server requestTimeout (REQUEST_TIMEOUT_MS). */
  readonly requestTimeoutMs: number;
  /** How often Node checks those two: a tenth of the shorter, so a slow client is cut within 10% of its bound. */
  readonly connectionsCheckingIntervalMs: number;
};

export interface DatabaseSettings {
  readonly connectionString?: string;
  readonly host?: string;
  readonly port?: number;
  readonly database?: string;
  readonly user?: string;
  readonly password?: string;
  readonly ssl: false | { rejectUnauthorized: boolean };
}

/** Reads and validates the configuration; throws a UsageError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const name = String(issue.path[0]);
      const value = env[name];
      return `  ${name}=${value === undefined ? '(unset)' : JSON.stringify(redact(name, value))}: ${issue.message}`;
    });
    throw new UsageError(`Invalid configuration:\n${lines.join('\n')}`, 'CONFIG_INVALID');
  }
  const c = parsed.data;
  const problems: string[] = [];
  const fields = { DB_HOST: c.DB_HOST, DB_NAME: c.DB_NAME, DB_USER: c.DB_USER };
  const missing = Object.entries(fields).filter(([, v]) => v === undefined).map(([k]) => k);
  if (c.DATABASE_URL === undefined && missing.length > 0) {
    problems.push(`  DATABASE_URL=(unset): accepts a postgres:// URL; or set all of DB_HOST, DB_NAME, DB_USER and DB_PASSWORD (missing ${missing.join(', ')})`);
  }
  if (c.PRE_STOP_DELAY_MS >= c.SHUTDOWN_TIMEOUT_MS) {
    problems.push(`  PRE_STOP_DELAY_MS=${c.PRE_STOP_DELAY_MS}: accepts less than SHUTDOWN_TIMEOUT_MS (${c.SHUTDOWN_TIMEOUT_MS}), or the drain has no time left`);
  }
  if (c.HEADERS_TIMEOUT_MS > c.REQUEST_TIMEOUT_MS) {
    problems.push(`  HEADERS_TIMEOUT_MS=${c.HEADERS_TIMEOUT_MS}: accepts at most REQUEST_TIMEOUT_MS (${c.REQUEST_TIMEOUT_MS}), which covers the headers too`);
  }
  if (c.DB_POOL_WAIT_MS >= c.REQUEST_DEADLINE_MS) {
    problems.push(`  DB_POOL_WAIT_MS=${c.DB_POOL_WAIT_MS}: accepts less than REQUEST_DEADLINE_MS (${c.REQUEST_DEADLINE_MS}), or a request waits for a connection past its deadline`);
  }
  if (c.JOB_BATCH_CONCURRENCY > c.DB_POOL_MAX) {
    problems.push(`  JOB_BATCH_CONCURRENCY=${c.JOB_BATCH_CONCURRENCY}: accepts at most DB_POOL_MAX (${c.DB_POOL_MAX}), since each batch at once holds a connection of the pool`);
  }
  if ((c.DB_LOGIN_ROLE === undefined) !== (c.DB_LOGIN_PASSWORD === undefined)) {
    const unset = c.DB_LOGIN_ROLE === undefined ? 'DB_LOGIN_ROLE' : 'DB_LOGIN_PASSWORD';
    problems.push(`  ${unset}=(unset): DB_LOGIN_ROLE and DB_LOGIN_PASSWORD go together (the login role the migrate command creates); set both or neither`);
  }
  if (c.JOB_FAULT_INJECTION !== undefined && c.NODE_ENV !== 'test') {
    problems.push(`  JOB_FAULT_INJECTION=${JSON.stringify(env.JOB_FAULT_INJECTION)}: makes jobs fail on purpose, so it is refused unless NODE_ENV=test`);
  }
  if (problems.length > 0) throw new UsageError(`Invalid configuration:\n${problems.join('\n')}`, 'CONFIG_INVALID');

  const ssl = c.DB_SSL === 'off' ? false : { rejectUnauthorized: c.DB_SSL === 'verify' };
  const database: DatabaseSettings =
    c.DATABASE_URL !== undefined
      ? { connectionString: c.DATABASE_URL, ssl }
      : { host: c.DB_HOST!, port: c.DB_PORT ?? 5432, database: c.DB_NAME!, user: c.DB_USER!, password: c.DB_PASSWORD ?? '', ssl };
  return {
    ...c,
    database,
    loginRole: c.DB_LOGIN_ROLE !== undefined && c.DB_LOGIN_PASSWORD !== undefined ? { name: c.DB_LOGIN_ROLE, password: c.DB_LOGIN_PASSWORD } : undefined,
    headersTimeoutMs: c.HEADERS_TIMEOUT_MS,
    requestTimeoutMs: c.REQUEST_TIMEOUT_MS,
    connectionsCheckingIntervalMs: Math.floor(Math.min(c.HEADERS_TIMEOUT_MS, c.REQUEST_TIMEOUT_MS) / 10),
  };
}

/**
 * A variable's value as it may be echoed in an error: secrets hidden, and a URL's password
 * replaced by *** (a DATABASE_URL that fails validation still carries its password).
 */
export function redact(name: string, value: string): string {
  if (/PASSWORD|SECRET|API_KEY|TOKEN/.test(name)) return '(hidden)';
  // Greedy up to the last @: a password may itself hold an @.
  return value.replace(/(\/\/[^/:@\s]*):\S*@/g, '$1:***@');
}
