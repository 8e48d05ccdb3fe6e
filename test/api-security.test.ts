/**
 * API security against the real Express app and a real Postgres: who may call (401, 403),
 * what a tenant can reach (404 for another tenant's rows, enforced by row-level security),
 * account API keys (shown once, hashed, revoked at once), input that used to answer 500, the
 * bounds that keep billing's sums in range, and the response headers.
 */
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../app/api.js';
import { DATE_TIME_MESSAGE, DAY_MESSAGE } from '../app/api/dates.js';
import { MAX_UNIT_PRICE_CENTS, MAX_USAGE_QUANTITY } from '../app/billing.js';
import { loadConfig } from '../app/config.js';
import { createPool, type Pool } from '../app/db.js';
import { DrainableServer } from '../app/http-server.js';
import { createLogger } from '../app/logger.js';
import { APP_ROLE, OPERATOR, OPERATOR_ROLE, queryAs, withIdentity } from '../app/tenancy.js';
import { createTestDatabase, TEST_LOGIN_ROLE, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
let db: TestDatabase;
let pool: Pool;
let server: DrainableServer;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  // The API's pool logs in as the login role, as in AWS; set-up and checks (db.query) as the owner.
  const config = loadConfig({ DATABASE_URL: db.loginUrl, ADMIN_API_KEY: ADMIN_KEY, ENABLE_DEBUG_ROUTES: 'true' });
  pool = createPool(config.database, { role: 'test-api', max: 5, logger: createLogger('silent'), waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
  server = new DrainableServer(createApi({ pool, logger: createLogger('silent'), config, isDraining: () => false }), config);
  base = `http://127.0.0.1:${(await server.listen(0) as AddressInfo).port}`;
});
afterAll(async () => {
  await server.drain();
  await pool.end();
  await db.drop();
});

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

/** Calls the API with `key` as the Bearer token (null: no Authorization header). */
async function call(key: string | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(key === null ? {} : { authorization: `Bearer ${key}` }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}
const admin = (method: string, path: string, body?: unknown, headers?: Record<string, string>) => call(ADMIN_KEY, method, path, body, headers);

let emailSeq = 0;
async function newAccount(): Promise<{ id: string; key: string; keyId: string }> {
  const account = await admin('POST', '/accounts', { name: 'Tenant', email: `t${++emailSeq}-${Date.now()}@example.com`, unitPriceCents: 2 });
  expect(account.status).toBe(201);
  const key = await admin('POST', `/accounts/${account.body.id}/api-keys`);
  expect(key.status).toBe(201);
  return { id: account.body.id, key: key.body.key, keyId: key.body.id };
}

function expect401(a: Answer, message: RegExp): void {
  expect(a.status).toBe(401);
  expect(a.headers.get('www-authenticate')).toMatch(/^Bearer/);
  expect(a.body.error.code).toBe('UNAUTHORIZED');
  expect(a.body.error.message).toMatch(message);
}

describe('who may call', () => {
  it('answers 401 with WWW-Authenticate: Bearer for no key, a malformed header, and an unknown key', async () => {
    expect401(await call(null, 'GET', '/accounts'), /Authorization required/);
    expect401(await call(null, 'GET', '/accounts', undefined, { authorization: 'Basic dXNlcjpwYXNz' }), /Malformed/);
    expect401(await call(null, 'GET', '/accounts', undefined, { authorization: 'Bearer' }), /Malformed/);
    expect401(await call('not-a-key', 'GET', '/accounts'), /Invalid API key/);
    expect401(await call(`sbk_${'A'.repeat(43)}`, 'GET', '/accounts'), /Invalid API key/);
    expect401(await call(`${ADMIN_KEY}x`, 'GET', '/accounts'), /Invalid API key/);
    // An unknown account key is refused even where the answer comes before any query.
    const unknown = `sbk_${'B'.repeat(43)}`;
    expect401(await call(unknown, 'GET', '/nope'), /Invalid API key/);
    expect401(await call(unknown, 'GET', '/accounts/abc'), /Invalid API key/);
    expect401(await call(unknown, 'POST', '/accounts', { name: 'x', email: 'x@example.com' }), /Invalid API key/);
    expect401(await call(unknown, 'POST', '/accounts/1/usage', { metric: 'api_calls', quantity: 1 }), /Invalid API key/);
    // A route that does not exist answers 401 too: routes cannot be probed without a key.
    expect401(await call(null, 'GET', '/nope'), /Authorization required/);
    expect401(await call(null, 'POST', '/accounts', { name: 'x', email: 'x@example.com', unitPriceCents: 0 }), /Authorization required/);
  });

  it('leaves the health checks and the debug routes open', async () => {
    expect((await call(null, 'GET', '/healthz')).status).toBe(200);
    expect((await call(null, 'GET', '/readyz')).status).toBe(200);
    expect((await call(null, 'GET', '/debug/sleep?ms=1')).status).toBe(200);
  });

  it('keeps account creation and billing to the operator (403 for an account key)', async () => {
    const a = await newAccount();
    const create = await call(a.key, 'POST', '/accounts', { name: 'Mine', email: 'mine@example.com', unitPriceCents: 0 });
    expect(create).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN', message: 'Only the operator (admin key) may create accounts' } } });
    expect((await call(a.key, 'POST', `/accounts/${a.id}/invoices`, { periodStart: '2026-01-01' })).status).toBe(403);
  });
});

describe('tenant isolation', () => {
  it("answers another tenant's resources 404, exactly like missing ones", async () => {
    const a = await newAccount();
    const b = await newAccount();
    await db.query(`UPDATE accounts SET created_at = '2026-01-01' WHERE id = $1`, [b.id]);
    expect((await call(b.key, 'POST', `/accounts/${b.id}/usage`, { metric: 'api_calls', quantity: 3, occurredAt: '2026-02-01T10:00:00Z' })).status).toBe(201);
    const invoice = await admin('POST', `/accounts/${b.id}/invoices`, { periodStart: '2026-02-01' });
    expect(invoice.status).toBe(201);

    expect((await call(a.key, 'GET', `/accounts/${a.id}`)).status).toBe(200);
    const missing = await call(a.key, 'GET', '/accounts/999999999');
    const other = await call(a.key, 'GET', `/accounts/${b.id}`);
    expect(other).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND', message: `No account ${b.id}` } } });
    expect(missing.body.error.message).toBe('No account 999999999');
    for (const path of [`/accounts/${b.id}/usage`, `/accounts/${b.id}/invoices`, `/accounts/${b.id}/api-keys`, `/invoices/${invoice.body.id}`]) {
      expect({ path, status: (await call(a.key, 'GET', path)).status }).toEqual({ path, status: 404 });
    }
    expect((await call(a.key, 'POST', `/accounts/${b.id}/usage`, { metric: 'api_calls', quantity: 1 })).status).toBe(404);
    // Account keys mint no keys at all: 403 whoever's account it names.
    expect((await call(a.key, 'POST', `/accounts/${b.id}/api-keys`)).status).toBe(403);
    expect((await call(a.key, 'DELETE', `/accounts/${b.id}/api-keys/${b.keyId}`)).status).toBe(404);
    expect((await call(b.key, 'GET', `/accounts/${b.id}`)).status).toBe(200);

    const list = await call(a.key, 'GET', '/accounts');
    expect(list.body.items.map((x: { id: string }) => x.id)).toEqual([a.id]);
    expect((await admin('GET', '/accounts?limit=100')).body.items.length).toBeGreaterThanOrEqual(2);
  });

  it("returns none of B's rows to a query with no WHERE clause run as A through withIdentity, the handlers' path", async () => {
    const a = await newAccount();
    const b = await newAccount();
    for (const t of [a, b]) {
      await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api_calls', 5, now() - interval '2 days')`, [t.id]);
      await db.query(`INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES ($1, '2026-01-05', '2026-01-06', 1, 1)`, [t.id]);
      await db.query(`INSERT INTO usage_daily (day, account_id, metric, quantity, events) VALUES ('2026-01-05', $1, 'api_calls', 1, 1)`, [t.id]);
    }
    await db.query('REFRESH MATERIALIZED VIEW account_usage_30d');
    // The pool's login role is not the owner, and on its own may read no tenant table at all.
    const { rows: [login] } = await pool.query<{ role: string; rolsuper: boolean; rolbypassrls: boolean }>('SELECT current_user AS role, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user');
    expect(login).toEqual({ role: TEST_LOGIN_ROLE.name, rolsuper: false, rolbypassrls: false });
    await expect(pool.query('SELECT count(*) FROM usage')).rejects.toThrow(/permission denied for table usage/);

    const tables = { accounts: 'id', usage: 'account_id', invoices: 'account_id', api_keys: 'account_id', usage_daily: 'account_id', tenant_account_usage_30d: 'account_id' };
    const accountA = { kind: 'account', accountId: a.id } as const;
    for (const [table, column] of Object.entries(tables)) {
      const seen = await withIdentity(pool, accountA, async (q) => (await q.query<{ owner: string }>(`SELECT ${column}::text AS owner FROM ${table}`)).rows);
      expect({ table, owners: [...new Set(seen.map((r) => r.owner))] }).toEqual({ table, owners: [a.id] });
      const all = await withIdentity(pool, OPERATOR, async (q) => (await q.query<{ owner: string }>(`SELECT ${column}::text AS owner FROM ${table}`)).rows);
      expect(all.map((r) => r.owner)).toContain(b.id);
    }
    // The materialized view itself is out of the role's reach.
    await expect(withIdentity(pool, accountA, (q) => q.query('SELECT * FROM account_usage_30d'))).rejects.toThrow(/permission denied/);
  });

  it('fails closed: the role with no identity set sees no tenant row, and cannot write one', async () => {
    const { id } = await newAccount();
    const client = await pool.connect();
    try {
      await client.query(`BEGIN; SET LOCAL ROLE ${APP_ROLE}`);
      for (const table of ['accounts', 'usage', 'invoices', 'api_keys', 'usage_daily', 'tenant_account_usage_30d']) {
        const { rows } = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
        expect({ table, n: rows[0]!.n }).toEqual({ table, n: 0 });
      }
      // Usage, which the role may insert for its own account only; accounts only the operator creates.
      await expect(client.query(`SAVEPOINT s; INSERT INTO usage (account_id, metric, quantity) VALUES (${id}, 'api_calls', 1)`)).rejects.toThrow(/row-level security/);
      await client.query('ROLLBACK TO SAVEPOINT s');
      await expect(client.query(`INSERT INTO accounts (name, email) VALUES ('x', 'x@closed.example')`)).rejects.toThrow(/permission denied for table accounts/);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    // withIdentity's settings end with its transaction: the same connection has none afterwards.
    const { rows } = await pool.query(`SELECT current_user AS role, current_setting('app.account_id', true) AS account, current_setting('app.operator', true) AS operator`);
    expect(rows[0].role).not.toBe(APP_ROLE);
    expect(rows[0].account || null).toBeNull();
    expect(rows[0].operator || null).toBeNull();
  });
});

describe('account API keys', () => {
  it('shows a key once, stores only its hash, and lists prefixes and dates', async () => {
    const a = await newAccount();
    expect(a.key).toMatch(/^sbk_[A-Za-z0-9_-]{43}$/);
    const stored = await db.query<{ prefix: string; key_hash: Buffer }>('SELECT prefix, key_hash FROM api_keys WHERE id = $1', [a.keyId]);
    expect(stored[0]!.key_hash.equals(createHash('sha256').update(a.key).digest())).toBe(true);
    expect(a.key.startsWith(stored[0]!.prefix)).toBe(true);
    const dump = JSON.stringify(await db.query('SELECT * FROM api_keys WHERE id = $1', [a.keyId]));
    expect(dump).not.toContain(a.key.slice(12));

    const listed = await call(a.key, 'GET', `/accounts/${a.id}/api-keys`);
    expect(listed.status).toBe(200);
    expect(listed.body.items).toEqual([{ id: a.keyId, accountId: a.id, prefix: stored[0]!.prefix, createdAt: expect.any(String), revokedAt: null }]);
    expect(JSON.stringify(listed.body)).not.toContain(a.key);
  });

  it('keeps several keys live, and a revoked key fails at once while the others still work', async () => {
    const a = await newAccount();
    const second = await admin('POST', `/accounts/${a.id}/api-keys`);
    expect(second.status).toBe(201);
    expect(second.body.key).not.toBe(a.key);
    expect((await call(a.key, 'GET', `/accounts/${a.id}`)).status).toBe(200);
    expect((await call(second.body.key, 'GET', `/accounts/${a.id}`)).status).toBe(200);

    const revoked = await call(second.body.key, 'DELETE', `/accounts/${a.id}/api-keys/${a.keyId}`);
    expect(revoked).toMatchObject({ status: 200, body: { id: a.keyId, revokedAt: expect.any(String) } });
    expect401(await call(a.key, 'GET', `/accounts/${a.id}`), /Invalid API key/);
    expect((await call(second.body.key, 'GET', `/accounts/${a.id}`)).status).toBe(200);
    const listed = await call(second.body.key, 'GET', `/accounts/${a.id}/api-keys`);
    expect(listed.body.items.map((k: { revokedAt: string | null }) => k.revokedAt !== null)).toEqual([true, false]);
  });
});

describe('usage rules', () => {
  it('answers 422 when an idempotency key comes back with a different payload', async () => {
    const a = await newAccount();
    await db.query(`UPDATE accounts SET created_at = '2026-01-01' WHERE id = $1`, [a.id]);
    const body = { metric: 'api_calls', quantity: 7, occurredAt: '2026-03-01T10:00:00Z', idempotencyKey: 'evt-9' };
    const first = await call(a.key, 'POST', `/accounts/${a.id}/usage`, body);
    expect(first.status).toBe(201);
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, body)).body.id).toBe(first.body.id);
    for (const changed of [{ quantity: 8 }, { metric: 'storage' }, { occurredAt: '2026-03-01T10:00:01Z' }]) {
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { ...body, ...changed });
      expect(r.status).toBe(422);
      expect(r.body.error).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED', message: `Idempotency key "evt-9" was already used with a different payload (usage ${first.body.id})` });
    }
    expect(await db.query('SELECT 1 FROM usage WHERE account_id = $1', [a.id])).toHaveLength(1);
  });

  it('refuses usage for a day that is already invoiced with 409, and accepts the next day', async () => {
    const a = await newAccount();
    await db.query(`UPDATE accounts SET created_at = '2026-01-01' WHERE id = $1`, [a.id]);
    expect((await admin('POST', `/accounts/${a.id}/invoices`, { periodStart: '2026-02-01' })).status).toBe(201);
    const late = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 4, occurredAt: '2026-02-01T23:00:00Z' });
    expect(late).toMatchObject({ status: 409, body: { error: { code: 'CONFLICT', message: `Account ${a.id} is already invoiced for 2026-02-01 (UTC); usage for an invoiced day is refused` } } });
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 4, occurredAt: '2026-02-02T00:00:00Z' })).status).toBe(201);
    expect(await db.query(`SELECT 1 FROM usage WHERE account_id = $1 AND occurred_at < '2026-02-02'`, [a.id])).toHaveLength(0);
  });

  it('bounds quantity and unit price at their documented maxima', async () => {
    const a = await newAccount();
    const over = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: MAX_USAGE_QUANTITY + 1 });
    expect(over.status).toBe(400);
    expect(over.body.error.message).toMatch(/quantity: Too big/);
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: MAX_USAGE_QUANTITY })).status).toBe(201);
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 10_000_000_000_000 })).status).toBe(400);
    const price = await admin('POST', '/accounts', { name: 'x', email: 'pricey@example.com', unitPriceCents: MAX_UNIT_PRICE_CENTS + 1 });
    expect(price.status).toBe(400);
    expect(price.body.error.details.fields.map((f: { field: string }) => f.field)).toEqual(['unitPriceCents']);
  });
});

