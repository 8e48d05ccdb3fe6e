/**
 * The fuzzer: requests generated from the OpenAPI document, valid and mutated, under the
 * admin key, an account key, another tenant's key, a revoked key and no key, against a real
 * server process on a real Postgres. Properties:
 * - never a 5xx;
 * - every answer's status is one the document lists for its route, and every 4xx has the
 *   documented error shape (and a 401 says how to authenticate);
 * - a valid request is answered with a documented status, and a 2xx body as its schema says;
 * - no tenant ever sees another's rows;
 * - /livez stays 200.
 * Failures shrink to a minimal case; the seed is printed, and FUZZ_SEED=<seed> replays a run.
 * FUZZ_MINUTES (npm run fuzz -- --minutes N) runs each property for that long instead of
 * FUZZ_RUNS cases (default 150).
 */
import { fc, test } from '@fast-check/vitest';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { OPERATIONS } from '../app/api/openapi.js';
import { openApiDocument } from '../app/api/openapi.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { startServer, type Proc } from './helpers/process.js';
import { documentVerdict, pathParams, responseVerdict } from './fuzz/contract.js';
import { mutatedRequest, operationsOf, validRequest, type Caller, type Request, type World } from './fuzz/requests.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const MINUTES = Number(process.env.FUZZ_MINUTES ?? 0);
const RUNS = Number(process.env.FUZZ_RUNS ?? 150);
const SEED = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** Each property gets half the minutes. */
const TIME_LIMIT_MS = MINUTES > 0 ? (MINUTES * 60_000) / 2 : undefined;
const params = { seed: SEED, numRuns: TIME_LIMIT_MS ? 1e9 : RUNS, interruptAfterTimeLimit: TIME_LIMIT_MS, markInterruptAsFailure: false, endOnFailure: true };
const ERROR_CODES = /^[A-Z_]+$/;

let db: TestDatabase;
let server: Proc & { url: string };
const keys: Record<Caller, string | undefined> = { operator: ADMIN_KEY, own: undefined, other: undefined, revoked: undefined, none: undefined };
let own: string;
let other: string;
const counts = { cases: 0, agreed: 0, byStatus: new Map<number, number>() };

async function admin(method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return res.json();
}

const world: World = { ids: {}, minTimeMs: Date.UTC(2026, 0, 1), maxTimeMs: () => Date.now() - 1_000 };

beforeAll(async () => {
  console.log(`fuzz seed: ${SEED} (replay with FUZZ_SEED=${SEED}); ${TIME_LIMIT_MS ? `${MINUTES} minute(s)` : `${RUNS} cases a property`}`);
  db = await createTestDatabase();
  server = await startServer({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ENABLE_WORKERS: 'false' });
  const a = await admin('POST', '/accounts', { name: 'Own', email: 'own@fuzz.example' });
  const b = await admin('POST', '/accounts', { name: 'Other', email: 'other@fuzz.example' });
  own = a.id;
  other = b.id;
  await db.query(`UPDATE accounts SET created_at = '2026-01-01' WHERE id IN ($1, $2)`, [own, other]);
  keys.own = (await admin('POST', `/accounts/${own}/api-keys`)).key;
  keys.other = (await admin('POST', `/accounts/${other}/api-keys`)).key;
  const revoked = await admin('POST', `/accounts/${own}/api-keys`);
  await admin('DELETE', `/accounts/${own}/api-keys/${revoked.id}`);
  keys.revoked = revoked.key;
  // Keys the fuzzer may revoke: never the callers' own.
  const spareOwn = await admin('POST', `/accounts/${own}/api-keys`);
  const spareOther = await admin('POST', `/accounts/${other}/api-keys`);
  const invOwn = await admin('POST', `/accounts/${own}/invoices`, { periodStart: '2026-01-02' });
  const invOther = await admin('POST', `/accounts/${other}/invoices`, { periodStart: '2026-01-02' });
  world.ids = { id: [own, own, other, '999999999'], keyId: [spareOwn.id, spareOther.id, '999999999'] };
  // GET /invoices/{id} shares the parameter name; its ids are the invoices'.
  invoiceIds.push(invOwn.id, invOther.id, '999999999');
});

