/**
 * Database faults against real processes: the worker's lock connection terminated, a
 * worker stalled, Postgres restarted under the API and under a billing run, and a table
 * lock held for 20 s under load with a small pool. Each fault is made for real.
 */
import { applicationName } from '../app/db.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICE_METRICS } from '../lib/metrics.js';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_TIME, emfLines, expectOneInvoicePerActiveAccount, jobEnv, seed } from './helpers/jobs.js';
import { startOwnPostgres, type OwnPostgres } from './helpers/own-postgres.js';
import { start, startServer, type LogLine } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const INTERVAL_MS = 300;
// The account routes need a key; a key the config does not know is ignored.
const ADMIN_API_KEY = randomAdminKey();
const AUTH = { authorization: `Bearer ${ADMIN_API_KEY}` };

const took = (l: LogLine) => /took the lock for worker usage-summary/.test(l.msg);
const batchDone = (l: LogLine) => l.worker === 'usage-summary' && /batch done/.test(l.msg);

/** The worker lock's holders: their pids. */
async function workerLockHolders(db: Pick<TestDatabase, 'query'>): Promise<number[]> {
  const rows = await db.query<{ pid: number }>(
    `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = '${applicationName('api')}' AND a.datname = current_database()`,
  );
  return rows.map((r) => r.pid);
}

describe('the worker lock connection terminated', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('the leader frees the dead client, says so, and within two periods exactly one replica leads again', async () => {
    const env = { DATABASE_URL: db.url, USAGE_SUMMARY_REFRESH_MS: String(INTERVAL_MS), ENABLE_WORKERS: 'true' };
    const a = await startServer(env);
    await a.waitForLog(took);
    const b = await startServer(env);
    await a.waitForLog(batchDone);

    for (let round = 1; round <= 2; round++) {
      const [holder] = await workerLockHolders(db);
      expect(holder).toBeDefined();
      const batchesBefore = [...a.logs, ...b.logs].filter(batchDone).length;
      await db.query('SELECT pg_terminate_backend($1)', [holder]);
      const terminatedAt = Date.now();
      // Two periods, and a margin for a loaded machine.
      const ok = await eventually(async () => (await workerLockHolders(db)).length === 1, 2 * INTERVAL_MS + 1_500, 20);
      expect(ok).toBe(true);
      expect(Date.now() - terminatedAt).toBeLessThan(2 * INTERVAL_MS + 1_500);
      expect((await workerLockHolders(db))[0]).not.toBe(holder);
      // The new leader completes batches again.
      expect(await eventually(async () => [...a.logs, ...b.logs].filter(batchDone).length > batchesBefore, 3_000)).toBe(true);
    }
    // A leader notices its dead connection at its next period, which may come after the other replica took over.
    const died = () => [...a.logs, ...b.logs].filter((l) => /the connection holding its lock died, so the lock is gone; released the dead connection/.test(l.msg)).length;
    expect(await eventually(async () => died() >= 2, 2 * INTERVAL_MS + 1_500)).toBe(true);
    expect(await workerLockHolders(db)).toHaveLength(1);

    a.kill('SIGTERM');
    b.kill('SIGTERM');
    expect((await a.exited).code).toBe(0);
    expect((await b.exited).code).toBe(0);
    expect(await eventually(async () => (await db.advisoryLocks()) === 0 && (await db.ourConnections()) === 0, 3_000)).toBe(true);
  });

  it('a worker whose batches keep failing is reported stalled (log line and WorkerStalled EMF), and recovers', async () => {
    const server = await startServer({
      DATABASE_URL: db.url,
      USAGE_SUMMARY_REFRESH_MS: String(INTERVAL_MS),
      WORKER_STALL_PERIODS: '2',
      // A batch blocked by the test's lock is cancelled quickly, so it fails instead of hanging.
      JOB_STATEMENT_TIMEOUT_MS: '200',
    });
    await server.waitForLog(batchDone);
    await db.withClient(async (c) => {
      await c.query('BEGIN');
      await c.query('LOCK TABLE usage IN ACCESS EXCLUSIVE MODE');
      const stalled = await server.waitForLog((l) => /^worker usage-summary stalled: no batch completed here and no live leader elsewhere/.test(l.msg), 10_000);
      expect(stalled.msg).toMatch(/last error: canceling statement due to statement timeout/);
      const metric = await server.waitForLog((l) => l[SERVICE_METRICS.workerStalled] === 1);
      expect(emfLines([metric])[0]).toMatchObject({ Worker: 'usage-summary', _aws: { CloudWatchMetrics: [{ Metrics: [{ Name: 'WorkerStalled', Unit: 'Count' }] }] } });
      await c.query('ROLLBACK');
    });
    await server.waitForLog((l) => l.msg === 'worker usage-summary runs again after a stall', 5_000);
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
  });
});

