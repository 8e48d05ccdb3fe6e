/** What each of the four jobs writes, and that a rerun of it changes nothing twice. */
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CSV_COLUMNS } from '../../app/jobs/weekly-export.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { NIGHTLY_DAY, NIGHTLY_TIME, expectNothingLeft, expectOneInvoicePerActiveAccount, jobRuns, runJob, seed, summaryOf } from '../helpers/jobs.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await seed(db, 400);
});
afterAll(() => db.drop());

describe('billing-run', () => {
  it("bills every active account its day's usage at its unit price, zero when it had none, and nobody else", async () => {
    const r = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { JOB_BATCH_SIZE: '64' });
    expect(r.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    // The same invoices, computed in one statement straight from the tables.
    const mismatches = await db.query(
      `SELECT a.id, i.quantity, i.amount_cents, coalesce(u.q, 0) AS expected_quantity
       FROM accounts a
       LEFT JOIN invoices i ON i.account_id = a.id AND i.period_start = $1
       LEFT JOIN (SELECT account_id, sum(quantity) AS q FROM usage WHERE occurred_at >= $1::date AND occurred_at < $1::date + 1 GROUP BY account_id) u ON u.account_id = a.id
       WHERE (a.status = 'active') <> (i.id IS NOT NULL)
          OR i.quantity <> coalesce(u.q, 0) OR i.amount_cents <> coalesce(u.q, 0) * a.unit_price_cents`,
      [NIGHTLY_DAY],
    );
    expect(mismatches).toEqual([]);
    const [zero] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM invoices WHERE period_start = $1 AND amount_cents = 0 AND quantity = 0`, [NIGHTLY_DAY]);
    expect(zero!.n).toBeGreaterThan(0);
    const total = await db.query<{ total: string }>(`SELECT total::text FROM job_runs WHERE job = 'billing-run'`);
    expect(total).toEqual([{ total: String((await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM accounts WHERE status = 'active'`))[0]!.n) }]);
    await expectNothingLeft(db);
  });

  const digest = async () =>
    (await db.query<{ d: string }>(`SELECT md5(string_agg(account_id || ':' || quantity || ':' || amount_cents, ',' ORDER BY account_id)) AS d FROM invoices WHERE period_start = $1`, [NIGHTLY_DAY]))[0]!.d;

  it('one batch at a time (JOB_BATCH_CONCURRENCY=1) writes the same invoices as batches side by side', async () => {
    const sideBySide = await digest();
    await db.query('TRUNCATE invoices, job_runs');
    const r = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { JOB_BATCH_SIZE: '64', JOB_BATCH_CONCURRENCY: '1' });
    expect(r.code).toBe(0);
    expect(await digest()).toBe(sideBySide);
    await expectOneInvoicePerActiveAccount(db);
  });

  it('a resumed run skips the ranges its checkpoint has done beyond its watermark, and its counts stay exact', async () => {
    const complete = await digest();
    const ids = (await db.query<{ id: string }>('SELECT id::text FROM accounts ORDER BY accounts.id')).map((r) => r.id);
    const eligible = async (after: string, through: string | null) =>
      (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM accounts WHERE status = 'active' AND id > $1::bigint AND ($2::bigint IS NULL OR id <= $2::bigint)`, [after, through]))[0]!.n;
    // An earlier attempt committed every range up to `watermark`, and (ahead, through] beyond it;
    // its ranges ended at every 50th account, as the rerun's do.
    const [watermark, ahead, through] = [ids[99]!, ids[199]!, ids[299]!];
    const gaps = (await eligible(watermark, ahead)) + (await eligible(through, null));
    await db.query(`DELETE FROM invoices WHERE period_start = $1 AND ((account_id > $2 AND account_id <= $3) OR account_id > $4)`, [NIGHTLY_DAY, watermark, ahead, through]);
    await db.query('TRUNCATE job_runs');
    const checkpoint = { afterAccountId: watermark, ahead: [{ after: ahead, through, items: await eligible(ahead, through) }], inserted: 1_234, skipped: [] };
    await db.query(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, finished_at, checkpoint, error, ran_on) VALUES ('billing-run', $1, 'interrupted', 1, now(), $2, 'interrupted by SIGTERM', 'a-stopped-task')`,
      [NIGHTLY_TIME, JSON.stringify(checkpoint)],
    );
    const r = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { JOB_BATCH_SIZE: '50' });
    expect(r.code).toBe(0);
    const active = await eligible('0', null);
    // Every account counted once: a range done again would count its accounts twice.
    expect(summaryOf(r.logs)).toMatchObject({ accounts: active, invoicesInserted: 1_234 + gaps, skippedAccounts: [] });
    expect(await digest()).toBe(complete);
    await expectOneInvoicePerActiveAccount(db);
    await expectNothingLeft(db);
  });
});

