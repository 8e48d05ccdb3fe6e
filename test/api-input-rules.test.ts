/**
 * Hostile and borderline input, served in-process by the real app on a real Postgres: the
 * key is checked before a body is read, bodies are bounded in depth and size, dates are
 * real ones and billable, money is exact, keys are capped and minted by the operator only,
 * and database trouble answers 503, never 500.
 */
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../app/api.js';
import { DATE_TIME_MESSAGE, DAY_MESSAGE } from '../app/api/dates.js';
import { MAX_JSON_DEPTH, MAX_JSON_ELEMENTS } from '../app/api/json-bounds.js';
import { MAX_LIVE_KEYS } from '../app/api/keys.js';
import { MAX_PAGE } from '../app/api/request.js';
import { MAX_FUTURE_SKEW_MS } from '../app/api/usage.js';
import { MAX_UNIT_PRICE_CENTS, MAX_USAGE_QUANTITY } from '../app/billing.js';
import { DAY_MS } from '../lib/time-zones.js';
import { loadConfig } from '../app/config.js';
import { createPool, type Pool } from '../app/db.js';
import { DrainableServer } from '../app/http-server.js';
import { createLogger } from '../app/logger.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const BODY_LIMIT_BYTES = 100 * 1024;
/** A well-formed account key that no account holds. */
const MADE_UP_KEY = `sbk_${'A'.repeat(43)}`;
let db: TestDatabase;
let pool: Pool;
let server: DrainableServer;
let base: string;

async function serve(p: Pool): Promise<{ server: DrainableServer; base: string }> {
  const config = loadConfig({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, BODY_LIMIT_BYTES: String(BODY_LIMIT_BYTES) });
  const s = new DrainableServer(createApi({ pool: p, logger: createLogger('silent'), config, isDraining: () => false }), config);
  return { server: s, base: `http://127.0.0.1:${((await s.listen(0)) as AddressInfo).port}` };
}
const newPool = () => createPool(loadConfig({ DATABASE_URL: db.url }).database, { role: 'test-api', max: 5, logger: createLogger('silent'), waitMs: 2_000, statementTimeoutMs: 5_000 });

beforeAll(async () => {
  db = await createTestDatabase();
  pool = newPool();
  ({ server, base } = await serve(pool));
});
afterAll(async () => {
  await server.drain();
  await pool.end();
  await db.drop();
});

