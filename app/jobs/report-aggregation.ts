/**
 * report-aggregation: the previous UTC day's usage, summed per account and metric into
 * `usage_daily`.
 *
 * The pattern to copy for "derive a table from another one, rerunnable": an upsert on the
 * derived table's natural key that replaces the figures (never adds to them), so a rerun
 * after late usage arrived corrects the day, and a repeated batch changes nothing. Batches
 * walk the accounts by id, like billing-run, so no statement aggregates the whole day.
 * Like billing-run, batches run under the operator identity, and an account whose figures do
 * not fit is skipped and reported instead of failing everyone's day.
 */
import { isoDate } from '../billing.js';
import { REPORTING, withIdentity, type Queryable } from '../tenancy.js';
import { DAY_MS } from '../../lib/time-zones.js';
import { defineJob, previousUtcDay } from './handler.js';
import { reportSkipped, runIsolated, type SkippedAccount } from './per-account.js';
import { markDayFinished } from './usage-days.js';

interface RollupBatch {
  readonly accounts: number;
  readonly last_id: string | null;
  readonly rollups: number;
}

/** Rolls up `day` for the accounts after `after` (at most `limit`), or for the one account `accountId`. */
async function rollUp(db: Queryable, day: string, next: string, batch: { after: string; limit: number } | { accountId: string }): Promise<RollupBatch> {
  const one = 'accountId' in batch;
  const { rows } = await db.query<RollupBatch>(
    `WITH batch AS (
       SELECT id FROM accounts WHERE ${one ? 'id = $3::bigint' : 'id > $3::bigint'} ORDER BY id LIMIT $4
     ), totals AS (
       -- sum(bigint) is numeric: it cannot overflow; a total past bigint fails on the insert.
       SELECT u.account_id, u.metric, sum(u.quantity) AS quantity, count(*)::bigint AS events
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
    [day, next, one ? batch.accountId : batch.after, one ? 1 : batch.limit],
  );
  return rows[0]!;
}

export interface AggregationCheckpoint {
  /** Every account with an id up to this one has its rollups for the day. */
  readonly afterAccountId: string;
  /** Accounts skipped so far, reported when the run ends. */
  readonly skipped?: readonly SkippedAccount[];
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
    const { rows: counts } = await withIdentity(ctx.pool, REPORTING, (db) =>
      db.query<{ total: number; done: number }>(
        `SELECT count(*)::int AS total, count(*) FILTER (WHERE id <= $1::bigint)::int AS done FROM accounts`,
        [ctx.checkpoint?.afterAccountId ?? '0'],
      ),
    );
    let afterAccountId = ctx.checkpoint?.afterAccountId ?? '0';
    let processed = counts[0]!.done;
    let rollups = 0;
    const skipped: SkippedAccount[] = [...(ctx.checkpoint?.skipped ?? [])];
    ctx.progress(processed, counts[0]!.total);

    for (;;) {
      ctx.signal.throwIfAborted();
      const after = afterAccountId;
      const batch = await runIsolated<RollupBatch>(
        ctx.pool,
        {
          as: REPORTING,
          all: (db) => rollUp(db, day, next, { after, limit }),
          ids: async (db) => {
            const { rows } = await db.query<{ id: string }>(`SELECT id::text FROM accounts WHERE id > $1::bigint ORDER BY accounts.id LIMIT $2`, [after, limit]);
            return rows.map((r) => r.id);
          },
          one: (db, accountId) => rollUp(db, day, next, { accountId }),
          merge: (results, ids) => ({ accounts: ids.length, last_id: ids.at(-1) ?? null, rollups: results.reduce((n, r) => n + r.rollups, 0) }),
        },
        skipped,
        ctx.logger,
      );
      if (batch.last_id === null) break;
      afterAccountId = batch.last_id;
      processed += batch.accounts;
      rollups += batch.rollups;
      await ctx.saveCheckpoint({ afterAccountId, skipped }, processed);
      if (batch.accounts < limit) break;
    }
    if (skipped.length === 0) await markDayFinished(ctx.pool, REPORTING, day, 'rolled up');
    await reportSkipped(skipped, { job: ctx.job.name, period: `usage day ${day}`, scheduledTime: ctx.scheduledTime }, { topicArn: ctx.config.ALERT_TOPIC_ARN, logger: ctx.logger });
    return { day, accounts: processed, rollups, skippedAccounts: skipped.map((s) => s.accountId) };
  },
});