describe('Postgres restarted', () => {
  let pg: OwnPostgres;
  beforeAll(async () => {
    pg = await startOwnPostgres();
  });
  afterAll(() => pg.destroy());

  it('under the API: /livez stays 200, the API answers 200 again and one replica leads the worker again, with no human', async () => {
    const env = { DATABASE_URL: pg.url, USAGE_SUMMARY_REFRESH_MS: String(INTERVAL_MS), ADMIN_API_KEY, DB_POOL_WAIT_MS: '500' };
    const a = await startServer(env);
    const b = await startServer(env);
    // One replica leads the worker and the other stands by, so only one of them logs batches.
    expect(await eventually(async () => [...a.logs, ...b.logs].some(batchDone), 60_000)).toBe(true);
    const live: number[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        live.push((await fetch(`${a.url}/livez`).catch(() => ({ status: 0 }))).status);
        await sleep(100);
      }
    })();

    const restartedAt = Date.now();
    await pg.restart(1_000);
    const upAt = Date.now();
    const answered = await eventually(async () => (await fetch(`${a.url}/accounts?limit=1`, { headers: AUTH })).status === 200, 10_000, 50);
    expect(answered).toBe(true);
    expect(await eventually(async () => (await workerLockHolders(pg)).length === 1, 2 * INTERVAL_MS + 3_000, 20)).toBe(true);
    polling = false;
    await poller;
    // The database was down for a second or more; the tasks stayed in the load balancer throughout.
    expect(upAt - restartedAt).toBeGreaterThanOrEqual(1_000);
    expect(live.length).toBeGreaterThan(5);
    expect(live.every((s) => s === 200)).toBe(true);
    a.kill('SIGTERM');
    b.kill('SIGTERM');
    expect((await a.exited).code).toBe(0);
    expect((await b.exited).code).toBe(0);
  });

  it('mid billing-run: the run reconnects and resumes, exits 0 with no alert, one invoice per active account', async () => {
    await seed(pg, 2_000);
    const job = start(['billing-run'], { ...jobEnv(pg), SCHEDULED_TIME: NIGHTLY_TIME, JOB_BATCH_SIZE: '5', JOB_RECONNECT_BACKOFF_MS: '200' });
    await job.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0, 20_000);
    await pg.restart(500);
    const { code } = await job.exited;
    expect(code).toBe(0);
    expect(job.logs.some((l) => /^reconnecting to the database in \d+ ms/.test(l.msg))).toBe(true);
    expect(job.logs.some((l) => /^resuming from the checkpoint of attempt 1/.test(l.msg))).toBe(true);
    expect(job.logs.some((l) => l.msg.startsWith('alert'))).toBe(false);
    await expectOneInvoicePerActiveAccount(pg);
    const runs = await pg.query(`SELECT status, attempt FROM job_runs WHERE job = 'billing-run' ORDER BY id`);
    expect(runs.at(-1)).toMatchObject({ status: 'succeeded' });
    expect(runs.filter((r) => r.status === 'running')).toHaveLength(0);
  });
});

describe('a table lock held for 20 s under load, DB_POOL_MAX=2', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('requests answer 503 with Retry-After within the limits, /livez stays 200, and the API recovers at once', { timeout: 180_000 }, async () => {
    const server = await startServer({
      DATABASE_URL: db.url,
      ADMIN_API_KEY,
      DB_POOL_MAX: '2',
      DB_POOL_WAIT_MS: '1000',
      DB_STATEMENT_TIMEOUT_MS: '2000',
      ENABLE_WORKERS: 'false',
    });
    const created = await fetch(`${server.url}/accounts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...AUTH },
      body: JSON.stringify({ name: 'Locked Co', email: 'locked@example.com' }),
    });
    const { id } = (await created.json()) as { id: string };
    await db.withClient(async (c) => {
      await c.query('BEGIN');
      await c.query('LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE');
      const lockedAt = Date.now();
      const live: number[] = [];
      const replies: { status: number; retryAfter: string | null; ms: number }[] = [];
      while (Date.now() - lockedAt < 20_000) {
        const wave = Array.from({ length: 20 }, async () => {
          const t0 = Date.now();
          const r = await fetch(`${server.url}/accounts/${id}`, { headers: AUTH });
          await r.arrayBuffer();
          replies.push({ status: r.status, retryAfter: r.headers.get('retry-after'), ms: Date.now() - t0 });
        });
        live.push((await fetch(`${server.url}/livez`)).status);
        await Promise.all(wave);
      }
      await c.query('ROLLBACK');
      expect(replies.length).toBeGreaterThanOrEqual(40);
      for (const r of replies) {
        expect(r.status).toBe(503);
        expect(r.retryAfter).toBe('1');
      }
      // Nobody waits longer than the pool wait plus the statement limit (and a margin for the machine).
      expect(Math.max(...replies.map((r) => r.ms))).toBeLessThan(1_000 + 2_000 + 1_500);
      expect(live.every((s) => s === 200)).toBe(true);
    });
    expect((await fetch(`${server.url}/accounts/${id}`, { headers: AUTH })).status).toBe(200);
    expect(server.logs.some((l) => l.level === 'error' && l.msg === 'request failed')).toBe(false);
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
  });
});
