/**
 * Crashes drain like a SIGTERM and exit 1; the background worker runs on exactly one of two
 * replicas, moves to the other when its leader dies, and leaves no advisory lock behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { startServer, type LogLine } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_API_KEY = randomAdminKey();
const admin = { authorization: `Bearer ${ADMIN_API_KEY}` };

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(['exception', 'rejection'] as const)('an unhandled %s', (kind) => {
  it('logs a fatal line, lets the request in flight finish, and exits 1', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_DEBUG_ROUTES: 'true', ENABLE_WORKERS: 'false' });
    const inFlight = fetch(`${server.url}/debug/sleep?ms=1000`);
    await sleepMs(200);
    const crash = await fetch(`${server.url}/debug/crash?kind=${kind}`, { method: 'POST' });
    expect(crash.status).toBe(202);
    const reply = await inFlight;
    expect(reply.status).toBe(200);
    expect(await reply.json()).toEqual({ sleptMs: 1000 });
    expect((await server.exited).code).toBe(1);
    const fatal = server.logs.find((l) => l.level === 'fatal');
    expect(fatal?.msg).toContain(kind === 'exception' ? 'uncaughtException: debug crash' : 'unhandledRejection: debug crash');
    expect(server.logs.some((l) => l.msg === 'shutdown: pool done in ' + l.ms + ' ms')).toBe(true);
    expect(await eventually(async () => (await db.ourConnections()) === 0, 2000)).toBe(true);
  });
});

describe('a background worker on two replicas', () => {
  const INTERVAL_MS = 1000;
  const batches = (logs: LogLine[]) => logs.filter((l) => l.worker === 'usage-summary' && /batch done/.test(l.msg)).length;

  it('runs on exactly one, moves to the other within one period after a SIGKILL, and leaves no lock after a clean stop', async () => {
    const env = { DATABASE_URL: db.url, USAGE_SUMMARY_REFRESH_MS: String(INTERVAL_MS) };
    // The view's refreshed_at column is only visible once it holds a row.
    await db.query(`INSERT INTO accounts (name, email) VALUES ('Lock Co', 'lock@example.com')`);
    await db.query(`INSERT INTO usage (account_id, metric, quantity) SELECT id, 'api_calls', 1 FROM accounts`);
    const a = await startServer(env);
    await a.waitForLog((l) => /took the lock for worker usage-summary/.test(l.msg));
    const b = await startServer(env);
    await sleepMs(3 * INTERVAL_MS);

    expect(batches(a.logs)).toBeGreaterThanOrEqual(3);
    expect(batches(b.logs)).toBe(0);
    expect(await db.advisoryLocks()).toBe(1);
    const before = (await db.query<{ refreshed_at: Date }>('SELECT max(refreshed_at) AS refreshed_at FROM account_usage_30d'))[0];

    const killedAt = Date.now();
    a.kill('SIGKILL');
    const took = await b.waitForLog((l) => /took the lock for worker usage-summary/.test(l.msg), 5000);
    expect(Date.parse(took.time as string) - killedAt).toBeLessThanOrEqual(INTERVAL_MS + 300);
    await b.waitForLog((l) => l.worker === 'usage-summary' && /batch done/.test(l.msg));
    const after = (await db.query<{ refreshed_at: Date }>('SELECT max(refreshed_at) AS refreshed_at FROM account_usage_30d'))[0];
    expect(after!.refreshed_at.getTime()).toBeGreaterThan(before!.refreshed_at.getTime());

    b.kill('SIGTERM');
    expect((await b.exited).code).toBe(0);
    expect(b.logs.some((l) => l.msg === 'worker usage-summary stopped')).toBe(true);
    expect(await db.advisoryLocks()).toBe(0);
    expect(await eventually(async () => (await db.ourConnections()) === 0, 2000)).toBe(true);
  });
});

describe('the access log', () => {
  it('logs each request with its id, status and duration, but not the health checks', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_WORKERS: 'false', ADMIN_API_KEY });
    await fetch(`${server.url}/healthz`);
    await fetch(`${server.url}/readyz`);
    const reply = await fetch(`${server.url}/accounts/999999`, { headers: { 'x-request-id': 'trace-me', ...admin } });
    expect(reply.status).toBe(404);
    const line = await server.waitForLog((l) => l.msg === 'request');
    expect(line).toMatchObject({ requestId: 'trace-me', method: 'GET', path: '/accounts/999999', status: 404, completed: true });
    expect(typeof line.ms).toBe('number');
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    expect(server.logs.filter((l) => l.msg === 'request')).toHaveLength(1);
  });
});

describe('the in-process worker', () => {
  it('refreshes the usage summary that GET /accounts/:id shows', async () => {
    const server = await startServer({ DATABASE_URL: db.url, USAGE_SUMMARY_REFRESH_MS: '200', ADMIN_API_KEY });
    const account = await (await fetch(`${server.url}/accounts`, { method: 'POST', headers: { 'content-type': 'application/json', ...admin }, body: JSON.stringify({ name: 'Worker Co', email: 'ops@worker.example' }) })).json() as { id: string };
    await fetch(`${server.url}/accounts/${account.id}/usage`, { method: 'POST', headers: { 'content-type': 'application/json', ...admin }, body: JSON.stringify({ metric: 'api_calls', quantity: 42 }) });
    const shown = await eventually(async () => {
      const body = (await (await fetch(`${server.url}/accounts/${account.id}`, { headers: admin })).json()) as { usage30d: { quantity: string } };
      return body.usage30d.quantity === '42';
    }, 30_000);
    expect(shown).toBe(true);
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
  });
});