afterAll(async () => {
  console.log(`fuzz: ${counts.cases} cases (${counts.agreed} judged alike by the document and the server), statuses ${JSON.stringify(Object.fromEntries([...counts.byStatus].sort((x, y) => x[0] - y[0])))}, seed ${SEED}`);
  if (server) {
    expect((await fetch(`${server.url}/livez`)).status).toBe(200);
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
  }
  await db?.drop();
});

const invoiceIds: string[] = [];
const ops = operationsOf(openApiDocument());
const schemas = new Map(OPERATIONS.map((o) => [`${o.method.toUpperCase()} ${o.path}`, o.ok[1]]));

type Answer = { status: number; headers: Headers; body: any; text: string; sent: string };

async function send(req: Request): Promise<Answer> {
  let path = req.path;
  if (req.op.template === '/invoices/{id}' && !req.mutated?.startsWith('path')) path = `/invoices/${invoiceIds[Number(req.path.split('/')[2]) % invoiceIds.length]}`;
  const key = keys[req.caller];
  const res = await fetch(`${server.url}${path}${req.query ? `?${req.query}` : ''}`, {
    method: req.op.method,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(req.body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: req.body,
  });
  const text = await res.text();
  let body: any;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = text;
  }
  counts.cases++;
  counts.byStatus.set(res.status, (counts.byStatus.get(res.status) ?? 0) + 1);
  if (counts.cases % 100 === 0) {
    const live = await fetch(`${server.url}/livez`);
    expect(live.status, `/livez during the fuzz: ${await live.text()}`).toBe(200);
  }
  // The path as fetch sends it: `..` resolved, some characters escaped.
  return { status: res.status, headers: res.headers, body, text, sent: new URL(`${server.url}${path}`).pathname };
}

/** Each operation's path as Express matches it: case-insensitive, an optional trailing slash, a parameter being one segment. */
const routePatterns = ops.map((op) => ({ op, pattern: new RegExp(`^${op.template.split(/\{\w+\}/).map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&')).join('[^/]+')}/?$`, 'i') }));

/**
 * The statuses the document allows for the path the server is really sent. A mutated path may
 * reach another route (fetch resolves `..`, so /accounts/1/api-keys/.. is /accounts/1/; an empty
 * segment leaves a trailing slash), or a path whose routes serve other methods: the 405 the
 * document describes, after the key (401).
 */
function statusesFor(req: Request): readonly number[] {
  const sent = new URL(req.path, 'http://fuzz.invalid').pathname;
  const reached = routePatterns.filter((r) => r.pattern.test(sent));
  if (reached.length === 0) return [401, 404];
  return reached.find((r) => r.op.method === req.op.method)?.op.statuses ?? [401, 405];
}

/** The properties every answer must hold, whatever was sent. */
function checkAlways(req: Request, r: Answer): void {
  const what = `${req.caller} ${req.op.method} ${req.path}?${req.query} ${req.mutated ?? 'valid'} -> ${r.status} ${r.text.slice(0, 300)}`;
  expect(r.status, what).toBeLessThan(500);
  // Whatever was sent, by whoever: the answer's status is one the document lists for the route it reached.
  expect(statusesFor(req), what).toContain(r.status);
  if (r.status === 405) expect(r.headers.get('allow'), what).toMatch(/^[A-Z]+(, [A-Z]+)*$/);
  if (r.status >= 400) {
    expect(r.body?.error?.code, what).toMatch(ERROR_CODES);
    expect(typeof r.body.error.message, what).toBe('string');
    expect(Object.keys(r.body).sort(), what).toEqual(['error']);
    if (r.status === 401) expect(r.headers.get('www-authenticate'), what).toMatch(/^Bearer/);
  }
  if (req.caller === 'none' || req.caller === 'revoked') expect(r.status, what).toBe(401);
  if ((req.caller === 'own' || req.caller === 'other') && r.status < 300) {
    const mine = req.caller === 'own' ? own : other;
    const accountIds: string[] = [];
    JSON.stringify(r.body, (k, v) => (k === 'accountId' && accountIds.push(v), v));
    expect(accountIds.every((id) => id === mine), what).toBe(true);
    // An account itself, or a page of accounts (a mutated path such as /accounts/ routes to the list).
    const accounts = Array.isArray(r.body?.items) && r.body.items.every((x: object) => 'email' in x) ? r.body.items : r.body && 'email' in r.body ? [r.body] : [];
    expect(accounts.every((a: { id: string }) => a.id === mine), what).toBe(true);
  }
}

