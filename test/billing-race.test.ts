/**
 * A usage report and the billing of its day meeting on one account: the report either lands
 * before the day's sum, and the invoice counts it, or it sees the invoice and is refused (409).
 * It is never accepted and left out of the invoice. Each side is a real caller, the API's
 * usage route against billing-run's process or the API's invoice route, and the test stops
 * each at the exact point with a table lock of its own, then waits in pg_stat_activity until
 * the other side waits on the account.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isoDate } from '../app/billing.js';
import { PARTITION_DAYS_BEHIND } from '../app/usage-partitions.js';
import { DAY_MS } from '../lib/time-zones.js';
import { randomAdminKey } from './helpers/admin-key.js';
import { startApi, type InProcessApi } from './helpers/api.js';
import { createTestDatabase, eventually, newClient, type TestDatabase } from './helpers/db.js';
import { runJob } from './helpers/jobs.js';

const ADMIN_KEY = randomAdminKey();
const PRICE = 3;
let db: TestDatabase;
let api: InProcessApi;
let holder: pg.Client;

beforeAll(async () => {
  db = await createTestDatabase();
  // A report waits on the other side's lock while a billing-run process starts: on a loaded
  // machine that may pass the default deadline (8 s) and statement timeout (5 s), never these.
  api = await startApi({ DATABASE_URL: db.loginUrl, ADMIN_API_KEY: ADMIN_KEY, REQUEST_DEADLINE_MS: '60000' }, { statementTimeoutMs: 60_000 });
  holder = newClient({ connectionString: db.url, application_name: 'test-lock-holder' });
  await holder.connect();
});
afterAll(async () => {
  await holder.end();
  await api.stop();
  await db.drop();
});

async function call(key: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${api.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

let accounts = 0;
/** A new account created at the start of the oldest day with a partition, with a key of its own. */
async function newAccount(): Promise<{ id: string; key: string }> {
  const account = await call(ADMIN_KEY, 'POST', '/accounts', { name: 'Racer', email: `racer${++accounts}@example.com`, unitPriceCents: PRICE });
  expect(account.status).toBe(201);
  await db.query(`UPDATE accounts SET created_at = $2 WHERE id = $1`, [account.body.id, `${daysAgo(PARTITION_DAYS_BEHIND)}T00:00:00Z`]);
  const key = await call(ADMIN_KEY, 'POST', `/accounts/${account.body.id}/api-keys`);
  expect(key.status).toBe(201);
  return { id: account.body.id, key: key.body.key };
}

/**
 * Resolves once a session of the database waits on a lock while running a statement that
 * matches `like`; `locking`: a session that has locked rows already (it has a transaction id),
 * as a batch has when it writes, and billing-run's readying of its statements has not.
 */
async function someoneWaits(like: string, locking = false): Promise<void> {
  const waits = () => db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1 ${locking ? 'AND backend_xid IS NOT NULL' : ''}`, [like]);
  expect(await eventually(async () => (await waits()).length > 0, 60_000)).toBe(true);
}

/** The two ways a day is billed: billing-run (a batch of every account) and the API's invoice of one. */
const billers = {
  'billing-run': async (_account: { id: string }, day: string) => {
    const next = isoDate(new Date(Date.parse(`${day}T00:00:00Z`) + DAY_MS));
    const job = await runJob(db, ['billing-run', '--scheduled-time', `${next}T00:15:00Z`]);
    expect(job.code).toBe(0);
  },
  'POST /accounts/:id/invoices': async (account: { id: string }, day: string) => {
    expect((await call(ADMIN_KEY, 'POST', `/accounts/${account.id}/invoices`, { periodStart: day })).status).toBe(201);
  },
};

const daysAgo = (n: number) => isoDate(new Date(Date.now() - n * DAY_MS));

/**
 * Each case its own day (yesterday, the day before, ...), so that no run of billing-run bills
 * another's account; each a day the migrations made a partition for, after the accounts' creation.
 */
let daysBack = 0;
function nextDay(): string {
  if (++daysBack >= PARTITION_DAYS_BEHIND) throw new Error(`more cases than the ${PARTITION_DAYS_BEHIND - 1} days with a partition after the accounts' creation`);
  return daysAgo(daysBack);
}

async function invoiceOf(accountId: string, day: string) {
  return db.query<{ quantity: string; amount_cents: string }>(`SELECT quantity::text, amount_cents::text FROM invoices WHERE account_id = $1 AND period_start = $2`, [accountId, day]);
}

describe.each(Object.entries(billers))('a usage report meeting %s on its account', (_name, bill) => {
  it('a report that holds the account first lands before the sum: 201, and the invoice counts it', async () => {
    const day = nextDay();
    const a = await newAccount();
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 3, occurredAt: `${day}T08:00:00Z` })).status).toBe(201);
    // The report stops after it has locked its account (FOR SHARE), at the write into the day's partition.
    await holder.query('BEGIN');
    await holder.query(`LOCK TABLE usage_d${day.replaceAll('-', '')} IN SHARE MODE`);
    const report = call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 7, occurredAt: `${day}T12:00:00Z` });
    let billed: Promise<void> | undefined;
    try {
      await someoneWaits('%INSERT INTO usage %');
      billed = bill(a, day);
      await someoneWaits('%FOR NO KEY UPDATE%');
      await holder.query('ROLLBACK');
      expect((await report).status).toBe(201);
      await billed;
    } finally {
      await holder.query('ROLLBACK');
      await Promise.allSettled([report, billed]);
    }
    expect(await invoiceOf(a.id, day)).toEqual([{ quantity: '10', amount_cents: String(10 * PRICE) }]);
  });

  it('a report that meets the account locked for billing sees the invoice: 409, nothing stored, the invoice as billed', async () => {
    const day = nextDay();
    const a = await newAccount();
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 3, occurredAt: `${day}T08:00:00Z` })).status).toBe(201);
    // Billing stops after it has locked its accounts (FOR NO KEY UPDATE), at the write of the invoices.
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE invoices IN SHARE MODE');
    const billed = bill(a, day);
    let report: ReturnType<typeof call> | undefined;
    try {
      await someoneWaits('%INSERT INTO invoices%', true);
      report = call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 7, occurredAt: `${day}T12:00:00Z` });
      await someoneWaits('%FOR SHARE%');
      await holder.query('ROLLBACK');
      await billed;
      expect(await report).toMatchObject({ status: 409, body: { error: { code: 'CONFLICT', message: `Account ${a.id} is already invoiced for ${day} (UTC); usage for an invoiced day is refused` } } });
    } finally {
      await holder.query('ROLLBACK');
      await Promise.allSettled([billed, report]);
    }
    expect(await invoiceOf(a.id, day)).toEqual([{ quantity: '3', amount_cents: String(3 * PRICE) }]);
    expect(await db.query(`SELECT quantity::int FROM usage WHERE account_id = $1 AND occurred_at >= $2::date::timestamp AT TIME ZONE 'UTC' AND occurred_at < ($2::date + 1)::timestamp AT TIME ZONE 'UTC'`, [a.id, day])).toEqual([{ quantity: 3 }]);
  });
});
