/**
 * billing-run: one invoice for every active account for the previous UTC day, zero-amount
 * when the account had no usage.
 *
 * The pattern to copy for "do X once per entity per period": keyset batches over the
 * entities (`id > last id ORDER BY id LIMIT n`), each batch one set-based statement that is
 * idempotent by a unique key (invoices are unique on (account_id, period_start), so a rerun,
 * a retry or a concurrent duplicate inserts nothing twice), and a checkpoint after each
 * batch. Pricing lives in app/billing.ts, shared with POST /accounts/:id/invoices.
 */
import { billAccounts, dayPeriod } from '../billing.js';
import { defineJob, previousUtcDay } from './handler.js';

export interface BillingCheckpoint {
  /** Every active account with an id up to this one has its invoice. */
  readonly afterAccountId: string;
  /** Invoices this run inserted so far (the rest already existed). */
  readonly inserted: number;
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
    const { rows } = await ctx.pool.query<{ total: number; done: number }>(
      `SELECT count(*)::int AS total, count(*) FILTER (WHERE id <= $2::bigint)::int AS done
       FROM accounts WHERE status = 'active' AND created_at < $1::date::timestamp AT TIME ZONE 'UTC'`,
      [period.end, ctx.checkpoint?.afterAccountId ?? '0'],
    );
    let { afterAccountId, inserted } = ctx.checkpoint ?? { afterAccountId: '0', inserted: 0 };
    let processed = rows[0]!.done;
    ctx.progress(processed, rows[0]!.total);

    for (;;) {
      ctx.signal.throwIfAborted();
      const batch = await billAccounts(ctx.pool, period, { afterAccountId, limit });
      if (batch.lastAccountId === null) break;
      afterAccountId = batch.lastAccountId;
      processed += batch.accounts;
      inserted += batch.inserted;
      await ctx.saveCheckpoint({ afterAccountId, inserted }, processed);
      if (batch.accounts < limit) break;
    }
    return { period: period.start, accounts: processed, invoicesInserted: inserted };
  },
});
