/**
 * The locks of making and retiring usage partitions (app/migrations/*_usage-partition-locks.sql):
 * what a report in flight meets while its day's partition is made or retired, two makers at
 * once, a maker behind a long query, and what a retired day leaves for an earlier day kept.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../app/logger.js';
import { ensurePartitions, PARTITION_DAYS_AHEAD, utcDay } from '../app/usage-partitions.js';
import { createTestDatabase, eventually, newClient, type TestDatabase } from './helpers/db.js';

const day = (offset: number) => utcDay(new Date(), offset);
const partition = (d: string) => `usage_d${d.replaceAll('-', '')}`;
const noon = (d: string) => `${d}T12:00:00Z`;

async function connect(db: TestDatabase): Promise<pg.Client> {
  const c = newClient({ connectionString: db.url });
  await c.connect();
  return c;
}

async function newAccount(db: TestDatabase, email: string): Promise<string> {
  const [row] = await db.query<{ id: string }>(
    `INSERT INTO accounts (name, email, created_at) VALUES ($1, $1, now() - interval '200 days') RETURNING id::text`,
    [email],
  );
  return row!.id;
}

async function dropPartition(db: TestDatabase, d: string): Promise<void> {
  await db.query(`ALTER TABLE usage DETACH PARTITION ${partition(d)}`);
  await db.query(`DROP TABLE ${partition(d)}`);
}

/** Waits until `c`'s session waits for a lock, or `settled` says its query is over. */
async function untilWaiting(db: TestDatabase, c: pg.Client, settled: () => boolean): Promise<void> {
  const pid = (c as unknown as { processID: number }).processID;
  const waiting = async () => settled() || (await db.query(`SELECT FROM pg_locks WHERE pid = $1 AND NOT granted`, [pid])).length > 0;
  expect(await eventually(waiting)).toBe(true);
}

/** A query started now, with a flag saying when it is over. */
function started<T>(promise: Promise<T>): { result: Promise<T>; done: () => boolean } {
  let over = false;
  const result = promise.finally(() => { over = true; });
  result.catch(() => undefined);
  return { result, done: () => over };
}

/** usage_retire_day(d) as data-cleanup calls it, on its own client. */
async function retire(c: pg.Client, d: string): Promise<string> {
  await c.query('BEGIN');
  try {
    await c.query('SET LOCAL ROLE ecs_saas_retention');
    const { rows } = await c.query<{ outcome: string }>(`SELECT usage_retire_day($1::date) AS outcome`, [d]);
    await c.query('COMMIT');
    return rows[0]!.outcome;
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  }
}

describe('a report committing while its day is retired', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  /** Inserts `account`'s row for `d` in a transaction, starts retiring `d`, commits once the retire waits; the retire's outcome. */
  async function race(d: string, account: string): Promise<string> {
    const [writer, retirer] = [await connect(db), await connect(db)];
    try {
      await writer.query('BEGIN');
      await writer.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api.calls', 42, $2)`, [account, noon(d)]);
      const retiring = started(retire(retirer, d));
      await untilWaiting(db, retirer, retiring.done);
      await writer.query('COMMIT');
      return await retiring.result;
    } finally {
      await Promise.all([writer.end(), retirer.end()]);
    }
  }

  it('keeps an unbilled day it found empty before the report committed', async () => {
    const d = day(-4);
    const account = await newAccount(db, 'race-empty@example.com');
    expect(await race(d, account)).toBe('kept: billing-run has not finished the day');
    expect(await db.query(`SELECT tableoid::regclass::text AS part, quantity::int FROM usage WHERE account_id = $1`, [account]))
      .toEqual([{ part: partition(d), quantity: 42 }]);
  });

  it('keeps the row no invoice counts of a report that committed while the day was retired', async () => {
    const d = day(-3);
    const account = await newAccount(db, 'race-unbilled@example.com');
    await db.query(`UPDATE accounts SET status = 'suspended' WHERE id = $1`, [account]);
    await db.query(`INSERT INTO usage_days (day, billed_at, rolled_up_at) VALUES ($1, now(), now() + interval '1 second')`, [d]);
    expect(await race(d, account)).toBe('retired; 1 row(s) no invoice counted kept in usage_unbilled');
    expect(await db.query(`SELECT quantity::int FROM usage_unbilled WHERE account_id = $1`, [account])).toEqual([{ quantity: 42 }]);
  });
});