describe('report-aggregation', () => {
  it('upserts the daily rollups; a rerun after late usage corrects the day instead of adding to it', async () => {
    const scheduled = '2025-03-10T01:30:00Z';
    const expected = `SELECT account_id::text, metric, sum(quantity)::text AS quantity, count(*)::text AS events
                      FROM usage WHERE occurred_at >= $1::date AND occurred_at < $1::date + 1 GROUP BY 1, 2 ORDER BY 1, 2`;
    const actual = `SELECT account_id::text, metric, quantity::text, events::text FROM usage_daily WHERE day = $1 ORDER BY 1, 2`;

    const first = await runJob(db, ['report-aggregation', '--scheduled-time', scheduled], { JOB_BATCH_SIZE: '50' });
    expect(first.code).toBe(0);
    const rollups = await db.query(actual, [NIGHTLY_DAY]);
    expect(rollups.length).toBeGreaterThan(0);
    expect(rollups).toEqual(await db.query(expected, [NIGHTLY_DAY]));
    expect(await db.query(`SELECT DISTINCT day::text FROM usage_daily`)).toEqual([{ day: NIGHTLY_DAY }]);

    // Usage reported late, then the day is rolled up again.
    await db.query(
      `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
       SELECT id, 'api.calls', 1000, $1::date + interval '23 hours', 'late-1' FROM accounts ORDER BY id LIMIT 3`,
      [NIGHTLY_DAY],
    );
    const again = await runJob(db, ['report-aggregation', '--scheduled-time', scheduled]);
    expect(again.code).toBe(0);
    expect(again.logs.some((l) => l.outcome === 'already-done')).toBe(true);
    const forced = await runJob(db, ['report-aggregation', '--scheduled-time', scheduled, '--force']);
    expect(forced.code).toBe(0);
    expect(await db.query(actual, [NIGHTLY_DAY])).toEqual(await db.query(expected, [NIGHTLY_DAY]));
    await expectNothingLeft(db);
  });

  it('refuses a day older than the usage retention, whose raw usage may be gone', async () => {
    const r = await runJob(db, ['report-aggregation', '--scheduled-time', '2025-03-10T01:30:00Z', '--force'], { USAGE_RETENTION_DAYS: '1', JOB_RETRY_BACKOFF_MS: '0' });
    expect(r.code).toBe(1);
    expect((await jobRuns(db, 'report-aggregation')).at(-1)?.error).toBe(
      'refusing to roll up 2025-03-09: it is older than USAGE_RETENTION_DAYS (1), so its raw usage may be gone',
    );
  });
});

describe('data-cleanup', () => {
  it('deletes, in small batches, only the usage past retention that is invoiced and rolled up, and old finished runs', async () => {
    // By now 2025-03-09 is invoiced (active accounts) and rolled up; 2025-03-08 is neither.
    await db.query(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, started_at, finished_at, heartbeat_at, ran_on)
       VALUES ('weekly-export', '2024-01-01', 'succeeded', 1, '2024-01-01', '2024-01-01 00:05', '2024-01-01 00:05', 'old-task')`,
    );
    const count = async (where: string) => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM usage u WHERE ${where}`))[0]!.n;
    const expired = `u.occurred_at >= '${NIGHTLY_DAY}' AND u.occurred_at < '${NIGHTLY_DAY}'::date + 1 AND EXISTS (SELECT 1 FROM accounts a WHERE a.id = u.account_id AND a.status = 'active')`;
    const toDelete = await count(expired);
    const total = await count('true');
    expect(toDelete).toBeGreaterThan(10);

    // Three days of retention counted back from 2025-03-13: usage before 2025-03-10 has expired.
    const r = await runJob(db, ['data-cleanup', '--scheduled-time', '2025-03-13T00:00:00Z'], { USAGE_RETENTION_DAYS: '3', JOB_RUNS_RETENTION_DAYS: '30', JOB_BATCH_SIZE: '7' });
    expect(r.code).toBe(0);
    expect(summaryOf(r.logs)).toEqual({
      usageCutoff: '2025-03-10T00:00:00.000Z',
      jobRunsCutoff: '2025-02-11T00:00:00.000Z',
      // 2025's usage is dated before every day partition: it is in usage_default, deleted row by row.
      usageDaysRetired: 0,
      usageDaysKept: [],
      usageDeleted: toDelete,
      jobRunsDeleted: 1,
    });
    expect(await count(expired)).toBe(0);
    expect(await count('true')).toBe(total - toDelete);
    // Kept: the uninvoiced day before, the suspended and closed accounts' usage, and the recent days.
    expect(await count(`u.occurred_at < '2025-03-09'`)).toBeGreaterThan(0);
    expect(await db.query(`SELECT count(*)::int AS n FROM job_runs WHERE ran_on = 'old-task'`)).toEqual([{ n: 0 }]);
    // Checkpointed after every batch of at most 7 rows.
    const [row] = (await jobRuns(db, 'data-cleanup')).slice(-1);
    expect(row).toMatchObject({ status: 'succeeded', processed: String(toDelete + 1) });
    await expectNothingLeft(db);
  });
});

