/**
 * billing-run: one invoice for every active account for the previous UTC day, zero-amount
 * when the account had no usage.
 *
 * The pattern to copy for "do X once per entity per period": keyset batches over the
 * entities (ranges of ids cut up front at every n-th id, app/jobs/keyset-ranges.ts), each
 * batch one set-based statement that is idempotent by a unique key (invoices are unique on
 * (account_id, period_start), so a rerun, a retry or a concurrent duplicate inserts nothing
 * twice), and a checkpoint with each batch, in the batch's transaction. JOB_BATCH_CONCURRENCY
 * batches run side by side, each on its own connection; their checkpoints and commits take
 * turns, so the run's row always says exactly what is committed. Pricing lives in app/billing.ts, shared with POST /accounts/:id/invoices.
 *
 * Batches run as the billing role (app/tenancy.ts), the one role that may write invoices. An account whose day cannot be
 * billed (its amount past bigint) is skipped and reported; everyone else is billed.
 */
import { BIGINT_MAX, billAccounts, dayPeriod, prepareBillBatches, type BillBatch } from '../billing.js';
import { defineJob, previousUtcDay } from './handler.js';
import { rangesToRun, RangesDone, Turns, type DoneRange, type KeyRange } from './keyset-ranges.js';
import { reportSkipped, runIsolated, type SkippedAccount } from './per-account.js';
import type { Pool } from '../db.js';
import { BILLING, withIdentity, type Queryable } from '../tenancy.js';
import { inSpan, tracingOn } from '../tracing/trace.js';
import { markDayFinished } from './usage-days.js';

export interface BillingCheckpoint {
  /** Every active account with an id up to this one has its invoice. */
  readonly afterAccountId: string;
  /** Ranges of accounts beyond `afterAccountId` whose invoices are in too. */
  readonly ahead?: readonly DoneRange[];
  /** Invoices this run inserted so far (the rest already existed). */
  readonly inserted: number;
  /** Accounts skipped so far, reported when the run ends. */
  readonly skipped?: readonly SkippedAccount[];
}

/** The UTC day a billing run scheduled at `t` bills: the day before. */
export function billingPeriodFor(t: Date) {
  return dayPeriod(previousUtcDay(t));
}

const ELIGIBLE = `status = 'active' AND created_at < $1::date::timestamp AT TIME ZONE 'UTC'`;

/**
 * How many accounts the day bills and how many of them are done up to `after`, and where the
 * ranges after it end: at every `size`-th account, whatever its status (a batch locks them
 * all, app/billing.ts). One statement: the counts in one pass over the accounts; the ends by
 * stepping `size` entries at a time along the primary key's index, from one end to the next
 * (a numbering of every id, to keep each `size`-th, took half as long again).
 */
const PLAN = `WITH RECURSIVE cut(id) AS (
    SELECT (SELECT id FROM accounts WHERE id > $2::bigint ORDER BY id OFFSET $3::int - 1 LIMIT 1)
    UNION ALL
    SELECT (SELECT a.id FROM accounts a WHERE a.id > cut.id ORDER BY a.id OFFSET $3::int - 1 LIMIT 1) FROM cut WHERE cut.id IS NOT NULL)
  SELECT count(*)::int AS total, count(*) FILTER (WHERE id <= $2::bigint)::int AS done,
    ARRAY(SELECT cut.id::text FROM cut WHERE cut.id IS NOT NULL ORDER BY cut.id) AS ends
  FROM accounts WHERE ${ELIGIBLE}`;

export async function plan(db: Queryable, periodEnd: string, after: string, size: number) {
  const { rows } = await db.query<{ total: number; done: number; ends: string[] }>(PLAN, [periodEnd, after, size]);
  return rows[0]!;
}

type Plan = Awaited<ReturnType<typeof plan>>;

/** The plan `prepare` made of a run from the start, taken by the first attempt that starts there. */
let plannedAhead: { pool: unknown; periodEnd: string; size: number; plan: Plan } | undefined;

async function planFor(pool: Pool, periodEnd: string, after: string, size: number): Promise<Plan> {
  const ahead = plannedAhead;
  plannedAhead = undefined;
  if (ahead !== undefined && ahead.pool === pool && ahead.periodEnd === periodEnd && ahead.size === size && after === '0') return ahead.plan;
  return withIdentity(pool, BILLING, (db) => plan(db, periodEnd, after, size));
}