interface Answer { status: number; headers: Headers; body: any }
async function call(key: string | null, method: string, path: string, body?: unknown, at = base, scheme = 'Bearer'): Promise<Answer> {
  const res = await fetch(`${at}${path}`, {
    method,
    headers: { ...(key === null ? {} : { authorization: `${scheme} ${key}` }), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}
const admin = (method: string, path: string, body?: unknown) => call(ADMIN_KEY, method, path, body);
/** An answer's text as it came over the wire, before JSON.parse rounds any number. */
async function rawCall(method: string, path: string, body?: unknown): Promise<string> {
  const res = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  expect(res.status, path).toBeLessThan(300);
  return res.text();
}

let seq = 0;
async function newAccount(createdAt?: string): Promise<{ id: string; key: string; keyId: string }> {
  const account = await admin('POST', '/accounts', { name: 'Tenant', email: `r${++seq}-${Date.now()}@example.com`, unitPriceCents: 1 });
  expect(account.status).toBe(201);
  if (createdAt) await db.query('UPDATE accounts SET created_at = $2 WHERE id = $1', [account.body.id, createdAt]);
  const key = await admin('POST', `/accounts/${account.body.id}/api-keys`);
  expect(key.status).toBe(201);
  return { id: account.body.id, key: key.body.key, keyId: key.body.id };
}

const deep = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;
/** About 94 KB of nested arrays, each with a few leaves: depth times leaves was the old walk's cost. */
const wide = () => JSON.stringify({ metric: 'a', quantity: 1, x: Array.from({ length: 300 }, () => [[[[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]]]) }).padEnd(90_000, ' ');

describe('the key before the body', () => {
  it('answers 401, not 500, to 5,000 levels of nesting from a made-up key; 400 naming the bound from a live one', async () => {
    const a = await newAccount();
    const body = `{"metric":${deep(5_000)}}`;
    const unknown = await call(MADE_UP_KEY, 'POST', `/accounts/${a.id}/usage`, body);
    expect(unknown.status).toBe(401);
    expect(unknown.body.error.code).toBe('UNAUTHORIZED');
    const live = await call(a.key, 'POST', `/accounts/${a.id}/usage`, body);
    expect(live.status).toBe(400);
    expect(live.body.error.message).toBe(`Invalid body: nests deeper than ${MAX_JSON_DEPTH} levels`);
    // At the bound the body is parsed, and validation names the field.
    const atBound = await call(a.key, 'POST', `/accounts/${a.id}/usage`, `{"metric":${deep(MAX_JSON_DEPTH - 1)},"quantity":1}`);
    expect(atBound.status).toBe(400);
    expect(atBound.body.error.details.fields[0].field).toBe('metric');
  });

  it('bounds the values in a body, and answers a wide body quickly', async () => {
    const a = await newAccount();
    const t0 = performance.now();
    const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, wide());
    expect(r.status).toBe(400);
    expect(r.body.error.message).toBe(`Invalid body: holds more than ${MAX_JSON_ELEMENTS} values`);
    expect(performance.now() - t0).toBeLessThan(2_000);
    const many = JSON.stringify({ metric: 'a', quantity: 1, x: Array.from({ length: MAX_JSON_ELEMENTS - 10 }, () => 0) });
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, many)).body.error.details.fields[0]).toEqual({ field: 'x', message: 'is not a known field' });
  });

  it('answers 401 before 413 and 415: the key is checked before the size or type of the body', async () => {
    const a = await newAccount();
    const big = JSON.stringify({ metric: 'a', quantity: 1, pad: 'x'.repeat(BODY_LIMIT_BYTES) });
    expect((await call(MADE_UP_KEY, 'POST', `/accounts/${a.id}/usage`, big)).status).toBe(401);
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, big)).status).toBe(413);
    const text = await fetch(`${base}/accounts/${a.id}/usage`, { method: 'POST', headers: { authorization: `Bearer ${MADE_UP_KEY}`, 'content-type': 'text/plain' }, body: 'hello' });
    expect(text.status).toBe(401);
    await admin('DELETE', `/accounts/${a.id}/api-keys/${a.keyId}`);
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, big)).status).toBe(401);
  });

  it('matches the Bearer scheme case-insensitively (RFC 9110, section 11.1)', async () => {
    const a = await newAccount();
    for (const scheme of ['bearer', 'BEARER', 'bEaReR']) expect((await call(a.key, 'GET', `/accounts/${a.id}`, undefined, base, scheme)).status).toBe(200);
    expect((await call(a.key, 'GET', `/accounts/${a.id}`, undefined, base, 'Basic')).status).toBe(401);
  });
});

