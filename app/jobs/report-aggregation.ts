/**
 * report-aggregation: the previous UTC day's usage, summed per account and metric into
 * `usage_daily`.
 *
 * The pattern to copy for "derive a table from another one, rerunnable": an upsert on the
 * derived table's natural key that replaces the figures (never adds to them), so a rerun
 * after late usage arrived corrects the day, and a repeated batch changes nothing. Batches
 * walk the accounts by id, like billing-run, so no statement aggregates the whole day.
 */
import { isoDate } from '../billing.js';
import { DAY_MS, defineJob, previousUtcDay } from './handler.js';

export interface AggregationCheckpoint {
  /** Every account with an id up to this one has its rollups for the day. */
  readonly afterAccountId: string;
}

/** The UTC day a run scheduled at `t` rolls up: the day before. */
export function rollupDayFor(t: Date): string {
  return isoDate(previousUtcDay(t));
}

export const reportAggregation = defineJob<AggregationCheckpoint>({
  describePeriod: (t) => `usage day ${rollupDayFor(t)}`,

  async run(ctx) {
    const day = rollupDayFor(ctx.scheduledTime);
    const next = isoDate(new Date(Date.parse(day) + DAY_MS));
    const oldest = new Date(ctx.scheduledTime.getTime() - ctx.config.USAGE_RETENTION_DAYS * DAY_MS);
    if (Date.parse(day) < oldest.getTime()) {
      // data-cleanup may already have deleted part of that day's usage: recomputing it would shrink the rollup.
      throw new Error(`refusing to roll up ${day}: it is older than USAGE_RETENTION_DAYS (${ctx.config.USAGE_RETENTION_DAYS}), so its raw usage may be gone`);
    }
    const limit = ctx.config.JOB_BATCH_SIZE;
    const { rows: counts } = await ctx.pool.query<{ total: number; done: number }>(
      `SELECT count(*)::int AS total, count(*) FILTER (WHERE id <= $1::bigint)::int AS done FROM accounts`,
      [ctx.checkpoint?.afterAccountId ?? '0'],
    );
    let afterAccountId = ctx.checkpoint?.afterAccountId ?? '0';
    let processed = counts[0]!.done;
    let rollups = 0;
    ctx.progress(processed, counts[0]!.total);

    for (;;) {
      ctx.signal.throwIfAborted();
      const { rows } = await ctx.pool.query<{ accounts: number; last_id: string | null; rollups: number }>(
        `WITH batch AS (
           SELECT id FROM accounts WHERE id > $3::bigint ORDER BY id LIMIT $4
         ), totals AS (
           SELECT u.account_id, u.metric, sum(u.quantity)::bigint AS quantity, count(*)::bigint AS events
           FROM usage u JOIN batch b ON b.id = u.account_id
           -- UTC midnights, whatever the session's TimeZone (as in app/billing.ts).
           WHERE u.occurred_at >= $1::date::timestamp AT TIME ZONE 'UTC' AND u.occurred_at < $2::date::timestamp AT TIME ZONE 'UTC'
           GROUP BY u.account_id, u.metric
         ), upserted AS (
           INSERT INTO usage_daily (day, account_id, metric, quantity, events)
           SELECT $1::date, account_id, metric, quantity, events FROM totals
           ON CONFLICT (day, account_id, metric) DO UPDATE
             SET quantity = EXCLUDED.quantity, events = EXCLUDED.events, updated_at = now()
             WHERE (usage_daily.quantity, usage_daily.events) IS DISTINCT FROM (EXCLUDED.quantity, EXCLUDED.events)
           RETURNING 1
         )
         SELECT (SELECT count(*) FROM batch)::int AS accounts,
                (SELECT max(id)::text FROM batch) AS last_id,
                (SELECT count(*) FROM totals)::int AS rollups`,
        [day, next, afterAccountId, limit],
      );
      const batch = rows[0]!;
      if (batch.last_id === null) break;
      afterAccountId = batch.last_id;
      processed += batch.accounts;
      rollups += batch.rollups;
      await ctx.saveCheckpoint({ afterAccountId }, processed);
      if (batch.accounts < limit) break;
    }
    return { day, accounts: processed, rollups };
  },
});