describe('retiring a day after an earlier day is kept', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it("leaves the earlier day's status changes and idempotency keys until it is retired", async () => {
    // The last days of two months long past, each with a partition: the earlier is kept (not
    // billed), the later retired first.
    const monthStart = (back: number) => { const t = new Date(); return new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth() - back, 1)); };
    const earlier = utcDay(monthStart(2), -1);
    const later = utcDay(monthStart(1), -1);
    const keys = (d: string) => `usage_keys_m${d.slice(0, 7).replace('-', '')}`;
    await db.query(`SELECT usage_ensure_partitions($1::date, $1::date), usage_ensure_partitions($2::date, $2::date)`, [earlier, later]);
    const account = await newAccount(db, 'kept-day@example.com');
    await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key) VALUES ($1, 'api.calls', 77, $2, 'kept-key')`, [account, noon(earlier)]);
    // Suspended that day, before billing reached it.
    await db.query(`UPDATE accounts SET status = 'suspended' WHERE id = $1`, [account]);
    await db.query(`UPDATE account_status_changes SET changed_at = $2 WHERE account_id = $1`, [account, `${earlier}T18:00:00Z`]);

    const c = await connect(db);
    try {
      expect(await retire(c, earlier)).toBe('kept: billing-run has not finished the day');
      expect(await retire(c, later)).toBe('retired');
      expect(await db.query(`SELECT count(*)::int AS n FROM account_status_changes WHERE account_id = $1`, [account])).toEqual([{ n: 1 }]);
      expect(await db.query(`SELECT to_regclass($1) IS NOT NULL AS kept`, [keys(earlier)])).toEqual([{ kept: true }]);

      await db.query(`INSERT INTO usage_days (day, billed_at, rolled_up_at) VALUES ($1, now(), now() + interval '1 second')`, [earlier]);
      expect(await retire(c, earlier)).toBe('retired; 1 row(s) no invoice counted kept in usage_unbilled');
    } finally {
      await c.end();
    }
    expect(await db.query(`SELECT quantity::int FROM usage_unbilled WHERE account_id = $1`, [account])).toEqual([{ quantity: 77 }]);
    // Both months' keys go with the last of their days, the later month's too.
    expect(await db.query(`SELECT to_regclass($1) IS NULL AS a, to_regclass($2) IS NULL AS b`, [keys(earlier), keys(later)])).toEqual([{ a: true, b: true }]);
  });
});

describe('making a partition while reports are in flight', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it('stores a report routed to usage_default before its day was attached', async () => {
    const d = day(3);
    await dropPartition(db, d);
    const account = await newAccount(db, 'routed@example.com');
    const [holder, maker, writer] = [await connect(db), await connect(db), await connect(db)];
    try {
      // Something holds usage (a concurrent build, say) while the maker needs it.
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE usage IN SHARE UPDATE EXCLUSIVE MODE');
      const making = started(maker.query(`SELECT usage_ensure_partitions($1::date, $1::date) AS made`, [d]));
      await untilWaiting(db, maker, making.done);
      const writing = started(writer.query<{ part: string }>(
        `INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api.calls', 1, $2) RETURNING tableoid::regclass::text AS part`,
        [account, noon(d)],
      ));
      await untilWaiting(db, writer, writing.done);
      await holder.query('COMMIT');
      await making.result;
      const { rows } = await writing.result;
      expect(rows).toHaveLength(1);
    } finally {
      await Promise.all([holder.end(), maker.end(), writer.end()]);
    }
    // Made now if the maker's wait ran out before: the row moves into its day.
    await db.query(`SELECT usage_ensure_partitions($1::date, $1::date)`, [d]);
    expect(await db.query(`SELECT tableoid::regclass::text AS part FROM usage WHERE account_id = $1`, [account])).toEqual([{ part: partition(d) }]);
  });

  it('lets two callers make the same partitions at once', async () => {
    const days = [10, 11, 12, 13].map(day);
    for (const d of days) await dropPartition(db, d);
    const callers = await Promise.all(Array.from({ length: 6 }, () => connect(db)));
    try {
      const made = await Promise.all(callers.map((c) => c.query<{ made: number }>(`SELECT usage_ensure_partitions($1::date, $2::date) AS made`, [days[0], days.at(-1)])));
      expect(made.reduce((sum, r) => sum + r.rows[0]!.made, 0)).toBe(days.length);
    } finally {
      await Promise.all(callers.map((c) => c.end()));
    }
  });

  it('gives up on a day behind a long query on usage within its lock timeout, says so, and makes it next time', async () => {
    const d = day(PARTITION_DAYS_AHEAD);
    await dropPartition(db, d);
    const [reader, maker, other] = [await connect(db), await connect(db), await connect(db)];
    const warnings: string[] = [];
    const logger = createLogger('warn');
    logger.warn = ((_: unknown, msg: unknown) => void warnings.push(String(msg))) as typeof logger.warn;
    try {
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM usage');
      // Bounds the wait the fix removes, so that without it the test fails rather than hangs.
      await maker.query(`SET statement_timeout = '10s'`);
      const t0 = performance.now();
      const making = started(ensurePartitions(maker, logger));
      await untilWaiting(db, maker, making.done);
      // A usage query that arrives meanwhile waits at most as long as the maker does.
      const q0 = performance.now();
      await other.query(`SELECT count(*) FROM usage`);
      expect(performance.now() - q0).toBeLessThan(3_000);
      expect(await making.result).toBe(0);
      expect(performance.now() - t0).toBeLessThan(3_000);
      expect(warnings).toEqual([expect.stringContaining(`usage partitions of 1 day(s) not made (${d} to ${d}): a lock was not granted in time`)]);
      await reader.query('COMMIT');
      expect(await ensurePartitions(maker, logger)).toBe(1);
    } finally {
      await Promise.all([reader.end(), maker.end(), other.end()]);
    }
  });
});