describe('weekly-export', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'weekly-export-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it("writes last week's invoices as one CSV named after the week; a rerun replaces it byte for byte", async () => {
    const env = { EXPORT_DIR: dir, JOB_BATCH_SIZE: '100' };
    const r = await runJob(db, ['weekly-export', '--scheduled-time', '2025-03-10T03:00:00Z'], env);
    expect(r.code).toBe(0);
    expect(await readdir(dir)).toEqual(['invoices-week-2025-03-03.csv']);
    const csv = await readFile(path.join(dir, 'invoices-week-2025-03-03.csv'), 'utf8');
    const lines = csv.trimEnd().split('\n');
    expect(lines[0]).toBe(CSV_COLUMNS.join(','));
    const [{ n }] = (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM invoices WHERE period_start >= '2025-03-03' AND period_start < '2025-03-10'`)) as [{ n: number }];
    expect(n).toBeGreaterThan(0);
    expect(lines).toHaveLength(n + 1);
    expect(summaryOf(r.logs)).toMatchObject({ week: '2025-03-03', rows: n });

    // What a run killed mid-write leaves behind.
    await writeFile(path.join(dir, `.invoices-week-2025-03-03.csv.${999_999}.tmp`), 'invoice_id\n1');
    const forced = await runJob(db, ['weekly-export', '--scheduled-time', '2025-03-10T03:00:00Z', '--force'], env);
    expect(forced.code).toBe(0);
    expect(await readdir(dir)).toEqual(['invoices-week-2025-03-03.csv']);
    expect(await readFile(path.join(dir, 'invoices-week-2025-03-03.csv'), 'utf8')).toBe(csv);
    await expectNothingLeft(db);
  });
});

describe('a database whose TimeZone is not UTC', () => {
  let local: TestDatabase;
  beforeAll(async () => {
    local = await createTestDatabase();
    await seed(local, 200);
  });
  afterAll(() => local.drop());

  it('billing-run and report-aggregation still work on the UTC day', async () => {
    // UTC-5 (POSIX sign): there a date compared with a timestamptz starts at 05:00 UTC, and
    // the seed's usage falls in the first hours of each UTC day.
    const url = new URL(local.url);
    url.searchParams.set('options', '-c TimeZone=Etc/GMT+5');
    const env = { DATABASE_URL: url.toString() };
    expect((await runJob(local, ['billing-run', '--scheduled-time', NIGHTLY_TIME], env)).code).toBe(0);
    expect((await runJob(local, ['report-aggregation', '--scheduled-time', '2025-03-10T01:30:00Z'], env)).code).toBe(0);
    await expectOneInvoicePerActiveAccount(local);
    const utcDay = `u.occurred_at >= $1::timestamptz AND u.occurred_at < $1::timestamptz + interval '24 hours'`;
    const day = [`${NIGHTLY_DAY}T00:00:00Z`];
    const badInvoices = await local.query(
      `SELECT i.account_id FROM invoices i
       WHERE i.quantity <> coalesce((SELECT sum(u.quantity) FROM usage u WHERE u.account_id = i.account_id AND ${utcDay}), 0)`,
      day,
    );
    expect(badInvoices).toEqual([]);
    expect(await local.query(`SELECT account_id::text, metric, quantity::text FROM usage_daily ORDER BY 1, 2`)).toEqual(
      await local.query(`SELECT account_id::text, metric, sum(quantity)::text AS quantity FROM usage u WHERE ${utcDay} GROUP BY 1, 2 ORDER BY 1, 2`, day),
    );
  });
});

describe('the smallest pool', () => {
  let small: TestDatabase;
  beforeAll(async () => {
    small = await createTestDatabase();
    await seed(small, 20);
  });
  afterAll(() => small.drop());

  it('DB_POOL_MAX=2 still leaves the handler its connections: the two lock connections come on top', async () => {
    const r = await runJob(small, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { DB_POOL_MAX: '2' });
    expect(r.code).toBe(0);
    await expectOneInvoicePerActiveAccount(small);
    await expectNothingLeft(small);
  });
});