describe('dates', () => {
  it('takes UTC offsets up to ±18:00 and refuses any past them, with the same message for the body and the query', async () => {
    const a = await newAccount('2026-01-01');
    for (const offset of ['+18:01', '-18:01', '+19:00', '+23:59', '-23:59']) {
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: `2026-06-01T12:00:00${offset}` });
      expect(r.status, offset).toBe(400);
      expect(r.body.error.message).toBe(`Invalid body: occurredAt: ${DATE_TIME_MESSAGE}`);
      expect((await call(a.key, 'GET', `/accounts/${a.id}/usage?from=${encodeURIComponent(`2026-06-01T12:00:00${offset}`)}`)).status).toBe(400);
    }
    // Postgres refuses offsets from ±16:00 on: the server converts to UTC before it sees them.
    for (const offset of ['+18:00', '-18:00', '+16:00', '+14:00', '-12:00', '+05:45']) {
      expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: `2026-06-01T12:00:00${offset}` })).status, offset).toBe(201);
      expect((await call(a.key, 'GET', `/accounts/${a.id}/usage?from=${encodeURIComponent(`2026-06-01T12:00:00${offset}`)}`)).status, offset).toBe(200);
    }
    const stored = await db.query<{ at: string }>(`SELECT to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI') AS at FROM usage WHERE account_id = $1 ORDER BY id LIMIT 2`, [a.id]);
    expect(stored.map((r) => r.at)).toEqual(['2026-05-31T18:00', '2026-06-02T06:00']);
  });

  it('takes instants from 1970 on in UTC, in any offset, and none before', async () => {
    const a = await newAccount();
    const from = (at: string) => call(a.key, 'GET', `/accounts/${a.id}/usage?from=${encodeURIComponent(at)}`);
    for (const at of ['1970-01-01T18:00:00+18:00', '1970-01-01T01:00:00+01:00', '1970-01-01T00:00:00Z', '1970-01-01T00:00:00-01:00', '9999-12-31T23:59:59-18:00']) expect((await from(at)).status, at).toBe(200);
    for (const at of ['1969-12-31T23:59:59.999Z', '1969-12-31T23:00:00-18:00', '1970-01-01T00:00:00+01:00', '1970-01-01T17:59:59.999+18:00']) {
      const r = await from(at);
      expect(r.status, at).toBe(400);
      expect(r.body.error.message).toBe(`Invalid query: from: ${DATE_TIME_MESSAGE}`);
    }
  });

  it('drops fractional digits past the third, never rounding into the next day', async () => {
    const a = await newAccount('2026-03-01');
    expect((await admin('POST', `/accounts/${a.id}/invoices`, { periodStart: '2026-03-02' })).status).toBe(201);
    // 23:59:59.9999995 rounds to the next midnight in Postgres; truncated, it is still the invoiced day.
    const late = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: '2026-03-02T23:59:59.9999995Z' });
    expect(late).toMatchObject({ status: 409, body: { error: { code: 'CONFLICT' } } });
    const kept = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: '2026-03-01T23:59:59.9999995Z' });
    expect(kept.status).toBe(201);
    expect(kept.body.occurredAt).toBe('2026-03-01T23:59:59.999Z');
  });

  it('refuses usage dated before its account existed, or further ahead than the skew, with 422', async () => {
    const a = await newAccount('2026-03-01T12:00:00Z');
    const before = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: '2026-03-01T11:59:59Z' });
    expect(before).toMatchObject({ status: 422, body: { error: { code: 'USAGE_NOT_BILLABLE', message: `occurredAt 2026-03-01T11:59:59Z is before account ${a.id} was created (2026-03-01T12:00:00.000Z); no invoice would count it` } } });
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: '2026-03-01T12:00:00Z' })).status).toBe(201);
    for (const occurredAt of ['9999-12-31T23:59:59Z', new Date(Date.now() + MAX_FUTURE_SKEW_MS + 60_000).toISOString()]) {
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt });
      expect(r.status, occurredAt).toBe(422);
      expect(r.body.error.message).toMatch(/is more than 5 minutes ahead of the server's clock/);
    }
    expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: new Date(Date.now() + 60_000).toISOString() })).status).toBe(201);
    expect(await db.query(`SELECT 1 FROM usage WHERE account_id = $1`, [a.id])).toHaveLength(2);
  });
});

