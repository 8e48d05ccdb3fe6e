/**
 * `usage` partitioned by UTC day (app/usage-partitions.ts, app/migrations/*_usage-partitions.sql):
 * the move from the single table while an older release waits, the idempotency key across
 * partitions, the policies on every partition, billing's one partition, and retirement of
 * whole days by data-cleanup.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APPLICATION_NAME_PREFIX } from '../app/db.js';
import { createLogger } from '../app/logger.js';
import { migrate } from '../app/migrate.js';
import { MOVER_LOCK, PARTITION_DAYS_AHEAD, PARTITION_DAYS_BEHIND, partitionUsage, utcDay } from '../app/usage-partitions.js';
import { randomAdminKey } from './helpers/admin-key.js';
import { startApi } from './helpers/api.js';
import { createTestDatabase, newClient, type TestDatabase } from './helpers/db.js';
import { runJob } from './helpers/jobs.js';

const ADMIN_KEY = randomAdminKey();
const day = (offset: number) => utcDay(new Date(), offset);
const partition = (d: string) => `usage_d${d.replaceAll('-', '')}`;

async function partitions(db: TestDatabase, parent = 'usage'): Promise<string[]> {
  const rows = await db.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass ORDER BY 1`,
    [parent],
  );
  return rows.map((r) => r.name);
}

async function newAccount(db: TestDatabase, email: string, daysOld = 30): Promise<string> {
  const [row] = await db.query<{ id: string }>(
    `INSERT INTO accounts (name, email, created_at) VALUES ($1, $1, now() - make_interval(days => $2)) RETURNING id::text`,
    [email, daysOld],
  );
  return row!.id;
}

describe('usage partitioned by day', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it('is partitioned on a new database, with the days around today made and a default partition', async () => {
    const [kind] = await db.query<{ kind: string }>(`SELECT relkind::text AS kind FROM pg_class WHERE oid = 'usage'::regclass`);
    expect(kind!.kind).toBe('p');
    const names = await partitions(db);
    expect(names).toContain('usage_default');
    expect(names).not.toContain('usage_legacy');
    for (let offset = -PARTITION_DAYS_BEHIND; offset <= PARTITION_DAYS_AHEAD; offset++) expect(names).toContain(partition(day(offset)));
    expect(await partitions(db, 'usage_keys')).toContain(`usage_keys_m${day(0).slice(0, 7).replace('-', '')}`);
  });

  it('stores an idempotency key once per account, whichever days concurrent reports name', async () => {
    const a = await newAccount(db, 'keys-a@example.com');
    const b = await newAccount(db, 'keys-b@example.com');
    const clients = await Promise.all(Array.from({ length: 8 }, async () => {
      const c = newClient({ connectionString: db.url });
      await c.connect();
      return c;
    }));
    try {
      // Eight reports of one key, each dated another day (another partition), at once; then
      // the same key for another account, which is its own.
      await Promise.all(clients.map((c, i) => c.query(
        `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
         VALUES ($1, 'api.calls', 1, now() - make_interval(days => $2::int), 'same-key') ON CONFLICT DO NOTHING`,
        [a, i],
      )));
      await clients[0]!.query(`INSERT INTO usage (account_id, metric, quantity, idempotency_key) VALUES ($1, 'api.calls', 1, 'same-key')`, [b]);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
    const rows = await db.query<{ account_id: string; n: number }>(
      `SELECT account_id::text, count(*)::int AS n FROM usage WHERE idempotency_key = 'same-key' GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toEqual([{ account_id: a, n: 1 }, { account_id: b, n: 1 }]);
    const keys = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM usage_keys WHERE idempotency_key = 'same-key'`);
    expect(keys[0]!.n).toBe(2);
  });

  it('answers a retry with its original whichever day the retry lands on, and refuses the key with another day', async () => {
    const account = await newAccount(db, 'retry@example.com');
    const api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY });
    try {
      const report = (body: Record<string, unknown>) => fetch(`${api.base}/accounts/${account}/usage`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ metric: 'api.calls', quantity: 3, idempotencyKey: 'across-days', ...body }),
      });
      const occurredAt = `${day(-3)}T08:00:00.000Z`;
      const first = await report({ occurredAt });
      expect(first.status).toBe(201);
      const original = (await first.json()) as { id: string; occurredAt: string };
      // Without occurredAt the retry would land today, in another partition: it gets the original.
      const retry = await report({});
      expect(retry.status).toBe(200);
      expect(await retry.json()).toEqual(original);
      const moved = await report({ occurredAt: `${day(-1)}T08:00:00.000Z` });
      expect(moved.status).toBe(422);
      expect(((await moved.json()) as { error: { code: string } }).error.code).toBe('IDEMPOTENCY_KEY_REUSED');
    } finally {
      await api.stop();
    }
    expect(await db.query(`SELECT tableoid::regclass::text AS part FROM usage WHERE idempotency_key = 'across-days'`)).toEqual([{ part: partition(day(-3)) }]);
  });

  it('lets the API roles reach rows only through usage, where its policies apply', async () => {
    const own = await newAccount(db, 'rls-own@example.com');
    const other = await newAccount(db, 'rls-other@example.com');
    await db.query(`INSERT INTO usage (account_id, metric, quantity) VALUES ($1, 'api.calls', 1), ($2, 'api.calls', 2)`, [own, other]);
    await db.withClient(async (c) => {
      for (const role of ['ecs_saas_app', 'ecs_saas_operator', 'ecs_saas_billing', 'ecs_saas_retention']) {
        for (const table of [partition(day(0)), 'usage_default', 'usage_keys_default']) {
          await c.query('BEGIN');
          await c.query(`SET LOCAL ROLE ${role}`);
          await expect(c.query(`SELECT count(*) FROM ${table}`), `${role} on ${table}`).rejects.toMatchObject({ code: '42501' });
          await c.query('ROLLBACK');
        }
      }
      await c.query('BEGIN');
      await c.query(`SET LOCAL ROLE ecs_saas_app`);
      await c.query(`SELECT set_config('app.account_id', $1, true)`, [own]);
      const { rows } = await c.query<{ account_id: string }>(`SELECT DISTINCT account_id::text FROM usage`);
      expect(rows).toEqual([{ account_id: own }]);
      // An account may not write another's usage into any partition.
      await expect(c.query(`INSERT INTO usage (account_id, metric, quantity) VALUES ($1, 'api.calls', 1)`, [other])).rejects.toMatchObject({ code: '42501' });
      await c.query('ROLLBACK');
      // Nor its own into a day partition whose day is invoiced (policy billable, on every partition).
      await c.query(`INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES ($1, $2::date, $2::date + 1, 0, 0)`, [own, day(-2)]);
      await c.query('BEGIN');
      await c.query(`SET LOCAL ROLE ecs_saas_app`);
      await c.query(`SELECT set_config('app.account_id', $1, true)`, [own]);
      await expect(c.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api.calls', 1, $2::date + time '12:00' AT TIME ZONE 'UTC')`, [own, day(-2)]))
        .rejects.toMatchObject({ code: '42501' });
      await c.query('ROLLBACK');
    });
  });

  it("sums a billed day from that day's partition alone", async () => {
    const d = day(-2);
    const plan = await db.withClient(async (c) => {
      await c.query(`SET plan_cache_mode = force_generic_plan`);
      await c.query(
        `PREPARE day_sum (date, date) AS SELECT account_id, sum(quantity) FROM usage
         WHERE occurred_at >= $1::timestamp AT TIME ZONE 'UTC' AND occurred_at < $2::timestamp AT TIME ZONE 'UTC' GROUP BY account_id`,
      );
      const { rows } = await c.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE day_sum ('${d}', '${day(-1)}')`);
      return rows.map((r) => r['QUERY PLAN']).join('\n');
    });
    const scanned = [...plan.matchAll(/ on (usage_\w+)/g)].map((m) => m[1]).filter((name) => !name!.endsWith('_idx'));
    expect(new Set(scanned)).toEqual(new Set([partition(d)]));
  });
});

describe('retiring a day', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it('keeps an expired day until billed and rolled up, then drops its partition and keeps what no invoice counted', async () => {
    const d = day(-3);
    const billedAt = `${day(-2)}T00:15:00.000Z`;
    const active = await newAccount(db, 'retire-active@example.com');
    const suspended = await newAccount(db, 'retire-suspended@example.com');
    await db.query(
      `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
       VALUES ($1, 'api.calls', 5, $3::date + time '10:00' AT TIME ZONE 'UTC', 'r-1'), ($2, 'api.calls', 7, $3::date + time '11:00' AT TIME ZONE 'UTC', 'r-2')`,
      [active, suspended, d],
    );
    await db.query(`UPDATE accounts SET status = 'suspended' WHERE id = $1`, [suspended]);

    const cleanup = () => runJob(db, ['data-cleanup'], { USAGE_RETENTION_DAYS: '1' });
    const billing = await runJob(db, ['billing-run', '--scheduled-time', billedAt]);
    expect(billing.code).toBe(0);
    const first = await cleanup();
    expect(first.code).toBe(0);
    expect(await partitions(db)).toContain(partition(d));
    expect(first.logs.some((l) => String(l.msg).includes(`${d}: kept: report-aggregation has not rolled the day up since it was billed`))).toBe(true);

    expect((await runJob(db, ['report-aggregation', '--scheduled-time', `${day(-2)}T01:30:00.000Z`])).code).toBe(0);
    const second = await cleanup();
    expect(second.code).toBe(0);
    expect(await partitions(db)).not.toContain(partition(d));
    // The expired empty days the first run retired are not made again to be retired again.
    const retired = (run: typeof second) => run.logs.map((l) => /^usage day (\S+) retired/.exec(String(l.msg))?.[1]).filter(Boolean);
    expect(retired(first)).toContain(day(-PARTITION_DAYS_BEHIND));
    expect(retired(second)).toEqual([d]);
    // The empty expired days made ahead of time go too; today's and the days ahead stay.
    expect(await partitions(db)).not.toContain(partition(day(-PARTITION_DAYS_BEHIND)));
    expect(await partitions(db)).toContain(partition(day(0)));
    expect(await db.query(`SELECT account_id::text, quantity::int FROM usage_unbilled`)).toEqual([{ account_id: suspended, quantity: 7 }]);
    expect(await db.query(`SELECT count(*)::int AS n FROM usage WHERE occurred_at::date = $1::date`, [d])).toEqual([{ n: 0 }]);
    expect(await db.query(`SELECT retired_at IS NOT NULL AS retired FROM usage_days WHERE day = $1`, [d])).toEqual([{ retired: true }]);
    // What the day was billed and rolled up as stays.
    expect(await db.query(`SELECT account_id::text, quantity::int FROM invoices WHERE period_start = $1`, [d])).toEqual([{ account_id: active, quantity: 5 }]);
    expect(await db.query(`SELECT account_id::text, quantity::int FROM usage_daily WHERE day = $1 ORDER BY 1`, [d])).toEqual(
      [{ account_id: active, quantity: 5 }, { account_id: suspended, quantity: 7 }].sort((x, y) => x.account_id.localeCompare(y.account_id)),
    );
  });
});

describe('retiring a day behind a long query', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it('keeps the expired days for the next run, loses nothing, and retires them once the query ends', async () => {
    const d = day(-3);
    const account = await newAccount(db, 'behind-lock@example.com');
    await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api.calls', 4, $2::date + time '09:00' AT TIME ZONE 'UTC')`, [account, d]);
    await db.query(`INSERT INTO usage_days (day, billed_at, rolled_up_at) VALUES ($1, now(), now() + interval '1 second')`, [d]);
    const reader = newClient({ connectionString: db.url });
    await reader.connect();
    try {
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM usage');
      const blocked = await runJob(db, ['data-cleanup'], { USAGE_RETENTION_DAYS: '1' });
      expect(blocked.code).toBe(0);
      const kept = blocked.logs.find((l) => String(l.msg).includes('expired usage day(s) kept'));
      expect(String(kept?.msg)).toContain('a lock it needs (on accounts or usage) was not granted in 5 tries');
      expect(await partitions(db)).toContain(partition(d));
      expect(await db.query(`SELECT count(*)::int AS n FROM usage_unbilled`)).toEqual([{ n: 0 }]);
      await reader.query('COMMIT');
    } finally {
      await reader.end();
    }
    const after = await runJob(db, ['data-cleanup'], { USAGE_RETENTION_DAYS: '1' });
    expect(after.code).toBe(0);
    expect(await partitions(db)).not.toContain(partition(d));
    expect(await partitions(db)).not.toContain(partition(day(-PARTITION_DAYS_BEHIND)));
  });
});

describe('a move whose lock is not granted', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
  });
  afterAll(() => db?.drop());

  it('changes nothing, says so, and moves at the next migrate', async () => {
    const older = newClient({ connectionString: db.url, application_name: `${APPLICATION_NAME_PREFIX}:api` });
    await older.connect();
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const reader = newClient({ connectionString: db.url });
    await reader.connect();
    try {
      await migrate(pool, createLogger('silent'));
      const account = await newAccount(db, 'lock@example.com');
      await db.query(`INSERT INTO usage (account_id, metric, quantity) VALUES ($1, 'api.calls', 1)`, [account]);
      await older.end();
      // A long query holds usage: the move's lock waits its 5 s, then the move gives up.
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM usage');
      const warnings: string[] = [];
      const logger = createLogger('warn');
      logger.warn = ((msg: unknown) => void warnings.push(String(msg))) as typeof logger.warn;
      await migrate(pool, logger);
      expect(warnings.some((w) => w.includes('a lock the move needs was not granted'))).toBe(true);
      const state = await db.query<{ kind: string; checks: number }>(
        `SELECT relkind::text AS kind, (SELECT count(*)::int FROM pg_constraint WHERE conrelid = 'usage'::regclass AND conname = 'usage_before_partitioning') AS checks
         FROM pg_class WHERE oid = 'usage'::regclass`,
      );
      expect(state).toEqual([{ kind: 'r', checks: 0 }]);
      await reader.query('COMMIT');
      await migrate(pool, createLogger('silent'));
      expect((await partitions(db))).toContain('usage_legacy');
      expect(await db.query(`SELECT count(*)::int AS n FROM usage`)).toEqual([{ n: 1 }]);
    } finally {
      await older.end().catch(() => undefined);
      await reader.end();
      await pool.end();
    }
  });
});

describe('two migrates at once', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it('the second waits for the first a bounded time, then goes on without it and says so', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    const first = newClient({ connectionString: db.url });
    await first.connect();
    try {
      // The first migrate holds the movers' lock (a long validation, say).
      await first.query(`SELECT pg_advisory_lock(${MOVER_LOCK})`);
      const warnings: string[] = [];
      const logger = createLogger('warn');
      logger.warn = ((msg: unknown) => void warnings.push(String(msg))) as typeof logger.warn;
      const t0 = performance.now();
      expect(await partitionUsage(pool, logger, new Date(), 300)).toBe('deferred');
      expect(performance.now() - t0).toBeGreaterThanOrEqual(250);
      expect(warnings).toEqual([expect.stringContaining('another migrate has been moving it to daily partitions, or making its partitions, for over 300 ms')]);
      // Its connection went back to the pool with no lock timeout left on it.
      expect(await pool.query(`SHOW lock_timeout`).then((r) => r.rows[0].lock_timeout)).toBe('0');
      await first.query(`SELECT pg_advisory_unlock(${MOVER_LOCK})`);
      expect(await partitionUsage(pool, createLogger('silent'), new Date(), 300)).toBe('partitioned');
    } finally {
      await first.end();
      await pool.end();
    }
  });
});

describe('moving a populated table', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
  });
  afterAll(() => db?.drop());

  it('waits while an older release is connected, then moves the rows, the keys and the summary', async () => {
    const logger = createLogger('silent');
    const older = newClient({ connectionString: db.url, application_name: `${APPLICATION_NAME_PREFIX}:api` });
    await older.connect();
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      await migrate(pool, logger);
      const kind = async () => (await db.query<{ kind: string }>(`SELECT relkind::text AS kind FROM pg_class WHERE oid = 'usage'::regclass`))[0]!.kind;
      expect(await kind()).toBe('r');
      // The older release's own insert, which a partitioned table would refuse.
      const account = await newAccount(db, 'move@example.com', 60);
      const oldInsert = `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
        VALUES ($1, 'api.calls', $2, now() - make_interval(days => $3), $4) ON CONFLICT (account_id, idempotency_key) DO NOTHING`;
      await older.query(oldInsert, [account, 3, 40, 'before-1']);
      await older.query(oldInsert, [account, 4, 2, 'before-2']);
      await older.query(oldInsert, [account, 99, 1, 'before-2']);
      // This release's API serves the single table too: a report, then its retry.
      const api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY });
      try {
        const report = () => fetch(`${api.base}/accounts/${account}/usage`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ metric: 'api.calls', quantity: 2, idempotencyKey: 'during-expand' }),
        });
        const first = await report();
        expect(first.status).toBe(201);
        const retry = await report();
        expect(retry.status).toBe(200);
        expect(((await retry.json()) as { id: string }).id).toBe(((await first.json()) as { id: string }).id);
      } finally {
        await api.stop();
      }
      await db.query(`DELETE FROM usage WHERE idempotency_key = 'during-expand'`);
      await older.end();

      await migrate(pool, logger);
      expect(await kind()).toBe('p');
      const names = await partitions(db);
      expect(names).toContain('usage_legacy');
      expect(await db.query(`SELECT idempotency_key, quantity::int FROM usage ORDER BY 1`)).toEqual([
        { idempotency_key: 'before-1', quantity: 3 },
        { idempotency_key: 'before-2', quantity: 4 },
      ]);
      // A key from before the move is still taken, on any day; a new one lands in its day's partition.
      await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key) VALUES ($1, 'api.calls', 5, now() + interval '3 days', 'before-1') ON CONFLICT DO NOTHING`, [account]);
      await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key) VALUES ($1, 'api.calls', 6, now() + interval '3 days', 'after-1')`, [account]);
      expect(await db.query(`SELECT tableoid::regclass::text AS part, idempotency_key FROM usage ORDER BY 2`)).toEqual([
        { part: 'usage_default', idempotency_key: 'after-1' },
        { part: 'usage_legacy', idempotency_key: 'before-1' },
        { part: 'usage_legacy', idempotency_key: 'before-2' },
      ].map((r) => r.idempotency_key === 'after-1' ? { ...r, part: partition(day(3)) } : r));
      // The summary reads the partitioned table: rows after the move count.
      await db.query(`REFRESH MATERIALIZED VIEW CONCURRENTLY account_usage_30d`);
      expect(await db.query(`SELECT quantity::int FROM account_usage_30d WHERE account_id = $1`, [account])).toEqual([{ quantity: 10 }]);
      // The older release's insert is what the wait was for.
      await expect(db.query(oldInsert, [account, 1, 0, 'x'])).rejects.toMatchObject({ code: '42P10' });
      // A second migrate has nothing to move.
      await migrate(pool, logger);
      expect(await partitions(db)).toEqual(names);
      // The former table goes whole once retention has emptied it and its range has expired.
      expect(await db.query(`SELECT usage_retire_legacy(now() + interval '5 days') AS done`)).toEqual([{ done: false }]);
      await db.query(`DELETE FROM usage_legacy`);
      expect(await db.query(`SELECT usage_retire_legacy(now()) AS done`)).toEqual([{ done: false }]);
      expect(await db.query(`SELECT usage_retire_legacy(now() + interval '5 days') AS done`)).toEqual([{ done: true }]);
      expect(await partitions(db)).not.toContain('usage_legacy');
    } finally {
      await older.end().catch(() => undefined);
      await pool.end();
    }
  });
});