describe('input that used to answer 500', () => {
  it('answers 400 for a NUL character in a body, a query or a path', async () => {
    const a = await newAccount();
    const body = await admin('POST', '/accounts', { name: 'nul\u0000name', email: 'nul@example.com' });
    expect(body).toMatchObject({ status: 400, body: { error: { code: 'VALIDATION_FAILED', message: 'Invalid body: name: must not contain a NUL character' } } });
    const key = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, idempotencyKey: 'a\u0000b' });
    expect(key.body.error.message).toBe('Invalid body: idempotencyKey: must not contain a NUL character');
    expect((await call(a.key, 'GET', `/accounts/${a.id}/usage?from=2026-01-01T00:00:00Z%00`)).status).toBe(400);
    expect((await call(a.key, 'GET', `/accounts/${a.id}%00`)).status).toBe(400);
  });

  it('refuses years 0000 to 1969 in occurredAt, from, to and periodStart instead of failing or moving them', async () => {
    const a = await newAccount();
    for (const occurredAt of ['0000-01-01T00:00:00Z', '0050-06-01T00:00:00Z', '0099-12-31T23:59:59Z']) {
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt });
      expect(r.status).toBe(400);
      expect(r.body.error.message).toBe(`Invalid body: occurredAt: ${DATE_TIME_MESSAGE}`);
    }
    expect((await call(a.key, 'GET', `/accounts/${a.id}/usage?from=0000-01-01T00:00:00Z`)).status).toBe(400);
    expect((await call(a.key, 'GET', `/accounts/${a.id}/usage?to=0000-01-01T00:00:00Z`)).status).toBe(400);
    const day = await admin('POST', `/accounts/${a.id}/invoices`, { periodStart: '0050-01-01' });
    expect(day.status).toBe(400);
    expect(day.body.error.message).toBe(`Invalid body: periodStart: ${DAY_MESSAGE}`);
    expect(await db.query('SELECT 1 FROM usage WHERE account_id = $1', [a.id])).toHaveLength(0);
  });

  it('answers 400 for a malformed %-escape in the path', async () => {
    const r = await admin('GET', '/accounts/%E0%A4%A');
    expect(r).toMatchObject({ status: 400, body: { error: { code: 'BAD_REQUEST', message: 'The path has a malformed %-escape' } } });
  });

  it('answers 400 for a gzip or br body that does not decode', async () => {
    for (const encoding of ['gzip', 'br', 'deflate']) {
      const r = await fetch(`${base}/accounts`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json', 'content-encoding': encoding },
        body: 'this is not compressed at all',
      });
      expect({ encoding, status: r.status }).toEqual({ encoding, status: 400 });
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('BAD_REQUEST');
    }
    // A body that does decode still works.
    const ok = await fetch(`${base}/accounts`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify({ name: 'Zipped', email: 'zipped@example.com' })),
    });
    expect(ok.status).toBe(201);
  });
});