describe('billable dates', () => {
  it('takes the creation instant in any offset or precision as the first billable one', async () => {
    const a = await newAccount('2026-03-01T12:00:00Z');
    const post = (occurredAt: string) => call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt });
    for (const at of ['2026-03-01T13:00:00+01:00', '2026-03-01T11:00:00-01:00', '2026-03-02T02:00:00+14:00', '2026-03-01T12:00:00.000000001Z', '2026-03-01T12:00:00-00:00']) {
      expect((await post(at)).status, at).toBe(201);
    }
    for (const at of ['2026-03-01T12:59:59.999+01:00', '2026-03-01T11:59:59.999999999Z', '2026-02-28T21:59:59-14:00']) {
      const r = await post(at);
      expect(r.status, at).toBe(422);
      expect(r.body.error).toMatchObject({ code: 'USAGE_NOT_BILLABLE', details: { field: 'occurredAt' } });
    }
    expect(await db.query('SELECT 1 FROM usage WHERE account_id = $1', [a.id])).toHaveLength(5);
  });

  it('answers a date that is not one with one message, naming the field', async () => {
    const a = await newAccount('2026-01-01');
    for (const at of ['2026-06-30T23:59:60Z', '2026-13-01T00:00:00Z', '2026-06-01T12:00:00+15', '2026-06-01T12:00:00z']) {
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1, occurredAt: at });
      expect(r.status, at).toBe(400);
      expect(r.body.error.details.fields, at).toEqual([{ field: 'occurredAt', message: DATE_TIME_MESSAGE }]);
    }
    for (const periodStart of ['2026-3-01', '2026-02-29', '2100-02-29', '2026-04-31']) {
      const day = await admin('POST', `/accounts/${a.id}/invoices`, { periodStart });
      expect(day.body.error.details.fields, periodStart).toEqual([{ field: 'periodStart', message: DAY_MESSAGE }]);
    }
  });

  it('refuses to bill a day before the account existed (422) or one that has not ended, up to 9999-12-31 (422 too); nothing is stored', async () => {
    const a = await newAccount('2026-03-01T12:00:00Z');
    const bill = (periodStart: string) => admin('POST', `/accounts/${a.id}/invoices`, { periodStart });
    for (const day of ['2026-02-28', '1970-01-01']) {
      const r = await bill(day);
      expect(r, day).toMatchObject({ status: 422, body: { error: { code: 'PERIOD_NOT_BILLABLE', details: { field: 'periodStart' } } } });
      expect(r.body.error.message).toBe(`periodStart ${day} is before account ${a.id} was created (2026-03-01T12:00:00.000Z); it is billed from that day on`);
    }
    const today = new Date().toISOString().slice(0, 10);
    for (const day of [today, '2099-01-01', '9999-12-31']) {
      const r = await bill(day);
      expect(r, day).toMatchObject({ status: 422, body: { error: { code: 'PERIOD_NOT_BILLABLE', message: `periodStart ${day} has not ended yet (UTC); only past days can be billed`, details: { field: 'periodStart' } } } });
    }
    expect(await db.query('SELECT 1 FROM invoices WHERE account_id = $1', [a.id])).toHaveLength(0);
    expect((await bill('2026-03-01')).status).toBe(201);
  });
});

describe('usage no invoice would count', () => {
  it('refuses usage for a suspended or closed account with 409, and stores nothing; a retry of an earlier event still answers 200', async () => {
    for (const status of ['suspended', 'closed']) {
      const a = await newAccount('2026-01-01');
      const earlier = { metric: 'api_calls', quantity: 3, idempotencyKey: 'before' };
      expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, earlier)).status).toBe(201);
      await db.query('UPDATE accounts SET status = $2 WHERE id = $1', [a.id, status]);
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1 });
      expect(r, status).toMatchObject({ status: 409, body: { error: { code: 'CONFLICT', message: `Account ${a.id} is ${status}; only active accounts are billed, so its usage is refused` } } });
      expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, earlier)).status).toBe(200);
      expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { ...earlier, quantity: 4 })).status).toBe(422);
      expect(await db.query('SELECT 1 FROM usage WHERE account_id = $1', [a.id])).toHaveLength(1);
    }
  });
});

