/**
 * billing-run: one invoice for every active account for the previous UTC day, zero-amount
 * when the account had no usage.
 *
 * The pattern to copy for "do X once per entity per period": keyset batches over the
 * entities (`id > last id ORDER BY id LIMIT n`), each batch one set-based statement that is
 * idempotent by a unique key (invoices are unique on (account_id, period_start), so a rerun,
 * a retry or a concurrent duplicate inserts nothing twice), and a checkpoint with each
 * batch, in the batch's transaction. Pricing lives in app/billing.ts, shared with POST /accounts/:id/invoices.
 *
 * Batches run as the billing role (app/tenancy.ts), the one role that may write invoices. An account whose day cannot be
 * billed (its amount past bigint) is skipped and reported; everyone else is billed.
 */
import { billAccounts, dayPeriod, type BillBatch } from '../billing.js';
import { defineJob, previousUtcDay } from './handler.js';
import { reportSkipped, runIsolated, type SkippedAccount } from './per-account.js';
import { BILLING, withIdentity } from '../tenancy.js';
import { markDayFinished } from './usage-days.js';

export interface BillingCheckpoint {
  /** Every active account with an id up to this one has its invoice. */
  readonly afterAccountId: string;
  /** Invoices this run inserted so far (the rest already existed). */
  readonly inserted: number;
  /** Accounts skipped so far, reported when the run ends. */
  readonly skipped?: readonly SkippedAccount[];
}

/** The UTC day a billing run scheduled at `t` bills: the day before. */
export function billingPeriodFor(t: Date) {
  return dayPeriod(previousUtcDay(t));
}

export const billingRun = defineJob<BillingCheckpoint>({
  describePeriod: (t) => `billing day ${billingPeriodFor(t).start}`,

  async run(ctx) {
    const period = billingPeriodFor(ctx.scheduledTime);
    const limit = ctx.config.JOB_BATCH_SIZE;
    const { rows } = await withIdentity(ctx.pool, BILLING, (db) =>
      db.query<{ total: number; done: number }>(
        `SELECT count(*)::int AS total, count(*) FILTER (WHERE id <= $2::bigint)::int AS done
         FROM accounts WHERE status = 'active' AND created_at < $1::date::timestamp AT TIME ZONE 'UTC'`,
        [period.end, ctx.checkpoint?.afterAccountId ?? '0'],
      ),
    );
    let { afterAccountId, inserted } = ctx.checkpoint ?? { afterAccountId: '0', inserted: 0 };
    const skipped: SkippedAccount[] = [...(ctx.checkpoint?.skipped ?? [])];
    let processed = rows[0]!.done;
    ctx.progress(processed, rows[0]!.total);

    for (;;) {
      ctx.signal.throwIfAborted();
      const after = afterAccountId;
      // The checkpoint is written in the batch's own transaction (one commit a batch, not two),
      // unless the batch is redone account by account, whose checkpoint follows it.
      let saved = false;
      const batch = await runIsolated<BillBatch>(
        ctx.pool,
        {
          as: BILLING,
          all: async (db) => {
            const b = await billAccounts(db, period, { afterAccountId: after, limit });
            if (b.lastAccountId !== null) {
              await ctx.saveCheckpoint({ afterAccountId: b.lastAccountId, inserted: inserted + b.inserted, skipped }, processed + b.accounts, db);
              saved = true;
            }
            return b;
          },
          ids: async (db) => {
            saved = false;
            const { rows: ids } = await db.query<{ id: string }>(
              `SELECT id::text FROM accounts WHERE status = 'active' AND created_at < $1::date::timestamp AT TIME ZONE 'UTC' AND id > $2::bigint ORDER BY accounts.id LIMIT $3`,
              [period.end, after, limit],
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
        skipped,
        ctx.logger,
      );
      if (batch.lastAccountId === null) break;
      afterAccountId = batch.lastAccountId;
      processed += batch.accounts;
      inserted += batch.inserted;
      if (!saved) await ctx.saveCheckpoint({ afterAccountId, inserted, skipped }, processed);
      if (batch.accounts < limit) break;
    }
    // A day with a skipped account is not finished: its usage is kept until a rerun bills it.
    if (skipped.length === 0) await markDayFinished(ctx.pool, BILLING, period.start, 'billed');
    await reportSkipped(skipped, { job: ctx.job.name, period: `billing day ${period.start}`, scheduledTime: ctx.scheduledTime }, { topicArn: ctx.config.ALERT_TOPIC_ARN, logger: ctx.logger });
    return { period: period.start, accounts: processed, invoicesInserted: inserted, skippedAccounts: skipped.map((s) => s.accountId) };
  },
});