/**
 * The differential check: the document (through ajv, test/fuzz/contract.ts) and the server
 * judge the same input alike. For a caller the route lets in (the operator anywhere, an
 * account on its routes), a request the document refuses answers 400 and one it accepts
 * answers anything else; 413 and 415 judge
 * bytes and media types, which no schema holds. Every answer on the route the request was
 * meant for also has the body and only the headers the document declares for its status.
 */
/** Headers of HTTP itself, which OpenAPI does not declare. */
const HTTP_HEADERS = new Set(['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding']);

function checkContract(req: Request, r: Answer): void {
  if (pathParams(req.op, r.sent) === undefined) return;
  const what = `${req.caller} ${req.op.method} ${r.sent}?${req.query} ${(req.body ?? '').slice(0, 300)} ${req.mutated ?? 'valid'} -> ${r.status} ${r.text.slice(0, 300)}`;
  const answer = responseVerdict(req.op, r.status, r.body);
  expect(answer.accepts ? '' : answer.why, what).toBe('');
  const undeclared = [...r.headers.keys()].filter((h) => !HTTP_HEADERS.has(h) && !(req.op.headers[r.status] ?? []).includes(h));
  expect(undeclared, what).toEqual([]);
  // An account key meets 403 before validation on the operator's routes; a revoked key or none, 401.
  const judged = req.caller === 'operator' || ((req.caller === 'own' || req.caller === 'other') && !req.op.statuses.includes(403));
  if (!judged || r.status === 413 || r.status === 415) return;
  const verdict = documentVerdict(req.op, r.sent, req.query, req.body);
  counts.agreed++;
  expect(r.status === 400 ? 'server refuses' : 'server accepts', `${what}\n  the document ${verdict.accepts ? 'accepts' : `refuses: ${verdict.why}`}`).toBe(verdict.accepts ? 'server accepts' : 'server refuses');
}

describe('the fuzzer over every route', () => {
  test.prop([fc.constantFrom(...ops).chain((op) => validRequest(op, world))], params)('valid requests: documented statuses and bodies, no 5xx, no other tenant', async (req) => {
    const r = await send(req);
    checkAlways(req, r);
    checkContract(req, r);
    const what = `${req.caller} ${req.op.method} ${req.path}?${req.query} ${req.body ?? ''} -> ${r.status} ${r.text.slice(0, 300)}`;
    if (req.caller === 'operator' || req.caller === 'own') {
      expect(req.op.statuses, what).toContain(r.status);
      if (r.status < 300) {
        const schema = schemas.get(`${req.op.method} ${req.op.template}`)!;
        const parsed = schema.safeParse(r.body);
        expect(parsed.success, `${what}: ${parsed.error?.message}`).toBe(true);
      }
    }
  }, MINUTES > 0 ? MINUTES * 60_000 + 60_000 : 120_000);

  test.prop([fc.constantFrom(...ops).chain((op) => mutatedRequest(op, world))], params)('mutated requests: no 5xx, the error shape, no other tenant', async (req) => {
    const r = await send(req);
    checkAlways(req, r);
    checkContract(req, r);
  }, MINUTES > 0 ? MINUTES * 60_000 + 60_000 : 120_000);
});
