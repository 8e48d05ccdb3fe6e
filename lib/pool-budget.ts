/**
 * The database connection budget: how many connections each API task and each job task may
 * open, derived from what the database allows, so that the worst case fits.
 *
 * The worst case is a deploy at full scale while every job runs: ECS then runs up to
 * maxCapacity × maxHealthyPercent/100 API tasks at once (old and new side by side), each with
 * a full pool (its workers' lock connections come out of that pool), and every enabled job
 * runs a task with its pool plus the runner's two lock connections; a job whose overlap
 * policy is "wait" may have a second delivery queued behind it holding its run lock. On top:
 * Postgres's reserved superuser slots, RDS's own sessions, and room for a migration and an
 * operator's psql. A configuration whose worst case exceeds max_connections is refused at
 * synth, naming every number; Postgres would otherwise refuse connections ("too many
 * clients") in the middle of a deploy.
 */
import { DATABASE_DEFAULTS, SERVICE_DEFAULTS } from './defaults.js';
import type { JobDefinition } from './jobs.js';

/** The runner's two lock connections per job task (app/jobs/runner.ts LOCK_CONNECTIONS), on top of its pool. */
export const JOB_LOCK_CONNECTIONS = 2;
/** A queued "wait" delivery holds its run lock's connection and polls for the job lock on a second one. */
export const QUEUED_RUN_CONNECTIONS = 2;
/** superuser_reserved_connections (3) + RDS's rdsadmin sessions (2) + a migration, psql and `npm run runs` (5). */
export const RESERVED_CONNECTIONS = 10;
/** A job's pool: billing-run runs two batches side by side (JOB_BATCH_CONCURRENCY), each a statement at a time, so a small pool is plenty. */
export const JOB_POOL_MAX = 3;
/** Below this an API task cannot serve a request while its worker leads (the lock holds one connection). */
export const MIN_API_POOL_MAX = 2;
/** RDS's max_connections: LEAST(DBInstanceClassMemory / 9531392, 5000). */
const RDS_BYTES_PER_CONNECTION = 9_531_392;
/** RDS's DBInstanceClassMemory is the class's memory less what the OS and RDS keep: about 300 MiB. */
const RDS_RESERVED_MEMORY_BYTES = 311_230_464;
/** Memory of the burstable and general-purpose sizes, GiB. */
const SIZE_MEMORY_GIB: Record<string, number> = { micro: 1, small: 2, medium: 4, large: 8, xlarge: 16, '2xlarge': 32 };

/** The memory of RDS instance class `instanceType` (without `db.`), GiB; undefined for a class not in the table. */
export function instanceMemoryGiB(instanceType: string): number | undefined {
  const gib = SIZE_MEMORY_GIB[instanceType.split('.')[1] ?? ''];
  return gib !== undefined && /^(t3|t4g|m5|m6g|m6i|m7g)\./.test(instanceType) ? gib : undefined;
}

/** Postgres's max_connections on a new RDS instance of `instanceType` (`t4g.micro`: 80); undefined for a class not in the table. */
export function rdsMaxConnections(instanceType: string): number | undefined {
  const gib = instanceMemoryGiB(instanceType);
  if (gib === undefined) return undefined;
  return Math.min(5_000, Math.floor((gib * 2 ** 30 - RDS_RESERVED_MEMORY_BYTES) / RDS_BYTES_PER_CONNECTION));
}

export interface PoolBudgetInput {
  /** Postgres max_connections. */
  readonly maxConnections: number;
  /** The API service's maxCapacity. */
  readonly maxCapacity: number;
  /** The service's deployment maxHealthyPercent: old and new tasks run side by side. */
  readonly maxHealthyPercent: number;
  /** The enabled jobs: all may run at once. */
  readonly jobs: readonly Pick<JobDefinition, 'name' | 'overlap'>[];
}

export interface PoolBudget {
  /** DB_POOL_MAX of each API task. */
  readonly apiPoolMax: number;
  /** DB_POOL_MAX of each job task (the runner adds its two lock connections). */
  readonly jobPoolMax: number;
  /** Connections at the worst case, reserved ones included; at most maxConnections. */
  readonly worstCase: number;
  /** The worst case, term by term, for the error and the docs. */
  readonly explanation: string;
  /** Why the budget does not fit, naming every number; undefined when it fits. */
  readonly problem?: string;
}

/** Derives the pool sizes; `problem` says why, with every number, when the worst case cannot fit. */
export function poolBudget(input: PoolBudgetInput): PoolBudget {
  const apiTasks = Math.ceil((input.maxCapacity * input.maxHealthyPercent) / 100);
  const jobPoolMax = JOB_POOL_MAX;
  const queued = input.jobs.filter((j) => j.overlap === 'wait').length;
  const jobConnections = input.jobs.length * (jobPoolMax + JOB_LOCK_CONNECTIONS) + queued * QUEUED_RUN_CONNECTIONS;
  const forApi = input.maxConnections - RESERVED_CONNECTIONS - jobConnections;
  const fits = Math.floor(forApi / apiTasks) >= MIN_API_POOL_MAX;
  // When even the smallest API pool does not fit, the sum shows the worst case with it.
  const apiPoolMax = fits ? Math.floor(forApi / apiTasks) : MIN_API_POOL_MAX;
  const worstCase = RESERVED_CONNECTIONS + jobConnections + apiTasks * apiPoolMax;
  const explanation =
    `${apiTasks} API tasks (maxCapacity ${input.maxCapacity} × maxHealthyPercent ${input.maxHealthyPercent}%) × ${apiPoolMax} connections` +
    ` + ${input.jobs.length} jobs × (${jobPoolMax} + ${JOB_LOCK_CONNECTIONS} lock connections)` +
    (queued ? ` + ${queued} queued "wait" run(s) × ${QUEUED_RUN_CONNECTIONS}` : '') +
    ` + ${RESERVED_CONNECTIONS} reserved = ${worstCase}, of max_connections ${input.maxConnections}`;
  const problem = fits
    ? undefined
    : `the database connection budget does not fit: ${explanation}, with the smallest API pool (an API task needs at least ${MIN_API_POOL_MAX}). ` +
      'Lower maxCapacity, disable jobs, or choose a larger database instance class (databaseInstanceType)';
  return { apiPoolMax, jobPoolMax, worstCase, explanation, problem };
}

/** The stack's budget: its database's max_connections, the API's maxCapacity and deployment, and the enabled jobs. */
export function stackPoolBudget(props: {
  readonly databaseMaxConnections?: number;
  readonly instanceType?: string;
  readonly maxCapacity?: number;
  readonly jobs: readonly Pick<JobDefinition, 'name' | 'overlap' | 'enabled'>[];
}): PoolBudget {
  const instanceType = props.instanceType ?? DATABASE_DEFAULTS.instanceType;
  const maxConnections = props.databaseMaxConnections ?? rdsMaxConnections(instanceType);
  if (maxConnections === undefined) {
    const problem = `databaseMaxConnections is needed: the max_connections of instance class ${instanceType} is not in lib/pool-budget.ts`;
    return { apiPoolMax: 0, jobPoolMax: 0, worstCase: 0, explanation: problem, problem };
  }
  return poolBudget({
    maxConnections,
    maxCapacity: props.maxCapacity ?? SERVICE_DEFAULTS.maxCapacity,
    maxHealthyPercent: SERVICE_DEFAULTS.maxHealthyPercent,
    jobs: props.jobs.filter((j) => j.enabled),
  });
}
