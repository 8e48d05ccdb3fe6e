/**
 * The overflow attack: one account with the highest unit price and usage whose
 * day sums past bigint. Before, billing-run, report-aggregation and the usage-summary worker
 * failed for every account, every night. Now each does its work for everyone else, exits 0,
 * names the account in its summary, its log and exactly one alert, and keeps its data.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_UNIT_PRICE_CENTS } from '../app/billing.js';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_DAY, NIGHTLY_TIME, expectNothingLeft, runJob, seed, summaryOf } from './helpers/jobs.js';
import { startServer } from './helpers/process.js';
import { snsEnv, startFakeSns, type FakeSns } from './helpers/sns.js';

let db: TestDatabase;
let sns: FakeSns;
let attacker: string;
/** Two events near bigint's maximum: each fits its column, their sum does not. */
const HUGE = '9000000000000000000';

beforeAll(async () => {
  db = await createTestDatabase();
  await seed(db, 200);
  sns = await startFakeSns();
  // Rows the API now refuses (quantity and price bounds), as they were stored before it did.
  const [row] = await db.query<{ id: string }>(
    `INSERT INTO accounts (name, email, unit_price_cents, created_at) VALUES ('x', 'x@example.com', $1, '2025-01-01') RETURNING id::text`,
    [MAX_UNIT_PRICE_CENTS],
  );
  attacker = row!.id;
  await db.query(
    `INSERT INTO usage (account_id, metric, quantity, occurred_at)
     SELECT $1, 'api.calls', $2::bigint, t FROM unnest(ARRAY[$3::timestamptz, $3::timestamptz + interval '1 hour', now() - interval '1 hour', now() - interval '2 hours']) AS t`,
    [attacker, HUGE, `${NIGHTLY_DAY}T10:00:00Z`],
  );
});
afterAll(async () => {
  await sns.close();
  await db.drop();
});

async function activeOthers(): Promise<string[]> {
  const rows = await db.query<{ id: string }>(`SELECT id::text FROM accounts WHERE status = 'active' AND id <> $1 ORDER BY accounts.id`, [attacker]);
  return rows.map((r) => r.id);
}

function expectOneAlertNaming(account: string, job: string): void {
  expect(sns.messages).toHaveLength(1);
  const alert = sns.messages[0]!;
  expect(alert.subject).toBe(`[job skipped accounts] ${job}: 1 account(s) for ${job === 'billing-run' ? 'billing' : 'usage'} day ${NIGHTLY_DAY}`);
  expect(alert.message).toContain(`  account ${account}: bigint out of range`);
  // No secrets and no personal data: neither the database password nor the account's email.
  expect(alert.message).not.toMatch(/postgres:postgres|x@example\.com|AKIDTEST/);
}

describe('the overflow attack', () => {
  it('billing-run invoices every other account, skips and reports the attacker once, keeps its usage, exits 0', async () => {
    sns.messages.length = 0;
    const r = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { JOB_BATCH_SIZE: '50', ...snsEnv(sns) });
    expect(r.code).toBe(0);
    const others = await activeOthers();
    const invoiced = await db.query<{ id: string }>(`SELECT account_id::text AS id FROM invoices WHERE period_start = $1 ORDER BY account_id`, [NIGHTLY_DAY]);
    expect(invoiced.map((i) => i.id)).toEqual(others);
    expect(summaryOf(r.logs)).toMatchObject({ accounts: others.length + 1, invoicesInserted: others.length, skippedAccounts: [attacker] });
    expect(r.logs.find((l) => l.level === 'error' && l.accountId === attacker)?.msg).toBe(
      `account ${attacker} skipped: bigint out of range; its data is kept, every other account goes on`,
    );
    expectOneAlertNaming(attacker, 'billing-run');
    expect(await db.query('SELECT 1 FROM usage WHERE account_id = $1', [attacker])).toHaveLength(4);
    await expectNothingLeft(db);

    // A rerun finds the day done: no second alert.
    const again = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], snsEnv(sns));
    expect(again.code).toBe(0);
    expect(sns.messages).toHaveLength(1);
  });

  it('report-aggregation rolls up every other account, skips and reports the attacker once, exits 0', async () => {
    sns.messages.length = 0;
    const r = await runJob(db, ['report-aggregation', '--scheduled-time', NIGHTLY_TIME], { JOB_BATCH_SIZE: '50', ...snsEnv(sns) });
    expect(r.code).toBe(0);
    expect(summaryOf(r.logs)).toMatchObject({ skippedAccounts: [attacker] });
    const [expected] = await db.query<{ n: number }>(
      `SELECT count(DISTINCT (account_id, metric))::int AS n FROM usage
       WHERE account_id <> $1 AND occurred_at >= $2::date::timestamp AT TIME ZONE 'UTC' AND occurred_at < ($2::date + 1)::timestamp AT TIME ZONE 'UTC'`,
      [attacker, NIGHTLY_DAY],
    );
    const [rolled] = await db.query<{ n: number; attacker: number }>(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE account_id = $1)::int AS attacker FROM usage_daily WHERE day = $2`,
      [attacker, NIGHTLY_DAY],
    );
    expect(expected!.n).toBeGreaterThan(0);
    expect(rolled).toEqual({ n: expected!.n, attacker: 0 });
    expectOneAlertNaming(attacker, 'report-aggregation');
  });

  it('the usage-summary worker keeps refreshing for everyone, the attacker included, and /readyz stays 200', async () => {
    const server = await startServer({ DATABASE_URL: db.url, USAGE_SUMMARY_REFRESH_MS: '200' });
    try {
      const summed = await eventually(async () => {
        const rows = await db.query<{ quantity: string }>('SELECT quantity::text FROM account_usage_30d WHERE account_id = $1', [attacker]);
        return rows[0]?.quantity === '18000000000000000000';
      }, 60_000);
      expect(summed).toBe(true);
      expect(server.logs.some((l) => l.level === 'error')).toBe(false);
      expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    } finally {
      server.kill('SIGTERM');
      await server.exited;
    }
  });
});
