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

/** The largest bigint: a range with no last id ends there. */
export const BIGINT_MAX = '9223372036854775807';

/** Largest quantity one usage event may report; see MAX_UNIT_PRICE_CENTS for why. */
export const MAX_USAGE_QUANTITY = 1_000_000;
/**
 * Largest unit price. One event is then worth at most 10^12 cents, so an account's day fits
 * the invoice's bigint (9.2 x 10^18) until it passes 9.2 million events at both maxima.
 * Sums are taken in numeric, which does not overflow; a day past that bound fails its cast to
 * bigint, and billing-run then skips (and reports) that one account.
 */
export const MAX_UNIT_PRICE_CENTS = 1_000_000;

/** How long `prepareBillBatches` waits for a table's lock before it gives up. */
const PREPARE_LOCK_TIMEOUT_MS = 100;

/** The prepared lock statement's name (per connection). */
const LOCK_BATCH = 'billing-lock-batch';

/** Whom a period bills: the accounts active and created before it ended (a UTC midnight). */
const BILLED = `status = 'active' AND created_at < $1::date::timestamp AT TIME ZONE 'UTC'`;

/**
 * Locks the one account `$2` if it is billed. The day's bounds are UTC midnights: a bare
 * `$1::date` compared with a timestamptz would be midnight in the session's TimeZone, which is
 * not UTC on every server.
 */
const LOCK_ONE = `SELECT id::text FROM accounts WHERE ${BILLED} AND id = $2::bigint FOR NO KEY UPDATE`;

/** Ids after `$n` and up to `$n+1` (null: the last). */
const inRange = (column: string, n: number) => `${column} > $${n}::bigint AND ${column} <= coalesce($${n + 1}::bigint, ${BIGINT_MAX})`;

/**
 * Locks every account of the range, billed or not, in id order, and says how many are billed
 * and the last of them. Every account being locked, none changes status before the insert
 * reads them (an update of an account waits for the lock), so the insert bills exactly the
 * accounts counted here, by the range alone: no list of ids goes to Postgres and back.
 */
const LOCK_RANGE = `SELECT (count(*) FILTER (WHERE ${BILLED}))::int AS accounts, (max(id) FILTER (WHERE ${BILLED}))::text AS last
  FROM (SELECT id, status, created_at FROM accounts WHERE ${inRange('id', 2)} ORDER BY id FOR NO KEY UPDATE) AS locked`;

/**
 * The invoices of the billed accounts that `which` selects: one sum per account, as one
 * grouped scan of the usage index (a correlated subquery per account, one index descent
 * each, made this statement about a third slower). sum(bigint) is numeric: it cannot overflow.
 */
const insertSums = (which: (column: string) => string) => `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents)
  SELECT a.id, $1::date, $2::date, coalesce(u.quantity, 0), coalesce(u.quantity, 0) * a.unit_price_cents
  FROM accounts a
  LEFT JOIN (SELECT account_id, sum(quantity) AS quantity FROM usage
             WHERE ${which('account_id')}
               AND occurred_at >= $1::date::timestamp AT TIME ZONE 'UTC' AND occurred_at < $2::date::timestamp AT TIME ZONE 'UTC'
             GROUP BY account_id) u ON u.account_id = a.id
  WHERE ${which('a.id')} AND a.status = 'active' AND a.created_at < $2::date::timestamp AT TIME ZONE 'UTC'
  ON CONFLICT (account_id, period_start) DO NOTHING`;
const INSERT_ONE = insertSums((column) => `${column} = $3::bigint`);
const INSERT_RANGE = insertSums((column) => inRange(column, 3));

/**
 * Readies a batch's two statements on this connection, with nothing to lock or insert: a
 * billing run's connections do it while the run takes its locks, so the first batches find
 * the lock prepared and their tables' descriptions loaded.
 */
export async function prepareBillBatches(db: Queryable, period: BillingPeriod): Promise<void> {
  // It only readies: rather than wait behind a lock on a table (an index being built), it gives up.
  await db.query(`SET LOCAL lock_timeout = ${PREPARE_LOCK_TIMEOUT_MS}`);
  await db.query({ name: LOCK_BATCH, text: LOCK_RANGE, values: [period.end, '0', '0'] });
  await db.query({ text: INSERT_RANGE, values: [period.start, period.end, '0', '0'] });
}

/**
 * Writes the period's invoices for the active accounts with an id after `afterAccountId` and up
 * to `throughAccountId` (null: the last), or for the one account `accountId`: usage summed per account, zero usage billed as a
 * zero-amount invoice, existing invoices left untouched. Run it in a transaction (see
 * app/tenancy.ts): it first locks the batch's accounts, which waits for any usage report
 * still in flight for them (POST /accounts/:id/usage holds FOR SHARE on its account), so a
 * report either lands before the sum or sees the invoice and is refused.
 */
export async function billAccounts(
  db: Queryable,
  period: BillingPeriod,
  batch: { afterAccountId: string; throughAccountId: string | null } | { accountId: string },
): Promise<BillBatch> {
  // The lock is prepared once per connection (named): from the sixth batch on Postgres runs its
  // generic plan, a range of the primary key whatever the range. The insert is planned for each
  // range (unnamed): a generic plan, blind to the range, reads usage through the time index,
  // every row of the day for each batch, where the range's own plan reads the range's rows
  // through the account index (20 batches of 5,000 accounts: 1.2 s against 1.5 s). One
  // account's invoice (the API's) is planned each time.
  // The lock and the sum are two statements, on purpose: under READ COMMITTED a statement reads
  // with the snapshot it took when it began, so a sum in the lock's own statement (one CTE) would
  // miss a report that committed while the lock waited for it (test/billing-race.test.ts).
  if ('accountId' in batch) {
    const { rows } = await db.query<{ id: string }>({ text: LOCK_ONE, values: [period.end, batch.accountId] });
    if (rows.length === 0) return { accounts: 0, inserted: 0, lastAccountId: null };
    const { rowCount } = await db.query({ text: INSERT_ONE, values: [period.start, period.end, batch.accountId] });
    return { accounts: 1, inserted: rowCount ?? 0, lastAccountId: batch.accountId };
  }
  const range = [batch.afterAccountId, batch.throughAccountId];
  const { rows } = await db.query<{ accounts: number; last: string | null }>({ name: LOCK_BATCH, text: LOCK_RANGE, values: [period.end, ...range] });
  const { accounts, last } = rows[0]!;
  if (accounts === 0) return { accounts: 0, inserted: 0, lastAccountId: null };
  // The rows inserted are the command's count: conflicts (invoices already there) are not counted.
  const { rowCount } = await db.query({ text: INSERT_RANGE, values: [period.start, period.end, ...range] });
  return { accounts, inserted: rowCount ?? 0, lastAccountId: last };
}
