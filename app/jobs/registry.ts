/**
 * The handler of every job in the jobs table (lib/jobs.ts), keyed by the job's name.
 *
 * `satisfies Record<JobName, ...>` makes the type check fail when a job of the table has no
 * handler here, and when a handler here has no row in the table; test/jobs/registry.test.ts
 * checks the same at run time. To add a job: add its row to lib/jobs.ts, write its handler
 * (see handler.ts for the contract, billing-run.ts for the pattern) and list it here.
 *
 * Each entry loads its handler when called: a job process loads its own handler's modules,
 * not every job's (docs/performance.md#process-start).
 */
import type { JobName } from '../../lib/jobs.js';
import type { Config } from '../config.js';
import type { JobHandler } from './handler.js';

// Each handler has its own checkpoint type; the runner treats them all alike.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyJobHandler = JobHandler<any>;

/** Loads one job's handler. */
export type HandlerLoader = () => Promise<AnyJobHandler>;

export const HANDLERS = {
  'billing-run': async () => (await import('./billing-run.js')).billingRun,
  'report-aggregation': async () => (await import('./report-aggregation.js')).reportAggregation,
  'data-cleanup': async () => (await import('./data-cleanup.js')).dataCleanup,
  'weekly-export': async () => (await import('./weekly-export.js')).weeklyExport,
} as const satisfies Record<JobName, HandlerLoader>;

/**
 * How many of the pool's connections a job's run uses at once, besides the runner's two lock
 * connections: the job process opens them while its modules load, as it opens the locks'
 * (app/jobs/cli.ts), rather than on the run's clock. billing-run: its batches side by side,
 * and its plan beside them while they prepare. The others open theirs when they first query.
 */
export const CONNECTIONS_AT_ONCE = {
  'billing-run': (config) => Math.min(config.DB_POOL_MAX, config.JOB_BATCH_CONCURRENCY + 1),
  'report-aggregation': () => 0,
  'data-cleanup': () => 0,
  'weekly-export': () => 0,
} as const satisfies Record<JobName, (config: Config) => number>;
