/**
 * Liveness against a real pool and a real Postgres: a slow database does not fail it (every
 * statement ends at statement_timeout and gives its connection back), connections leaked in
 * the process do; draining does; the database's own state is reported separately.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type PoolClient } from '../app/db.js';
import { Health } from '../app/health.js';
import { createLogger } from '../app/logger.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const LIMITS = { poolWaitMs: 100, statementTimeoutMs: 150 };
const LIMIT_MS = 2 * (LIMITS.poolWaitMs + LIMITS.statementTimeoutMs);

function setUp(isDraining = () => false) {
  const logger = createLogger('silent');
  const pool = createPool({ connectionString: db.url, ssl: false }, { role: 'test-health', max: 2, logger, waitMs: LIMITS.poolWaitMs, statementTimeoutMs: LIMITS.statementTimeoutMs });
  const health = new Health({ pool, logger, isDraining, metricsNamespace: 'Test', ...LIMITS });
  return { pool, health };
}

describe('liveness', () => {
  it('stays live while the database is slow: statements end at statement_timeout and return their connections', async () => {
    const { pool, health } = setUp();
    await db.withClient(async (c) => {
      await c.query('BEGIN');
      await c.query('LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE');
      const end = Date.now() + 3 * LIMIT_MS;
      const reasons: (string | undefined)[] = [];
      while (Date.now() < end) {
        await Promise.all([1, 2, 3].map(() => pool.query('SELECT count(*) FROM accounts').catch(() => undefined)));
        reasons.push(health.liveness());
      }
      await c.query('ROLLBACK');
      expect(reasons.filter((r) => r !== undefined)).toEqual([]);
    });
    // Every connection came back: the database answers again. Polled, since on a loaded machine
    // a connection opened anew can take longer than the pool's 100 ms wait; a leak never answers.
    await expect.poll(async () => (await health.database()).ok, { timeout: 15_000, interval: 100 }).toBe(true);
    await pool.end();
  });

  it('fails when every connection is leaked in the process, and names it', async () => {
    const { pool, health } = setUp();
    const leaked: PoolClient[] = [await pool.connect(), await pool.connect()];
    expect(health.liveness()).toBeUndefined();
    await sleep(LIMIT_MS + 100);
    expect(health.liveness()).toMatch(/^connection pool broken: all 2 connections checked out and none returned for \d+ ms \(limit 500 ms\)$/);
    leaked.forEach((c) => c.release());
    expect(health.liveness()).toBeUndefined();
    await pool.end();
  });

  it('fails while draining; the database is reported apart', async () => {
    let draining = false;
    const { pool, health } = setUp(() => draining);
    expect(health.liveness()).toBeUndefined();
    draining = true;
    expect(health.liveness()).toBe('draining');
    await pool.end();
    expect(await health.database()).toMatchObject({ ok: false });
  });
});
