/**
 * Input that means one thing or is refused, served in-process by the real app on a real
 * Postgres: a method a path does not serve answers 405 with Allow, page sizes are plain
 * decimal integers given once, strings Postgres would change (lone surrogates) answer 400
 * naming the field, and an answered occurredAt sent back under its idempotency key replays.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type InProcessApi } from './helpers/api.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
/** A well-formed account key that no account holds. */
const MADE_UP_KEY = `sbk_${'A'.repeat(43)}`;
let db: TestDatabase;
let api: InProcessApi;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY });
  ({ base } = api);
});
afterAll(async () => {
  await api.stop();
  await db.drop();
});

interface Answer { status: number; headers: Headers; text: string; body: any }
/** `body` is sent as it is when a string (JSON text with its escapes), else as JSON. */
async function call(key: string | null, method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
}
/** TRACE, which fetch refuses to send. */
function trace(key: string, path: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { method: 'TRACE', headers: { authorization: `Bearer ${key}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c)).on('end', () => {
        const headers = new Headers(Object.entries(res.headers).map(([k, v]): [string, string] => [k, String(v)]));
        resolve({ status: res.statusCode!, headers, text, body: JSON.parse(text) });
      });
    });
    req.on('error', reject).end();
  });
}
const admin = (method: string, path: string, body?: unknown) => call(ADMIN_KEY, method, path, body);

let seq = 0;
async function newAccount(): Promise<{ id: string; key: string }> {
  const account = await admin('POST', '/accounts', { name: 'Tenant', email: `s${++seq}-${Date.now()}@example.com` });
  expect(account.status).toBe(201);
  // Created a day ago: usage dated a minute ago is billable.
  await db.query(`UPDATE accounts SET created_at = now() - interval '1 day' WHERE id = $1`, [account.body.id]);
  const key = await admin('POST', `/accounts/${account.body.id}/api-keys`);
  expect(key.status).toBe(201);
  return { id: account.body.id, key: key.body.key };
}

function expectError(a: Answer, status: number, code: string, message?: RegExp): void {
  expect(a.status, a.text).toBe(status);
  expect(a.headers.get('content-type')).toMatch(/^application\/json/);
  expect(a.body.error.code).toBe(code);
  if (message) expect(a.body.error.message).toMatch(message);
}

describe('methods a path does not serve', () => {
  it('answers 405 in the error shape with Allow, never Express\'s 200 text/plain to OPTIONS', async () => {
    const { id, key } = await newAccount();
    const cases: [string | null, string, string, string][] = [
      [ADMIN_KEY, 'OPTIONS', '/accounts', 'GET, HEAD, POST'],
      [ADMIN_KEY, 'PUT', '/accounts', 'GET, HEAD, POST'],
      [ADMIN_KEY, 'PATCH', '/accounts', 'GET, HEAD, POST'],
      [ADMIN_KEY, 'DELETE', '/accounts', 'GET, HEAD, POST'],
      [ADMIN_KEY, 'TRACE', `/accounts/${id}`, 'GET, HEAD'],
      [key, 'OPTIONS', `/accounts/${id}/usage`, 'GET, HEAD, POST'],
      [key, 'POST', `/accounts/${id}`, 'GET, HEAD'],
      [key, 'GET', `/accounts/${id}/api-keys/1`, 'DELETE'],
      // Matched as Express matches a route: any case, a trailing slash.
      [ADMIN_KEY, 'OPTIONS', '/Accounts/', 'GET, HEAD, POST'],
      // The open paths need no key, so their 405 needs none either.
      [null, 'OPTIONS', '/healthz', 'GET, HEAD'],
      [null, 'POST', '/livez', 'GET, HEAD'],
      [null, 'DELETE', '/openapi.json', 'GET, HEAD'],
    ];
    for (const [who, method, path, allow] of cases) {
      const a = method === 'TRACE' ? await trace(who!, path) : await call(who, method, path);
      expectError(a, 405, 'METHOD_NOT_ALLOWED', new RegExp(`^${method} is not served at ${path}; it serves ${allow}$`));
      expect(a.headers.get('allow'), `${method} ${path}`).toBe(allow);
    }
  });

  it('checks the key first on a path that needs one, and answers before reading a body', async () => {
    for (const who of [null, MADE_UP_KEY, 'wrong']) {
      const a = await call(who, 'OPTIONS', '/accounts');
      expectError(a, 401, 'UNAUTHORIZED');
      expect(a.headers.get('allow')).toBeNull();
    }
    expectError(await call(MADE_UP_KEY, 'PUT', '/accounts', '{"name":'), 401, 'UNAUTHORIZED');
    // Not JSON, and not parsed: the method is refused first.
    expectError(await admin('PUT', '/accounts', '{"name":'), 405, 'METHOD_NOT_ALLOWED');
    expectError(await admin('PATCH', '/accounts/1', { name: 'x' }), 405, 'METHOD_NOT_ALLOWED');
  });

  it('leaves unknown paths 404, and the methods a path serves alone', async () => {
    expectError(await admin('PUT', '/nowhere'), 404, 'NOT_FOUND');
    expectError(await admin('OPTIONS', '/accounts/1/nothing'), 404, 'NOT_FOUND');
    expect((await admin('GET', '/accounts')).status).toBe(200);
    expect((await admin('HEAD', '/accounts')).status).toBe(200);
    expect((await call(null, 'HEAD', '/healthz')).status).toBe(200);
  });
});

describe('page sizes', () => {
  it('accepts only plain decimal integers, which z.coerce would read in other forms', async () => {
    for (const limit of ['0x10', '1e2', '5.0', '%205', '5%20', '+5', '05', '', '-0', '0b11', 'Infinity']) {
      const a = await admin('GET', `/accounts?limit=${limit}`);
      expectError(a, 400, 'VALIDATION_FAILED', /^Invalid query: limit: must be a whole number in decimal digits$/);
      expect(a.body.error.details.fields).toEqual([{ field: 'limit', message: 'must be a whole number in decimal digits' }]);
    }
    expectError(await admin('GET', '/accounts?limit=101'), 400, 'VALIDATION_FAILED', /limit: Too big/);
    expectError(await admin('GET', '/accounts?limit=0'), 400, 'VALIDATION_FAILED', /limit: Too small/);
    const ok = await admin('GET', '/accounts?limit=1');
    expect(ok.status).toBe(200);
    expect(ok.body.items).toHaveLength(1);
  });

  it('refuses a parameter given twice, naming it', async () => {
    const { id, key } = await newAccount();
    expectError(await admin('GET', '/accounts?limit=5&limit=6'), 400, 'VALIDATION_FAILED', /^Invalid query: limit: must be given once$/);
    expectError(await admin('GET', '/accounts?after=1&after=2'), 400, 'VALIDATION_FAILED', /^Invalid query: after: must be given once$/);
    expectError(await call(key, 'GET', `/accounts/${id}/usage?from=2026-01-01T00:00:00Z&from=2026-01-02T00:00:00Z`), 400, 'VALIDATION_FAILED', /from: must be given once/);
  });
});

describe('strings Postgres would change', () => {
  it('refuses a lone surrogate anywhere in a body with 400 naming the field; a pair is kept', async () => {
    const { id, key } = await newAccount();
    const email = () => `u${++seq}-${Date.now()}@example.com`;
    for (const [body, field] of [
      [`{"name":"a\\ud800b","email":"${email()}"}`, 'name'],
      [`{"name":"a\\udfffb","email":"${email()}"}`, 'name'],
      [`{"name":"\\ude00\\ud83d","email":"${email()}"}`, 'name'],
      [`{"name":"ok","email":"${email()}","\\ud800":1}`, '\ud800'],
    ] as const) {
      const a = await admin('POST', '/accounts', body);
      expectError(a, 400, 'VALIDATION_FAILED', /must not contain a lone UTF-16 surrogate/);
      expect(a.body.error.details.fields[0].field).toBe(field);
    }
    const usage = await call(key, 'POST', `/accounts/${id}/usage`, '{"metric":"api.calls","quantity":1,"idempotencyKey":"k-\\udbff"}');
    expectError(usage, 400, 'VALIDATION_FAILED', /^Invalid body: idempotencyKey: must not contain a lone UTF-16 surrogate/);
    expect((await db.query<{ n: number }>('SELECT count(*)::int AS n FROM usage WHERE account_id = $1', [id]))[0]!.n).toBe(0);

    const paired = await admin('POST', '/accounts', `{"name":"a\\ud83d\\ude00b","email":"${email()}"}`);
    expect(paired.status, paired.text).toBe(201);
    expect(paired.body.name).toBe('a\u{1F600}b');
  });
});

describe('occurredAt precision', () => {
  it('keeps occurredAt to the millisecond, so the answered value sent back under its key replays', async () => {
    const { id, key } = await newAccount();
    const post = (body: object) => call(key, 'POST', `/accounts/${id}/usage`, { metric: 'api.calls', quantity: 3, ...body });
    const at = new Date(Date.now() - 60_000).toISOString().replace(/Z$/, '');
    const first = await post({ occurredAt: `${at}987Z`, idempotencyKey: 'precise' });
    expect(first.status, first.text).toBe(201);
    expect(first.body.occurredAt).toBe(`${at}Z`);
    const [stored] = await db.query<{ us: string }>(`SELECT to_char(occurred_at AT TIME ZONE 'UTC', 'US') AS us FROM usage WHERE id = $1`, [first.body.id]);
    expect(stored!.us.slice(3)).toBe('000');
    for (const occurredAt of [first.body.occurredAt, `${at}987Z`, `${at}000001Z`]) {
      const again = await post({ occurredAt, idempotencyKey: 'precise' });
      expect(again.status, `${occurredAt}: ${again.text}`).toBe(200);
      expect(again.body).toEqual(first.body);
    }
    const later = new Date(Date.parse(first.body.occurredAt) + 1).toISOString();
    expectError(await post({ occurredAt: later, idempotencyKey: 'precise' }), 422, 'IDEMPOTENCY_KEY_REUSED');

    // The server's own clock: the time it answers is the time it stored.
    const now = await post({ idempotencyKey: 'now' });
    expect(now.status).toBe(201);
    expect((await post({ occurredAt: now.body.occurredAt, idempotencyKey: 'now' })).status).toBe(200);
  });

  it('replays a row stored to the microsecond before, by the answered value', async () => {
    const { id, key } = await newAccount();
    const post = (occurredAt: string) => call(key, 'POST', `/accounts/${id}/usage`, { metric: 'api.calls', quantity: 1, occurredAt, idempotencyKey: 'old' });
    const at = new Date(Date.now() - 60_000).toISOString().replace(/Z$/, '');
    const first = await post(`${at}Z`);
    expect(first.status).toBe(201);
    await db.query(`UPDATE usage SET occurred_at = $2 WHERE id = $1`, [first.body.id, `${at}456Z`]);
    expect((await post(`${at}Z`)).status).toBe(200);
  });
});

describe('what JSON.parse would change silently', () => {
  it('refuses a key given twice in one object with 400 naming it, escaped or not; nothing is stored', async () => {
    const { id, key } = await newAccount();
    const email = `dup${++seq}-${Date.now()}@example.com`;
    const cases: [string, string, string][] = [
      ['/accounts', `{"name":"first","email":"${email}","name":"second"}`, 'name'],
      ['/accounts', `{"name":"first","email":"${email}","\\u006eame":"second"}`, 'name'],
      [`/accounts/${id}/usage`, '{"metric":"api.calls","quantity":1,"quantity":1000000}', 'quantity'],
      [`/accounts/${id}/usage`, '{"metric":"api.calls","quantity":1,"x":{"k":1,"k":2}}', 'x.k'],
      [`/accounts/${id}/usage`, '{"metric":"api.calls","quantity":1,"x":[0,{"k":1,"k":2}]}', 'x.1.k'],
    ];
    for (const [path, body, field] of cases) {
      const a = path === '/accounts' ? await admin('POST', path, body) : await call(key, 'POST', path, body);
      expectError(a, 400, 'VALIDATION_FAILED', new RegExp(`^Invalid body: ${field.replace(/\./g, '\\.')}: is given twice in one object`));
      expect(a.body.error.details.fields).toEqual([{ field, message: 'is given twice in one object; JSON.parse would keep only the last' }]);
    }
    expect(await db.query('SELECT 1 FROM accounts WHERE email = $1', [email])).toHaveLength(0);
    expect(await db.query('SELECT 1 FROM usage WHERE account_id = $1', [id])).toHaveLength(0);
    // One key in each of two objects is no duplicate: zod then names the unknown field.
    const siblings = await call(key, 'POST', `/accounts/${id}/usage`, '{"metric":"api.calls","quantity":1,"x":[{"k":1},{"k":2}]}');
    expect(siblings.body.error.details.fields).toEqual([{ field: 'x', message: 'is not a known field' }]);
  });

  it('refuses a number JSON.parse would round with 400 naming the field; exact ones pass in any form', async () => {
    const { id, key } = await newAccount();
    const usage = (quantity: string) => call(key, 'POST', `/accounts/${id}/usage`, `{"metric":"api.calls","quantity":${quantity}}`);
    for (const [literal, readAs] of [['9007199254740993', '9007199254740992'], ['999999.99999999999', '1000000'], ['1e-400', '0']]) {
      const a = await usage(literal);
      expectError(a, 400, 'VALIDATION_FAILED', new RegExp(`^Invalid body: quantity: ${literal} cannot be kept exactly by a JSON number \\(a double\\): it would be read as ${readAs}$`));
      expect(a.body.error.details.fields[0].field).toBe('quantity');
    }
    expectError(await usage('1e400'), 400, 'VALIDATION_FAILED', /^Invalid body: quantity: 1e400 is out of the range of a JSON number$/);
    // Rounded up to the bound, this price was accepted as 1,000,000.
    const price = await admin('POST', '/accounts', `{"name":"p","email":"p${++seq}-${Date.now()}@example.com","unitPriceCents":999999.99999999999}`);
    expectError(price, 400, 'VALIDATION_FAILED', /^Invalid body: unitPriceCents: /);
    for (const [literal, value] of [['1e2', 100], ['100.000', 100], ['1000000', 1_000_000], ['0', 0]] as const) {
      const a = await usage(literal);
      expect(a.status, `${literal}: ${a.text}`).toBe(201);
      expect(a.body.quantity).toBe(value);
    }
  });

  it('leaves a body that closes more than it opens to JSON.parse: 400 INVALID_JSON', async () => {
    const { id, key } = await newAccount();
    for (const body of ['}}{"metric":"a"}', ']]]]]{{{{{{', '{"a":1}}{"a":1,"a":2}']) {
      expectError(await call(key, 'POST', `/accounts/${id}/usage`, body), 400, 'INVALID_JSON');
    }
  });

  it('keeps a body at the element bound cheap: 999 distinct keys, then the unknown fields', async () => {
    const { id, key } = await newAccount();
    const body = `{"metric":"api.calls","quantity":1,${Array.from({ length: 997 }, (_, i) => `"k${i}":${i}`).join(',')}}`;
    const t0 = performance.now();
    const a = await call(key, 'POST', `/accounts/${id}/usage`, body);
    expect(a.status).toBe(400);
    expect(a.body.error.details.fields[0].message).toBe('is not a known field');
    expect(performance.now() - t0).toBeLessThan(2_000);
  });
});
