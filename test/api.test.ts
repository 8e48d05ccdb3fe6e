/**
 * The API's contract, served in-process by the real Express app on a real Postgres: status
 * codes, bodies, validation messages that name the field, and errors without stacks.
 */
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../app/api.js';
import { loadConfig } from '../app/config.js';
import { createPool, type Pool } from '../app/db.js';
import { DrainableServer } from '../app/http-server.js';
import { createLogger } from '../app/logger.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

let db: TestDatabase;
let pool: Pool;
let server: DrainableServer;
let base: string;
let draining = false;
const ADMIN_KEY = randomAdminKey();

async function serve(env: Record<string, string>, poolOverride?: Pool): Promise<{ server: DrainableServer; base: string }> {
  const config = loadConfig({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ...env });
  const logger = createLogger('silent');
  const s = new DrainableServer(createApi({ pool: poolOverride ?? pool, logger, config, isDraining: () => draining }), config);
  const address: AddressInfo = await s.listen(0);
  return { server: s, base: `http://127.0.0.1:${address.port}` };
}

beforeAll(async () => {
  db = await createTestDatabase();
  const config = loadConfig({ DATABASE_URL: db.url });
  pool = createPool(config.database, { role: 'test-api', max: 5, logger: createLogger('silent'), waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
  ({ server, base } = await serve({ BODY_LIMIT_BYTES: '1024' }));
});
afterAll(async () => {
  await server.drain();
  await pool.end();
  await db.drop();
});

/** Calls the API as the operator (the admin key). */
async function call(method: string, path: string, body?: unknown, extraHeaders: Record<string, string> = {}) {
  const headers = { authorization: `Bearer ${ADMIN_KEY}`, ...extraHeaders };
  const res = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined, text };
}

describe('health', () => {
  it('answers liveness without the database and readiness with it', async () => {
    expect(await call('GET', '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } });
    expect(await call('GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready' } });
  });

  it('answers readiness 503 while draining', async () => {
    draining = true;
    try {
      expect(await call('GET', '/readyz')).toMatchObject({ status: 503, body: { status: 'draining' } });
    } finally {
      draining = false;
    }
  });

  it('answers readiness 503 and liveness 200 when the database is unreachable', async () => {
    const deadPool = createPool({ connectionString: 'postgres://x:y@127.0.0.1:1/none', ssl: false }, { role: 'test-dead', max: 1, logger: createLogger('silent'), waitMs: 2_000, statementTimeoutMs: 0 });
    const dead = await serve({}, deadPool);
    try {
      const ready = await fetch(`${dead.base}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toEqual({ status: 'database unavailable' });
      expect((await fetch(`${dead.base}/healthz`)).status).toBe(200);
    } finally {
      await dead.server.drain();
      await deadPool.end();
    }
  });
});

describe('accounts', () => {
  it('creates, gets and lists accounts, with keyset pages', async () => {
    const created = await call('POST', '/accounts', { name: 'Acme', email: 'billing@acme.example', plan: 'enterprise', unitPriceCents: 3 });
    expect(created.status).toBe(201);
    expect(created.headers.get('location')).toBe(`/accounts/${created.body.id}`);
    expect(created.body).toMatchObject({ name: 'Acme', email: 'billing@acme.example', plan: 'enterprise', status: 'active', unitPriceCents: 3 });

    const got = await call('GET', `/accounts/${created.body.id}`);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id: created.body.id, usage30d: { quantity: '0', lastUsageAt: null } });

    await call('POST', '/accounts', { name: 'Beta', email: 'b@beta.example' });
    await call('POST', '/accounts', { name: 'Gamma', email: 'g@gamma.example' });
    const page1 = await call('GET', '/accounts?limit=2');
    expect(page1.body.items).toHaveLength(2);
    const page2 = await call('GET', `/accounts?limit=2&after=${page1.body.next}`);
    expect(page2.body.items.map((a: { name: string }) => a.name)).toContain('Gamma');
    expect(new Set([...page1.body.items, ...page2.body.items].map((a: { id: string }) => a.id)).size).toBe(page1.body.items.length + page2.body.items.length);
  });

  it('answers 409 for an email that exists, in any case', async () => {
    await call('POST', '/accounts', { name: 'Dup', email: 'dup@example.com' });
    const again = await call('POST', '/accounts', { name: 'Dup 2', email: 'DUP@example.com' });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'CONFLICT', message: 'An account with email DUP@example.com already exists' });
  });

  it('answers 404 for an account that does not exist and 400 for an id that is not one', async () => {
    expect(await call('GET', '/accounts/999999')).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND', message: 'No account 999999' } } });
    const bad = await call('GET', '/accounts/abc');
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/^Invalid path: id: must be a positive whole number/);
  });
});

describe('bad bodies', () => {
  it('answers 400 INVALID_JSON for malformed JSON', async () => {
    const r = await call('POST', '/accounts', '{"name": "Acme",');
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_JSON');
    expect(r.body.error.message).toMatch(/^Request body is not valid JSON/);
  });

  it('answers 400 naming every bad field, including unknown ones', async () => {
    const r = await call('POST', '/accounts', { name: '', email: 'not-an-email', colour: 'red' });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('VALIDATION_FAILED');
    const fields = r.body.error.details.fields.map((f: { field: string }) => f.field);
    expect(fields).toEqual(expect.arrayContaining(['name', 'email', 'colour']));
    expect(r.body.error.message).toMatch(/email: Invalid email address/);
    expect(r.body.error.message).toMatch(/colour: is not a known field/);
  });

  it('answers 400 for a JSON body that is not an object', async () => {
    const r = await call('POST', '/accounts', '[1,2]');
    expect(r.status).toBe(400);
    expect(r.body.error.message).toBe('Request body must be a JSON object');
  });

  it('answers 415 for a body that is not JSON', async () => {
    const r = await fetch(`${base}/accounts`, { method: 'POST', headers: { 'content-type': 'text/plain', authorization: `Bearer ${ADMIN_KEY}` }, body: 'name=Acme' });
    expect(r.status).toBe(415);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("UNSUPPORTED_MEDIA_TYPE");
  });

  it('answers 413 for a body over the limit', async () => {
    const r = await call('POST', '/accounts', { name: 'x'.repeat(2000), email: 'big@example.com' });
    expect(r.status).toBe(413);
    expect(r.body.error).toEqual({ code: 'BODY_TOO_LARGE', message: 'Request body is larger than the limit of 1024 bytes' });
  });
});

describe('usage and invoices', () => {
  let accountId: string;
  beforeAll(async () => {
    // An account that existed on the days billed below.
    const rows = await db.query<{ id: string }>(
      `INSERT INTO accounts (name, email, unit_price_cents, created_at) VALUES ('Old Co', 'old@example.com', 2, '2026-01-01') RETURNING id::text`,
    );
    accountId = rows[0]!.id;
  });

  it('records usage once per idempotency key', async () => {
    const body = { metric: 'api_calls', quantity: 7, occurredAt: '2026-03-10T12:00:00Z', idempotencyKey: 'evt-1' };
    const first = await call('POST', `/accounts/${accountId}/usage`, body);
    expect(first.status).toBe(201);
    const retry = await call('POST', `/accounts/${accountId}/usage`, body);
    expect(retry.status).toBe(200);
    expect(retry.body.id).toBe(first.body.id);
    await call('POST', `/accounts/${accountId}/usage`, { metric: 'api_calls', quantity: 5, occurredAt: '2026-03-10T23:59:59Z' });
    await call('POST', `/accounts/${accountId}/usage`, { metric: 'api_calls', quantity: 100, occurredAt: '2026-03-11T00:00:00Z' });
    const list = await call('GET', `/accounts/${accountId}/usage?from=2026-03-10T00:00:00Z&to=2026-03-11T00:00:00Z`);
    expect(list.body.items.map((u: { quantity: number }) => u.quantity)).toEqual([7, 5]);
  });

  it('pages through usage in id order past id 9, missing none', async () => {
    const rows = await db.query<{ id: string }>(`INSERT INTO accounts (name, email) VALUES ('Pager', 'pager@example.com') RETURNING id::text`);
    const pager = rows[0]!.id;
    for (let i = 0; i < 12; i++) await call('POST', `/accounts/${pager}/usage`, { metric: 'api_calls', quantity: i });
    const seen: number[] = [];
    let after: string | null = null;
    do {
      const page = await call('GET', `/accounts/${pager}/usage?limit=5${after ? `&after=${after}` : ''}`);
      seen.push(...page.body.items.map((u: { quantity: number }) => u.quantity));
      after = page.body.next;
    } while (after);
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
  });

  it('rejects usage with a bad metric or a negative quantity, naming the fields', async () => {
    const r = await call('POST', `/accounts/${accountId}/usage`, { metric: 'API Calls', quantity: -1 });
    expect(r.status).toBe(400);
    expect(r.body.error.details.fields.map((f: { field: string }) => f.field).sort()).toEqual(['metric', 'quantity']);
  });

  it('answers 404 for usage of an account that does not exist', async () => {
    expect((await call('POST', '/accounts/999999/usage', { metric: 'api_calls', quantity: 1 })).status).toBe(404);
  });

  it('bills a past day once, at the account price, and lists and gets the invoice', async () => {
    const first = await call('POST', `/accounts/${accountId}/invoices`, { periodStart: '2026-03-10' });
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ accountId, periodStart: '2026-03-10', periodEnd: '2026-03-11', quantity: '12', amountCents: '24' });
    const again = await call('POST', `/accounts/${accountId}/invoices`, { periodStart: '2026-03-10' });
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    const zero = await call('POST', `/accounts/${accountId}/invoices`, { periodStart: '2026-02-01' });
    expect(zero.body).toMatchObject({ quantity: '0', amountCents: '0' });

    const list = await call('GET', `/accounts/${accountId}/invoices`);
    expect(list.body.items).toHaveLength(2);
    expect((await call('GET', `/invoices/${first.body.id}`)).body).toEqual(first.body);
    expect(await db.query('SELECT 1 FROM invoices WHERE account_id = $1', [accountId])).toHaveLength(2);
  });

  it('refuses to bill a day that has not ended, or a malformed one', async () => {
    const today = new Date().toISOString().slice(0, 10);
    const r = await call('POST', `/accounts/${accountId}/invoices`, { periodStart: today });
    expect(r.status).toBe(422);
    expect(r.body.error.message).toContain(`periodStart ${today} has not ended yet`);
    const bad = await call('POST', `/accounts/${accountId}/invoices`, { periodStart: '2026-02-30' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/periodStart: must be a real calendar date/);
  });
});

describe('request ids', () => {
  it("echoes the caller's X-Request-Id, else the ALB's trace id, else a new one", async () => {
    expect((await call('GET', '/nope', undefined, { 'x-request-id': 'req-123' })).headers.get('x-request-id')).toBe('req-123');
    const trace = 'Root=1-67891233-abcdef012345678912345678';
    expect((await call('GET', '/accounts', undefined, { 'x-amzn-trace-id': trace })).headers.get('x-request-id')).toBe(trace);
    const fresh = (await call('GET', '/accounts')).headers.get('x-request-id');
    expect(fresh).toMatch(/^[0-9a-f-]{36}$/);
    expect((await call('GET', '/accounts')).headers.get('x-request-id')).not.toBe(fresh);
    expect((await call('GET', '/healthz')).headers.get('x-request-id')).toBeNull();
  });
});

describe('routing and unexpected errors', () => {
  it('answers 404 for an unknown route', async () => {
    expect(await call('GET', '/nope')).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND', message: 'No route for GET /nope' } } });
  });

  it('has no debug routes unless ENABLE_DEBUG_ROUTES is true', async () => {
    expect((await call('GET', '/debug/sleep?ms=1')).status).toBe(404);
  });

  it('answers 500 without a stack when the database fails unexpectedly', async () => {
    await db.query('ALTER TABLE invoices RENAME TO invoices_gone');
    try {
      const r = await call('GET', '/invoices/1');
      expect(r.status).toBe(500);
      expect(r.body).toEqual({ error: { code: 'INTERNAL', message: 'Internal server error' } });
      expect(r.text).not.toMatch(/invoices_gone|at .*\.js/);
    } finally {
      await db.query('ALTER TABLE invoices_gone RENAME TO invoices');
    }
  });
});

describe('keep-alive timeout', () => {
  it('keeps an idle socket open for KEEP_ALIVE_TIMEOUT_MS, then closes it', async () => {
    const short = await serve({ KEEP_ALIVE_TIMEOUT_MS: '600' });
    try {
      const net = await import('node:net');
      const port = Number(new URL(short.base).port);
      const socket = net.connect(port, '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      const answered = new Promise<number>((resolve) => socket.once('data', () => resolve(Date.now())));
      const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())));
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      const idleFrom = await answered;
      const idleFor = (await closed) - idleFrom;
      expect(idleFor).toBeGreaterThanOrEqual(550);
      expect(idleFor).toBeLessThan(2000);
    } finally {
      await short.server.drain();
    }
  });
});
