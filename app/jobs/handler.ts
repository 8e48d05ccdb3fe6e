/**
 * What a job's handler is given and what it must do. The runner (runner.ts) wraps every
 * handler with the delivery safety, the heartbeat, the timeout, the retries and the alert;
 * a handler only does the work, in batches:
 *
 *   for each batch:
 *     ctx.signal.throwIfAborted()        // SIGTERM or the timeout: stop between batches
 *     ...one short, idempotent statement...
 *     await ctx.saveCheckpoint(state)    // where a rerun (or the retry) resumes
 *
 * A batch must be safe to repeat: a run killed between the batch's commit and its
 * checkpoint does that batch again when it resumes (unless the checkpoint is written in the
 * batch's transaction: `ctx.saveCheckpoint(state, processed, tx)`).
 */
import type { JobDefinition } from '../../lib/jobs.js';
import { DAY_MS } from '../../lib/time-zones.js';
import type { Config } from '../config.js';
import type { Pool } from '../db.js';
import type { Logger } from '../logger.js';
import type { Queryable } from '../tenancy.js';

export interface JobContext<C> {
  readonly job: JobDefinition;
  /** The run key's time: SCHEDULED_TIME, else --scheduled-time, else the start of a manual run. */
  readonly scheduledTime: Date;
  readonly pool: Pool;
  readonly config: Config;
  /** Carries the job's name, the run id and the attempt. */
  readonly logger: Logger;
  /**
   * Aborts on SIGTERM/SIGINT (the run is then recorded `interrupted`) or when the table's
   * timeout passes (`failed`, "timeout"). Check it between batches, after the checkpoint.
   */
  readonly signal: AbortSignal;
  /** Where to resume: the last checkpoint of an unfinished attempt of this run key; undefined on a fresh start, and on a forced run's first attempt. */
  readonly checkpoint: C | undefined;
  /** Sets the progress the heartbeat records and reports (processed so far, and the total when known). */
  progress(processed: number, total?: number | null): void;
  /**
   * Records `checkpoint` and the progress on the run's row; call it after each batch has
   * committed. Or, with `tx`, as the last statement of the batch's own transaction: the
   * checkpoint then commits with the batch or not at all, and the batch costs one commit
   * instead of two (the transaction's role is reset to write the row); that commit then does
   * not wait for the disk (attempt.ts, ASYNC_BATCH_COMMIT).
   */
  saveCheckpoint(checkpoint: C, processed: number, tx?: Queryable): Promise<void>;
}

export interface JobHandler<C = unknown> {
  /** What a run of `scheduledTime` works on, in words, for the logs and the alert: "billing day 2025-01-01". */
  describePeriod(scheduledTime: Date): string;
  /** Does the work; resolves with a summary that the runner logs. Throws to fail the attempt. */
  run(ctx: JobContext<C>): Promise<Record<string, unknown>>;
  /**
   * Optional: readies the pool's connections for the batches (opens them, prepares their
   * statements) while the runner takes its locks and settles earlier runs, so the first
   * batches do not pay for it. It must change nothing: the run may not go on (already done,
   * skipped). A failure is logged and ignored; the batches meet whatever caused it.
   */
  prepare?(ctx: Pick<JobContext<C>, 'pool' | 'config' | 'scheduledTime'>): Promise<void>;
}

/** Declares a handler with its checkpoint type. */
export function defineJob<C>(handler: JobHandler<C>): JobHandler<C> {
  return handler;
}

/** The first UTC midnight at or before `t`. */
export function utcMidnight(t: Date): Date {
  return new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth(), t.getUTCDate()));
}

/** The whole UTC day before the one that contains `t`: the period a nightly job works on. */
export function previousUtcDay(t: Date): Date {
  return new Date(utcMidnight(t).getTime() - DAY_MS);
}
