/**
 * The handler of every job in the jobs table (lib/jobs.ts), keyed by the job's name.
 *
 * `satisfies Record<JobName, ...>` makes the type check fail when a job of the table has no
 * handler here, and when a handler here has no row in the table; test/jobs/registry.test.ts
 * checks the same at run time. To add a job: add its row to lib/jobs.ts, write its handler
 * (see handler.ts for the contract, billing-run.ts for the pattern) and list it here.
 */
import type { JobName } from '../../lib/jobs.js';
import { billingRun } from './billing-run.js';
import { dataCleanup } from './data-cleanup.js';
import type { JobHandler } from './handler.js';
import { reportAggregation } from './report-aggregation.js';
import { weeklyExport } from './weekly-export.js';

// Each handler has its own checkpoint type; the runner treats them all alike.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyJobHandler = JobHandler<any>;

export const HANDLERS = {
  'billing-run': billingRun,
  'report-aggregation': reportAggregation,
  'data-cleanup': dataCleanup,
  'weekly-export': weeklyExport,
} as const satisfies Record<JobName, AnyJobHandler>;