describe('exact numbers', () => {
  it('answers sums past 2^53 exactly, as decimal strings', async () => {
    const a = await newAccount('2026-01-01');
    // 2^53 + 1: the first integer a JSON number (a float8) cannot hold; the API's bounds let a day reach it.
    await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api_calls', 9007199254740993, '2026-02-01T10:00:00Z')`, [a.id]);
    const inv = await admin('POST', `/accounts/${a.id}/invoices`, { periodStart: '2026-02-01' });
    expect(inv.status).toBe(201);
    expect(inv.body).toMatchObject({ quantity: '9007199254740993', amountCents: '9007199254740993' });
    expect((await call(a.key, 'GET', `/invoices/${inv.body.id}`)).body.amountCents).toBe('9007199254740993');
  });

  it('answers every number exactly at the input bounds: integers per event, decimal strings for sums past 2^53', async () => {
    const a = await admin('POST', '/accounts', { name: 'Max', email: `max-${Date.now()}@example.com`, unitPriceCents: MAX_UNIT_PRICE_CENTS });
    expect(a.body.unitPriceCents).toBe(MAX_UNIT_PRICE_CENTS);
    await db.query(`UPDATE accounts SET created_at = now() - interval '3 days' WHERE id = $1`, [a.body.id]);
    const yesterday = new Date(Date.now() - DAY_MS).toISOString().slice(0, 10);
    const atMax = await admin('POST', `/accounts/${a.body.id}/usage`, { metric: 'api_calls', quantity: MAX_USAGE_QUANTITY, occurredAt: `${yesterday}T12:00:00Z` });
    expect(atMax.body.quantity).toBe(MAX_USAGE_QUANTITY);
    // Enough events at both maxima for the day's amount to pass 2^53: the rows the API would take, written in one statement.
    const events = Math.ceil(Number.MAX_SAFE_INTEGER / (MAX_USAGE_QUANTITY * MAX_UNIT_PRICE_CENTS));
    await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) SELECT $1, 'api_calls', $2, $3::timestamptz FROM generate_series(1, $4)`, [a.body.id, MAX_USAGE_QUANTITY, `${yesterday}T13:00:00Z`, events]);
    await db.query('REFRESH MATERIALIZED VIEW account_usage_30d');
    const quantity = BigInt(events + 1) * BigInt(MAX_USAGE_QUANTITY);
    const answers = [
      await rawCall('POST', `/accounts/${a.body.id}/invoices`, { periodStart: yesterday }),
      await rawCall('GET', `/accounts/${a.body.id}/invoices`),
      await rawCall('GET', `/accounts/${a.body.id}`),
      await rawCall('GET', `/accounts/${a.body.id}/usage?limit=${MAX_PAGE}`),
      await rawCall('GET', `/accounts?limit=${MAX_PAGE}`),
    ];
    expect(JSON.parse(answers[0]!)).toMatchObject({ quantity: String(quantity), amountCents: String(quantity * BigInt(MAX_UNIT_PRICE_CENTS)) });
    expect(BigInt(JSON.parse(answers[0]!).amountCents)).toBeGreaterThan(BigInt(Number.MAX_SAFE_INTEGER));
    expect(JSON.parse(answers[2]!).usage30d.quantity).toBe(String(quantity));
    // In the raw text, every JSON number is a plain safe integer: no fraction, no exponent, nothing past 2^53.
    for (const text of answers) {
      for (const [, n] of text.matchAll(/[:[,](-?[\d.eE+-]+)(?=[,\]}])/g)) {
        expect(n, text.slice(0, 200)).toMatch(/^\d+$/);
        expect(Number.isSafeInteger(Number(n)), n).toBe(true);
      }
    }
  });

  it("formats usage30d's timestamps like every other timestamp", async () => {
    const a = await newAccount();
    await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 5 });
    await db.query('REFRESH MATERIALIZED VIEW account_usage_30d');
    const got = await call(a.key, 'GET', `/accounts/${a.id}`);
    const iso = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
    expect(got.body.createdAt).toMatch(iso);
    expect(got.body.usage30d).toEqual({ quantity: '5', lastUsageAt: expect.stringMatching(iso), refreshedAt: expect.stringMatching(iso) });
  });
});

describe('keys', () => {
  it(`caps an account at ${MAX_LIVE_KEYS} live keys; a revoked one frees its place`, async () => {
    const a = await newAccount();
    for (let i = 1; i < MAX_LIVE_KEYS; i++) expect((await admin('POST', `/accounts/${a.id}/api-keys`)).status).toBe(201);
    const over = await admin('POST', `/accounts/${a.id}/api-keys`);
    expect(over).toMatchObject({ status: 409, body: { error: { code: 'TOO_MANY_KEYS', message: `Account ${a.id} already has ${MAX_LIVE_KEYS} live API keys, the most allowed; revoke one first` } } });
    expect((await admin('DELETE', `/accounts/${a.id}/api-keys/${a.keyId}`)).status).toBe(200);
    expect((await admin('POST', `/accounts/${a.id}/api-keys`)).status).toBe(201);
  });

  it('holds the cap against mints racing in parallel', async () => {
    const a = await newAccount();
    const mints = await Promise.all(Array.from({ length: 2 * MAX_LIVE_KEYS }, () => admin('POST', `/accounts/${a.id}/api-keys`)));
    const statuses = mints.map((m) => m.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(MAX_LIVE_KEYS - 1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(MAX_LIVE_KEYS + 1);
    expect(await db.query('SELECT 1 FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL', [a.id])).toHaveLength(MAX_LIVE_KEYS);
  });

  it('lets no account key mint a key, so revoking a leaked key leaves nothing behind', async () => {
    const a = await newAccount();
    const r = await call(a.key, 'POST', `/accounts/${a.id}/api-keys`);
    expect(r).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    expect(await db.query('SELECT 1 FROM api_keys WHERE account_id = $1', [a.id])).toHaveLength(1);
  });
});

describe('the contract at its edges', () => {
  it('stores a name as sent: one with whitespace at either end is refused, and its length counts characters', async () => {
    for (const name of ['   ', ' Acme', 'Acme\n', ` ${'x'.repeat(200)}`, 'x'.repeat(201)]) {
      const r = await admin('POST', '/accounts', { name, email: `name${++seq}@example.com` });
      expect(r.status, JSON.stringify(name)).toBe(400);
      expect(new Set(r.body.error.details.fields.map((f: { field: string }) => f.field)), JSON.stringify(name)).toEqual(new Set(['name']));
    }
    // 200 emoji are 200 characters (400 UTF-16 code units), as JSON Schema's maxLength counts them.
    const emoji = await admin('POST', '/accounts', { name: '\u{1F600}'.repeat(200), email: `emoji${++seq}@example.com` });
    expect(emoji.status).toBe(201);
    expect(emoji.body.name).toBe('\u{1F600}'.repeat(200));
    expect((await admin('POST', '/accounts', { name: 'A  b', email: `inner${++seq}@example.com` })).body.name).toBe('A  b');
  });

  it('refuses an unknown field when minting a key, as every route does; no body or an empty object mints', async () => {
    const a = await newAccount();
    const r = await admin('POST', `/accounts/${a.id}/api-keys`, { x: 1 });
    expect(r).toMatchObject({ status: 400, body: { error: { code: 'VALIDATION_FAILED', details: { fields: [{ field: 'x', message: 'is not a known field' }] } } } });
    expect((await admin('POST', `/accounts/${a.id}/api-keys`, [])).status).toBe(400);
    expect((await admin('POST', `/accounts/${a.id}/api-keys`, {})).status).toBe(201);
    expect(await db.query('SELECT 1 FROM api_keys WHERE account_id = $1', [a.id])).toHaveLength(2);
  });

  it('never answers an empty last page: a count that is a multiple of the limit ends with next null', async () => {
    const a = await newAccount();
    for (let i = 0; i < 4; i++) expect((await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: i })).status).toBe(201);
    const first = await call(a.key, 'GET', `/accounts/${a.id}/usage?limit=2`);
    expect(first.body.items).toHaveLength(2);
    expect(first.body.next).toBe(first.body.items[1].id);
    const last = await call(a.key, 'GET', `/accounts/${a.id}/usage?limit=2&after=${first.body.next}`);
    expect(last.body.items.map((u: { quantity: number }) => u.quantity)).toEqual([2, 3]);
    expect(last.body.next).toBeNull();
    const keys = await call(a.key, 'GET', `/accounts/${a.id}/api-keys?limit=1`);
    expect(keys.body).toMatchObject({ items: [{ id: a.keyId }], next: null });
  });
});

describe('database trouble', () => {
  it('answers 503 with Retry-After when the database is read-only (25006, what a failover looks like)', async () => {
    const a = await newAccount();
    const name = new URL(db.url).pathname.slice(1);
    await db.query(`ALTER DATABASE "${name}" SET default_transaction_read_only = on`);
    const readOnlyPool = newPool();
    const ro = await serve(readOnlyPool);
    try {
      const r = await call(a.key, 'POST', `/accounts/${a.id}/usage`, { metric: 'api_calls', quantity: 1 }, ro.base);
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('1');
      expect(r.body.error).toEqual({ code: 'UNAVAILABLE', message: 'The database is read-only for now (a failover); retry shortly' });
      expect((await call(a.key, 'GET', `/accounts/${a.id}`, undefined, ro.base)).status).toBe(200);
    } finally {
      await db.withClient(async (c) => {
        await c.query('SET default_transaction_read_only = off');
        await c.query(`ALTER DATABASE "${name}" RESET default_transaction_read_only`);
      });
      await ro.server.drain();
      await readOnlyPool.end();
    }
  });
});
