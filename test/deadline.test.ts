/**
 * Every keyed request has a deadline (REQUEST_DEADLINE_MS), kept on the client side: a row
 * lock held longer than it, and a Postgres frozen with SIGSTOP (where statement_timeout
 * cannot fire), answer 503 DEADLINE_EXCEEDED with Retry-After at the deadline; the
 * connections those requests held are closed, not returned half-used, so the pool serves
 * again at once; and /livez stays fast throughout.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type InProcessApi } from './helpers/api.js';
import { createTestDatabase, eventually, newClient, type TestDatabase } from './helpers/db.js';
import { startOwnPostgres, type OwnPostgres } from './helpers/own-postgres.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
/**
 * Wide enough that a new connection made on a loaded machine (a backend forked while other
 * test files start their own servers) comes within it: the reads after the deadline need
 * new connections, and what they prove is that none waits for the lock, which is never let go.
 */
const DEADLINE_MS = 4_000;
const POOL_WAIT_MS = String(DEADLINE_MS - 500);
const POOL_MAX = 3;
/** Statements are not cut by Postgres here: only the deadline can end the wait. */
const NO_STATEMENT_TIMEOUT = { max: POOL_MAX, waitMs: Number(POOL_WAIT_MS), statementTimeoutMs: 0 };

interface Timed { status: number; headers: Headers; body: any; ms: number }
async function timed(base: string, method: string, path: string, key = ADMIN_KEY): Promise<Timed> {
  const t0 = Date.now();
  const res = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined, ms: Date.now() - t0 };
}

function expectDeadline(r: Timed): void {
  expect(r.status, JSON.stringify(r.body)).toBe(503);
  expect(r.body.error.code).toBe('DEADLINE_EXCEEDED');
  expect(r.headers.get('retry-after')).toBe('1');
  expect(r.ms).toBeGreaterThanOrEqual(DEADLINE_MS - 50);
  expect(r.ms).toBeLessThan(DEADLINE_MS + 3_000);
}

/** Probes /livez every 100 ms until `stop` resolves; returns the slowest answer. */
async function slowestLivez(base: string, stop: Promise<unknown>): Promise<number> {
  let done = false;
  void stop.finally(() => (done = true));
  let slowest = 0;
  while (!done) {
    const t0 = Date.now();
    const r = await fetch(`${base}/livez`);
    await r.text();
    expect(r.status).toBe(200);
    slowest = Math.max(slowest, Date.now() - t0);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return slowest;
}

describe('a lock held longer than the deadline', () => {
  let db: TestDatabase;
  let api: InProcessApi;
  beforeAll(async () => {
    db = await createTestDatabase();
    api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, REQUEST_DEADLINE_MS: String(DEADLINE_MS), DB_POOL_WAIT_MS: POOL_WAIT_MS }, NO_STATEMENT_TIMEOUT);
  });
  afterAll(async () => {
    await api?.stop();
    await db?.drop();
  });

  it('answers 503 at the deadline, drops the held connections, and the pool serves at once', async () => {
    const created = await fetch(`${api.base}/accounts`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Locked', email: 'locked@example.com' }) });
    const account = (await created.json()) as { id: string };
    const holder = newClient({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE', [account.id]);
      // Minting a key locks the account row: as many as the pool holds, all stuck behind the lock.
      const stuck = Promise.all(Array.from({ length: POOL_MAX }, () => timed(api.base, 'POST', `/accounts/${account.id}/api-keys`)));
      const slowest = await slowestLivez(api.base, stuck);
      for (const r of await stuck) expectDeadline(r);
      expect(slowest).toBeLessThan(1_000);
      // The lock is still held, and every connection the pool had was stuck behind it: reads work at once.
      const reads = await Promise.all(Array.from({ length: POOL_MAX }, () => timed(api.base, 'GET', `/accounts/${account.id}`)));
      for (const r of reads) expect(r.status, JSON.stringify(r.body)).toBe(200);
      for (const r of reads) expect(r.ms).toBeLessThan(DEADLINE_MS);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    // The abandoned mints never commit: their transactions end with their connections.
    expect(await eventually(async () => (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = $2', [db.name, 'Lock']))[0]!.n === 0)).toBe(true);
    expect(await db.query('SELECT id FROM api_keys WHERE account_id = $1', [account.id])).toEqual([]);
  });
});

/** Postgres's postmaster and every process it started, from /proc. */
function postgresProcesses(backendPid: number): number[] {
  const parentOf = (pid: number | string) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
  const postmaster = parentOf(backendPid);
  const children = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((pid) => {
    try {
      return parentOf(pid) === postmaster;
    } catch {
      return false;
    }
  });
  return [postmaster, ...children.map(Number)];
}

describe('a Postgres frozen with SIGSTOP', () => {
  let pg: OwnPostgres;
  let api: InProcessApi;
  let frozen: number[] = [];
  const thaw = () => {
    for (const pid of frozen) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // Gone already.
      }
    }
    frozen = [];
  };
  beforeAll(async () => {
    pg = await startOwnPostgres();
    api = await startApi({ DATABASE_URL: pg.url, ADMIN_API_KEY: ADMIN_KEY, REQUEST_DEADLINE_MS: String(DEADLINE_MS), DB_POOL_WAIT_MS: POOL_WAIT_MS }, NO_STATEMENT_TIMEOUT);
  }, 120_000);
  afterAll(async () => {
    thaw();
    await api?.stop();
    await pg?.destroy();
  });

  it('answers 503 at the deadline rather than when Postgres wakes, and serves again once it does', async () => {
    // Warm: the pool holds open connections, as a busy task's does.
    await Promise.all(Array.from({ length: POOL_MAX }, () => timed(api.base, 'GET', '/accounts')));
    // Read while the backend lives: its parent is the postmaster.
    frozen = await pg.withClient(async (c) => postgresProcesses((await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid));
    // The helper's own backend has exited by now.
    frozen = frozen.filter((pid) => {
      try {
        process.kill(pid, 'SIGSTOP');
        return true;
      } catch {
        return false;
      }
    });
    try {
      const stuck = Promise.all(Array.from({ length: POOL_MAX }, () => timed(api.base, 'GET', '/accounts/1')));
      const slowest = await slowestLivez(api.base, stuck);
      // Before: the request waited the 9 s Postgres was frozen, then answered 200.
      for (const r of await stuck) expectDeadline(r);
      expect(slowest).toBeLessThan(1_000);
    } finally {
      thaw();
    }
    // The frozen connections were closed, not returned: the pool opens new ones and serves within the deadline.
    const after = await Promise.all(Array.from({ length: POOL_MAX }, () => timed(api.base, 'GET', '/accounts')));
    for (const r of after) expect(r.status).toBe(200);
    for (const r of after) expect(r.ms).toBeLessThan(DEADLINE_MS);
  }, 60_000);
});
