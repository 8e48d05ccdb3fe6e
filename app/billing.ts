/**
 * Billing: one invoice per account per billing period (one UTC day), priced at the
 * account's unit price. The API's "create invoice" and the billing-run job both go through
 * `billAccounts`, so there is one pricing rule and one idempotency rule: invoices are unique
 * on (account_id, period_start) and a second attempt inserts nothing.
 */
import type pg from 'pg';

export interface BillingPeriod {
  /** First day of the period, `YYYY-MM-DD` (UTC). */
  readonly start: string;
  /** The day after the last day of the period, `YYYY-MM-DD` (UTC). */
  readonly end: string;
}

/** The billing period (one UTC day) that contains `day`. */
export function dayPeriod(day: Date): BillingPeriod {
  const start = new Date(Date.UTC(day.getUTCFullYear(), day.getUTCMonth(), day.getUTCDate()));
  const end = new Date(start.getTime() + 86_400_000);
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

/**
 * Writes the period's invoices for the next `limit` active accounts with id > `afterAccountId`
 * (or for the one account `accountId`), in one statement: usage summed per account, zero
 * usage billed as a zero-amount invoice, existing invoices left untouched.
 */
export async function billAccounts(
  db: Pick<pg.ClientBase, 'query'>,
  period: BillingPeriod,
  batch: { afterAccountId?: string; limit: number } | { accountId: string },
): Promise<BillBatch> {
  const one = 'accountId' in batch;
  const { rows } = await db.query<{ accounts: string; inserted: string; last_id: string | null }>(
    // The day's bounds are UTC midnights: a bare `$1::date` compared with a timestamptz would
    // be midnight in the session's TimeZone, which is not UTC on every server.
    `WITH batch AS (
       SELECT id, unit_price_cents FROM accounts
       WHERE status = 'active' AND created_at < $2::date::timestamp AT TIME ZONE 'UTC'
         AND ${one ? 'id = $3::bigint' : 'id > $3::bigint'}
       ORDER BY id
       LIMIT $4
     ), totals AS MATERIALIZED (
       -- MATERIALIZED: otherwise Postgres inlines the CTE and sums each account's usage twice,
       -- once for the quantity and once for the amount.
       SELECT b.id, b.unit_price_cents,
              coalesce((SELECT sum(u.quantity) FROM usage u
                        WHERE u.account_id = b.id AND u.occurred_at >= $1::date::timestamp AT TIME ZONE 'UTC'
                          AND u.occurred_at < $2::date::timestamp AT TIME ZONE 'UTC'), 0)::bigint AS quantity
       FROM batch b
     ), inserted AS (
       INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents)
       SELECT id, $1::date, $2::date, quantity, quantity * unit_price_cents FROM totals
       ON CONFLICT (account_id, period_start) DO NOTHING
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM batch) AS accounts,
            (SELECT count(*) FROM inserted) AS inserted,
            (SELECT max(id)::text FROM batch) AS last_id`,
    [period.start, period.end, one ? batch.accountId : (batch.afterAccountId ?? '0'), one ? 1 : batch.limit],
  );
  const row = rows[0]!;
  return { accounts: Number(row.accounts), inserted: Number(row.inserted), lastAccountId: row.last_id };
}