describe('response headers', () => {
  it('sends nosniff everywhere, no-store on data, and HSTS only behind HTTPS', async () => {
    const a = await newAccount();
    const health = await call(null, 'GET', '/healthz');
    expect(health.headers.get('x-content-type-options')).toBe('nosniff');
    const got = await call(a.key, 'GET', `/accounts/${a.id}`);
    expect(got.headers.get('x-content-type-options')).toBe('nosniff');
    expect(got.headers.get('cache-control')).toBe('no-store');
    expect(got.headers.get('strict-transport-security')).toBeNull();
    const https = await call(a.key, 'GET', `/accounts/${a.id}`, undefined, { 'x-forwarded-proto': 'https' });
    expect(https.headers.get('strict-transport-security')).toBe('max-age=31536000');
    expect((await call(null, 'GET', '/accounts')).headers.get('cache-control')).toBe('no-store');
  });

  it('accepts a caller X-Request-Id only when short and plain', async () => {
    expect((await call(null, 'GET', '/accounts', undefined, { 'x-request-id': 'abc-123_x.y' })).headers.get('x-request-id')).toBe('abc-123_x.y');
    for (const bad of ['x'.repeat(129), 'a b', '<script>', 'id"quote', 'a/b']) {
      const id = (await call(null, 'GET', '/accounts', undefined, { 'x-request-id': bad })).headers.get('x-request-id');
      expect({ bad, id }).toEqual({ bad, id: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    }
  });
});

describe('the database path', () => {
  it('queryAs writes parameters as exact literals, quotes and backslashes included', async () => {
    const tricky = `it's a \\ back'slash'); DROP TABLE accounts; --`;
    const rows = await queryAs<{ v: string; n: string; role: string }>(pool, OPERATOR, 'SELECT $1::text AS v, $2::int AS n, current_user AS role', [tricky, 42]);
    expect(rows).toEqual([{ v: tricky, n: 42, role: OPERATOR_ROLE }]);
    expect(await db.query("SELECT to_regclass('accounts') IS NOT NULL AS ok")).toEqual([{ ok: true }]);
  });

  it('queryAs survives a failing statement: the next run of the same statement works', async () => {
    await expect(queryAs(pool, OPERATOR, 'SELECT 10 / $1::int AS x', [0])).rejects.toThrow(/division by zero/);
    for (let i = 0; i < 6; i++) expect(await queryAs(pool, OPERATOR, 'SELECT 10 / $1::int AS x', [2])).toEqual([{ x: 5 }]);
  });

  it('runs the billing job statements under the operator role, which row-level security still binds', async () => {
    // The operator identity is what billing-run and report-aggregation use (app/jobs/per-account.ts).
    const { rows } = await withIdentity(pool, OPERATOR, (q) =>
      q.query<{ role: string; bypass: boolean; super: boolean }>('SELECT current_user AS role, rolbypassrls AS bypass, rolsuper AS super FROM pg_roles WHERE rolname = current_user'),
    );
    expect(rows).toEqual([{ role: OPERATOR_ROLE, bypass: false, super: false }]);
  });

  it("plans the operator's statements with no row-by-row policy test", async () => {
    // A policy that tests a setting row by row made the planner guess that 0.5% of the rows pass:
    // billing-run's batch lock then sorted every remaining account on each batch (docs/performance.md).
    const plan = await withIdentity(pool, OPERATOR, async (q) =>
      (await q.query<{ 'QUERY PLAN': string }>(`EXPLAIN SELECT id FROM accounts WHERE status = 'active' AND id > 0 ORDER BY id LIMIT 5000 FOR NO KEY UPDATE`)).rows
        .map((r) => r['QUERY PLAN'])
        .join('\n'),
    );
    expect(plan).not.toMatch(/current_setting/);
    const accountPlan = await withIdentity(pool, { kind: 'account', accountId: (await newAccount()).id }, async (q) =>
      (await q.query<{ 'QUERY PLAN': string }>(`EXPLAIN SELECT id FROM accounts`)).rows.map((r) => r['QUERY PLAN']).join('\n'),
    );
    expect(accountPlan).toMatch(/current_setting/);
  });
});
