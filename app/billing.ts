/**
 * Billing: one invoice per account per billing period (one UTC day), priced at the
 * account's unit price. The API's "create invoice" and the billing-run job both go through
 * `billAccounts`, so there is one pricing rule and one idempotency rule: invoices are unique
 * on (account_id, period_start) and a second attempt inserts nothing.
 */
import { DAY_MS } from '../lib/time-zones.js';
import type { Queryable } from './tenancy.js';

export interface BillingPeriod {
  /** First day of the period, `YYYY-MM-DD` (UTC). */
  readonly start: string;
  /** The day after the last day of the period, `YYYY-MM-DD` (UTC). */
  readonly end: string;
}

/** The billing period (one UTC day) that contains `day`. */
export function dayPeriod(day: Date): BillingPeriod {
  const start = new Date(Date.UTC(day.getUTCFullYear(), day.getUTCMonth(), day.getUTCDate()));
  const end = new Date(start.getTime() + DAY_MS);
  return { start: isoDate(start), end: isoDate(end) };
}

export function isoDate(d: Date): string {
  return d.toISOString().slice(0, 10);
}

export interface BillBatch {
  /** Accounts considered (active, created before the period ended) in this batch. */
  readonly accounts: number;
  /** Invoices this call inserted; fewer than `accounts` when some already existed. */
  readonly inserted: number;
  /** The highest account id of the batch: the next batch starts after it. Null when the batch was empty. */
  readonly lastAccountId: string | null;
}

/** Largest quantity one usage event may report; see MAX_UNIT_PRICE_CENTS for why. */
export const MAX_USAGE_QUANTITY = 1_000_000;
/**
 * Largest unit price. One event is then worth at most 10^12 cents, so an account's day fits
 * the invoice's bigint (9.2 x 10^18) until it passes 9.2 million events at both maxima.
 * Sums are taken in numeric, which does not overflow; a day past that bound fails its cast to
 * bigint, and billing-run then skips (and reports) that one account.
 */
export const MAX_UNIT_PRICE_CENTS = 1_000_000;

/**
 * Writes the period's invoices for the next `limit` active accounts with id > `afterAccountId`
 * (or for the one account `accountId`): usage summed per account, zero usage billed as a
 * zero-amount invoice, existing invoices left untouched. Run it in a transaction (see
 * app/tenancy.ts): it first locks the batch's accounts, which waits for any usage report
 * still in flight for them (POST /accounts/:id/usage holds FOR SHARE on its account), so a
 * report either lands before the sum or sees the invoice and is refused.
 */
export async function billAccounts(
  db: Queryable,
  period: BillingPeriod,
  batch: { afterAccountId?: string; limit: number } | { accountId: string },
): Promise<BillBatch> {
  const one = 'accountId' in batch;
  // A batch's two statements are prepared once per connection (named), so that from the sixth
  // batch on Postgres runs its generic plan instead of planning each batch anew: planning the
  // insert for 5,000 literal ids estimated each id against the column statistics, 5 to 25 ms
  // a batch, and the generic plan (a merge of two index scans) runs as fast
  // (docs/performance.md#where-billing-runs-time-went). One account's invoice (the API's) is
  // planned as before.
  const named = (name: string, text: string, values: unknown[]) => (one ? { text, values } : { name, text, values });
  // The lock and the sum are two statements, on purpose: under READ COMMITTED a statement reads
  // with the snapshot it took when it began, so a sum in the lock's own statement (one CTE) would
  // miss a report that committed while the lock waited for it (test/billing-race.test.ts).
  // The day's bounds are UTC midnights: a bare `$1::date` compared with a timestamptz would
  // be midnight in the session's TimeZone, which is not UTC on every server.
  const { rows: locked } = await db.query<{ id: string }>(
    named(
      'billing-lock-batch',
      `SELECT id::text FROM accounts
       WHERE status = 'active' AND created_at < $1::date::timestamp AT TIME ZONE 'UTC'
         AND ${one ? 'id = $2::bigint' : 'id > $2::bigint'}
       ORDER BY accounts.id LIMIT $3
       FOR NO KEY UPDATE`,
      [period.end, one ? batch.accountId : (batch.afterAccountId ?? '0'), one ? 1 : batch.limit],
    ),
  );
  if (locked.length === 0) return { accounts: 0, inserted: 0, lastAccountId: null };
  // The rows inserted are the command's count: conflicts (invoices already there) are not counted.
  const { rowCount } = await db.query(
    named(
      'billing-insert-batch',
      // One sum per account of the batch, as one grouped scan of the usage index: a correlated
      // subquery per account (one index descent each) made this statement about a third slower.
      // sum(bigint) is numeric: it cannot overflow.
      `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents)
       SELECT a.id, $1::date, $2::date, coalesce(u.quantity, 0), coalesce(u.quantity, 0) * a.unit_price_cents
       FROM accounts a
       LEFT JOIN (SELECT account_id, sum(quantity) AS quantity FROM usage
                  WHERE account_id = ANY ($3::bigint[])
                    AND occurred_at >= $1::date::timestamp AT TIME ZONE 'UTC' AND occurred_at < $2::date::timestamp AT TIME ZONE 'UTC'
                  GROUP BY account_id) u ON u.account_id = a.id
       WHERE a.id = ANY ($3::bigint[])
       ON CONFLICT (account_id, period_start) DO NOTHING`,
      [period.start, period.end, locked.map((r) => r.id)],
    ),
  );
  return { accounts: locked.length, inserted: rowCount ?? 0, lastAccountId: locked.at(-1)!.id };
}