export const billingRun = defineJob<BillingCheckpoint>({
  describePeriod: (t) => `billing day ${billingPeriodFor(t).start}`,

  async prepare({ pool, config, scheduledTime }) {
    const period = billingPeriodFor(scheduledTime);
    const lanes = Array.from({ length: config.JOB_BATCH_CONCURRENCY }, () => withIdentity(pool, BILLING, (db) => prepareBillBatches(db, period)));
    // The plan of a run from the start, meanwhile too: its ranges hold whatever a batch finds in
    // them when it locks them, so they may be cut a moment early; its counts are the progress's.
    const planned = withIdentity(pool, BILLING, (db) => plan(db, period.end, '0', config.JOB_BATCH_SIZE)).then((p) => {
      plannedAhead = { pool, periodEnd: period.end, size: config.JOB_BATCH_SIZE, plan: p };
    });
    // Every lane ends before the run goes on, whether or not another failed.
    const failed = (await Promise.allSettled([...lanes, planned])).find((l) => l.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
  },

  async run(ctx) {
    const period = billingPeriodFor(ctx.scheduledTime);
    const from = ctx.checkpoint ?? { afterAccountId: '0', inserted: 0 };
    let done = new RangesDone(from.afterAccountId, from.ahead);
    let inserted = from.inserted;
    let skipped: readonly SkippedAccount[] = [...new Map((from.skipped ?? []).map((a) => [a.accountId, a])).values()];
    const planned = await planFor(ctx.pool, period.end, from.afterAccountId, ctx.config.JOB_BATCH_SIZE);
    let processed = planned.done + done.itemsAhead;
    ctx.progress(processed, planned.total);
    const queue = rangesToRun(done, planned.ends);

    // Checkpoints and commits take turns, so each checkpoint adds its batch to what is committed.
    const turns = new Turns();
    // A range's skipped accounts join the run's with its checkpoint: a range done again (after a
    // kill, a retry) reports them once.
    const checkpointWith = (range: KeyRange, b: BillBatch, skippedHere: readonly SkippedAccount[]) => {
      const next = done.with(range, b.accounts);
      const checkpoint = { afterAccountId: next.watermark, ahead: next.ahead, inserted: inserted + b.inserted, skipped: [...skipped, ...skippedHere] } satisfies BillingCheckpoint;
      return { next, checkpoint, processed: processed + b.accounts };
    };
    type Saved = ReturnType<typeof checkpointWith>;

    const billRange = async (range: KeyRange) => {
      const skippedHere: SkippedAccount[] = [];
      let saved: Saved | undefined;
      let endTurn: (() => void) | undefined;
      try {
        const batch = await runIsolated<BillBatch>(
          ctx.pool,
          {
            as: BILLING,
            all: async (db) => {
              const b = await billAccounts(db, period, { afterAccountId: range.after, throughAccountId: range.through });
              endTurn = await turns.take();
              const next = checkpointWith(range, b, skippedHere);
              await ctx.saveCheckpoint(next.checkpoint, next.processed, db);
              saved = next;
              return b;
            },
            ids: async (db) => {
              saved = undefined;
              const { rows: ids } = await db.query<{ id: string }>(
                `SELECT id::text FROM accounts WHERE ${ELIGIBLE} AND id > $2::bigint AND id <= coalesce($3::bigint, ${BIGINT_MAX}) ORDER BY accounts.id`,
                [period.end, range.after, range.through],
              );
              return ids.map((r) => r.id);
            },
            one: (db, accountId) => billAccounts(db, period, { accountId }),
            merge: (results, ids) => ({
              accounts: ids.length,
              inserted: results.reduce((n, r) => n + r.inserted, 0),
              lastAccountId: ids.at(-1) ?? null,
            }),
          },
          skippedHere,
          ctx.logger,
        );
        // Redone account by account: its checkpoint follows, in a turn of its own.
        if (saved === undefined) {
          endTurn ??= await turns.take();
          saved = checkpointWith(range, batch, skippedHere);
          await ctx.saveCheckpoint(saved.checkpoint, saved.processed);
        }
        ({ next: done, processed } = saved);
        inserted = saved.checkpoint.inserted;
        skipped = saved.checkpoint.skipped;
      } finally {
        endTurn?.();
      }
    };

    // With tracing on, each range is a span, its statements within it (the runner's batch spans run from one checkpoint to the next).
    const traced = (range: KeyRange) => inSpan(`${ctx.job.name} range`, { 'job.range.after': range.after, 'job.range.through': range.through ?? 'end' }, () => billRange(range));
    await sideBySide(queue, Math.min(ctx.config.JOB_BATCH_CONCURRENCY, queue.length), ctx.signal, tracingOn() ? traced : billRange);
    // A day with a skipped account is not finished: its usage is kept until a rerun bills it.
    if (skipped.length === 0) await markDayFinished(ctx.pool, BILLING, period.start, 'billed');
    await reportSkipped(skipped, { job: ctx.job.name, period: `billing day ${period.start}`, scheduledTime: ctx.scheduledTime }, { topicArn: ctx.config.ALERT_TOPIC_ARN, logger: ctx.logger });
    return { period: period.start, accounts: processed, invoicesInserted: inserted, skippedAccounts: skipped.map((s) => s.accountId) };
  },
});

/**
 * Runs `work` on each item of `queue` in order, `width` at a time. The first failure stops
 * the others from starting another item, and is thrown once every item started has ended:
 * nothing of the run is left running when it returns.
 */
export async function sideBySide<T>(queue: readonly T[], width: number, signal: AbortSignal, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const lane = async () => {
    while (!failed && next < queue.length) {
      signal.throwIfAborted();
      const item = queue[next++]!;
      try {
        await work(item);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  const ends = await Promise.allSettled(Array.from({ length: Math.max(1, width) }, lane));
  const failure = ends.find((e): e is PromiseRejectedResult => e.status === 'rejected');
  if (failure !== undefined) throw failure.reason;
}
