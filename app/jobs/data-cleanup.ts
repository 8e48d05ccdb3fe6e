/**
 * data-cleanup: retires expired days of usage whole, and deletes other expired rows in
 * bounded batches.
 *
 * What expires (cutoffs are counted back from the run's scheduled time, so a rerun deletes
 * the same set):
 *   - `usage` older than USAGE_RETENTION_DAYS, and only once it is accounted for. A UTC day
 *     with a partition of its own (app/usage-partitions.ts) is retired whole, its partition
 *     detached and dropped, once billing-run and then report-aggregation have finished it
 *     (app/jobs/usage-days.ts); the rows no invoice counted (an account suspended before
 *     billing reached it) are kept in `usage_unbilled` first. The cost is one catalog change a
 *     day, whatever the day holds. Rows outside those partitions (the table from before them,
 *     rows dated before any partition) are deleted row by row, each once the account's
 *     invoice for that day and the day's rollup for that account and metric exist; usage that
 *     was never invoiced stays.
 *   - `job_runs` attempts that finished more than JOB_RUNS_RETENTION_DAYS ago.
 * Invoices and rollups are never deleted. Each run also makes the partitions of the days
 * ahead (PARTITION_DAYS_AHEAD), so usage never waits on a deploy for its day's partition.
 *
 * The pattern to copy for "delete a lot without hurting anyone": each batch is one
 * autocommit statement that deletes at most JOB_BATCH_SIZE rows, so row locks last
 * milliseconds and the table stays writable; batches walk an index in keyset order so no
 * batch rescans rows the previous ones kept.
 */
import { RETENTION, withIdentity } from '../tenancy.js';
import { ensurePartitions } from '../usage-partitions.js';
import { retireDays } from './retire-days.js';
import { DAY_MS } from '../../lib/time-zones.js';
import { defineJob, utcMidnight } from './handler.js';

export interface CleanupCheckpoint {
  /** The usage pass has looked at every row up to this (occurred_at, id); null when it has not started. */
  readonly usageAfter: { readonly occurredAt: string; readonly id: string } | null;
  /** The usage pass is over; the job_runs pass is next. */
  readonly usageDone: boolean;
  readonly deleted: { readonly usage: number; readonly jobRuns: number };
}

function cutoffs(t: Date, usageDays: number, runsDays: number) {
  const midnight = utcMidnight(t).getTime();
  return { usage: new Date(midnight - usageDays * DAY_MS), jobRuns: new Date(midnight - runsDays * DAY_MS) };
}

export const dataCleanup = defineJob<CleanupCheckpoint>({
  describePeriod: (t) => `rows expired by ${utcMidnight(t).toISOString().slice(0, 10)}`,

  async run(ctx) {
    const limit = ctx.config.JOB_BATCH_SIZE;
    const cutoff = cutoffs(ctx.scheduledTime, ctx.config.USAGE_RETENTION_DAYS, ctx.config.JOB_RUNS_RETENTION_DAYS);
    let state: CleanupCheckpoint = ctx.checkpoint ?? { usageAfter: null, usageDone: false, deleted: { usage: 0, jobRuns: 0 } };
    const processed = () => state.deleted.usage + state.deleted.jobRuns;
    ctx.progress(processed(), null);

    await withIdentity(ctx.pool, RETENTION, (db) => ensurePartitions(db, ctx.logger, new Date(), cutoff.usage));
    const days = await retireDays(ctx, cutoff.usage);

    while (!state.usageDone) {
      ctx.signal.throwIfAborted();
      const after = state.usageAfter ?? { occurredAt: '-infinity', id: '0' };
      // As the retention role, the one that may delete usage, and only usage that is accounted for.
      const { rows } = await withIdentity(ctx.pool, RETENTION, (db) => db.query<{ scanned: number; last_at: string | null; last_id: string | null; deleted: number }>(
        `WITH candidates AS (
           SELECT id, account_id, metric, occurred_at FROM usage
           -- The redundant lower bound lets the index start where the last batch ended.
           WHERE occurred_at < $1::timestamptz AND occurred_at >= $2::timestamptz
             AND (occurred_at, id) > ($2::timestamptz, $3::bigint)
           ORDER BY occurred_at, id
           LIMIT $4
         ), deleted AS (
           -- Each check is one index probe per candidate: a subquery with LIMIT is not turned
           -- into a join. As EXISTS the planner hash-joined every batch against the whole of
           -- invoices, so each batch cost as much as the table had rows (docs/performance.md).
           DELETE FROM usage u USING candidates c
           -- occurred_at too: Postgres then probes the one partition the row is in.
           WHERE u.id = c.id AND u.occurred_at = c.occurred_at
             AND (SELECT true FROM invoices i
                  WHERE i.account_id = c.account_id AND i.period_start = (c.occurred_at AT TIME ZONE 'UTC')::date LIMIT 1)
             AND (SELECT true FROM usage_daily d
                  WHERE d.day = (c.occurred_at AT TIME ZONE 'UTC')::date AND d.account_id = c.account_id AND d.metric = c.metric LIMIT 1)
           RETURNING 1
         ), last AS (
           SELECT occurred_at, id FROM candidates ORDER BY occurred_at DESC, id DESC LIMIT 1
         )
         SELECT (SELECT count(*) FROM candidates)::int AS scanned,
                (SELECT to_json(occurred_at) #>> '{}' FROM last) AS last_at,
                (SELECT id::text FROM last) AS last_id,
                (SELECT count(*) FROM deleted)::int AS deleted`,
        // Only before the first day partition: a day's partition is retired whole (above), or
        // kept whole until it can be, and Postgres then reads no day partition at all.
        [days.rowsBefore.toISOString(), after.occurredAt, after.id, limit],
      ));
      const batch = rows[0]!;
      state = {
        usageAfter: batch.last_id === null ? state.usageAfter : { occurredAt: batch.last_at!, id: batch.last_id },
        usageDone: batch.scanned < limit,
        deleted: { ...state.deleted, usage: state.deleted.usage + batch.deleted },
      };
      await ctx.saveCheckpoint(state, processed());
    }

    // The table from before the partitions, once the batches above have emptied it.
    const legacyRetired = await withIdentity(ctx.pool, RETENTION, (db) => db.query<{ done: boolean }>(
      `SELECT usage_retire_legacy($1::timestamptz) AS done`, [cutoff.usage.toISOString()],
    ));
    if (legacyRetired.rows[0]!.done) ctx.logger.info('usage_legacy, the table from before the day partitions, is empty and expired: dropped');

    for (;;) {
      ctx.signal.throwIfAborted();
      const { rowCount } = await withIdentity(ctx.pool, RETENTION, (db) => db.query(
        `DELETE FROM job_runs WHERE id IN (
           SELECT id FROM job_runs WHERE status <> 'running' AND finished_at < $1::timestamptz ORDER BY id LIMIT $2
         )`,
        [cutoff.jobRuns.toISOString(), limit],
      ));
      const deleted = rowCount ?? 0;
      state = { ...state, deleted: { ...state.deleted, jobRuns: state.deleted.jobRuns + deleted } };
      await ctx.saveCheckpoint(state, processed());
      if (deleted < limit) break;
    }
    return {
      usageCutoff: cutoff.usage.toISOString(),
      jobRunsCutoff: cutoff.jobRuns.toISOString(),
      usageDaysRetired: days.retired,
      usageDaysKept: days.kept,
      usageDeleted: state.deleted.usage,
      jobRunsDeleted: state.deleted.jobRuns,
    };
  },
});
