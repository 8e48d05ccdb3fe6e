/**
 * Every request bounded in bytes and rate, served in-process by the real app on a real
 * Postgres: an answer given before the body is in (401, 405, 415, 413) says Connection: close
 * and the server reads at most EARLY_ANSWER_DRAIN_BYTES more, counted on the server's own
 * socket; `100 Continue` goes out only for a live key and an allowed size; a keep-alive agent
 * never meets a reset after a 413; the charset is the one body-parser decodes; and a key past
 * RATE_LIMIT_REQUESTS gets 429 with Retry-After and the draft's RateLimit fields.
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type InProcessApi } from './helpers/api.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { earlyAnswerCases, flood, type Flooded } from './helpers/flood.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const MADE_UP_KEY = `sbk_${'A'.repeat(43)}`;
const DRAIN_BYTES = 64 * 1024;
const DRAIN_MS = 1_000;
let db: TestDatabase;
let api: InProcessApi;
/** Bytes the server read on each socket, once it closed. */
const readOnClose: number[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  api = await startApi({
    DATABASE_URL: db.url,
    ADMIN_API_KEY: ADMIN_KEY,
    BODY_LIMIT_BYTES: '1024',
    EARLY_ANSWER_DRAIN_BYTES: String(DRAIN_BYTES),
    EARLY_ANSWER_DRAIN_MS: String(DRAIN_MS),
  });
  api.server.server.on('connection', (s: net.Socket) => s.once('close', () => readOnClose.push(s.bytesRead)));
});
afterAll(async () => {
  await api?.stop();
  await db?.drop();
});

async function call(key: string, method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<{ status: number; headers: Headers; body: any }> {
  const res = await fetch(`${api.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': contentType }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

let seq = 0;
async function newAccountKey(): Promise<{ id: string; key: string }> {
  const account = await call(ADMIN_KEY, 'POST', '/accounts', { name: 'Tenant', email: `b${++seq}-${Date.now()}@example.com` });
  expect(account.status).toBe(201);
  const key = await call(ADMIN_KEY, 'POST', `/accounts/${account.body.id}/api-keys`);
  expect(key.status).toBe(201);
  return { id: account.body.id, key: key.body.key };
}

/** A flood (test/helpers/flood.ts), and the bytes the server's own socket read for it. */
async function floodCounted(head: string): Promise<Flooded & { serverRead: number }> {
  const before = readOnClose.length;
  const r = await flood(api.port, head);
  // The server's 'close' for the same socket may come a moment after the client's.
  const t0 = Date.now();
  while (readOnClose.length === before && Date.now() - t0 < 5_000) await new Promise((resolve) => setImmediate(resolve));
  return { ...r, serverRead: readOnClose.at(-1)! };
}

/** Bytes the server may read beyond the drain bound: the headers, and what one socket read and the request's buffer already held. */
const SLACK = 256 * 1024;

describe('bytes: an answer before the body closes the connection', () => {
  it.each(earlyAnswerCases(ADMIN_KEY))('%s: answers %s with Connection: close and reads at most EARLY_ANSWER_DRAIN_BYTES more', async (_name, status, head) => {
    const r = await floodCounted(head);
    expect(r.head).toMatch(new RegExp(`^HTTP/1.1 ${status} `));
    expect(r.head).toMatch(/\r\nConnection: close\r\n/i);
    // Before: the server read and dropped the body until REQUEST_TIMEOUT_MS, 18.7 GB on one connection.
    expect(r.serverRead).toBeLessThan(DRAIN_BYTES + SLACK);
    expect(r.closedAfterMs).toBeLessThan(DRAIN_MS + 8_000);
  });

  it('sends 100 Continue only for a live key and an allowed size', async () => {
    const exchange = (key: string, length: number, body?: string) =>
      new Promise<string>((resolve) => {
        const socket = net.connect(api.port, '127.0.0.1');
        let text = '';
        let sent = false;
        socket.on('data', (d) => {
          text += d.toString('latin1');
          // The client waits for 100 Continue before it sends its body, as curl and .NET do.
          if (body !== undefined && text.startsWith('HTTP/1.1 100 Continue\r\n\r\n') && !sent) {
            sent = true;
            socket.write(body);
          }
          const final = text.replace(/^HTTP\/1.1 100 Continue\r\n\r\n/, '');
          const head = /^HTTP\/1.1 \d{3}[^]*?\r\ncontent-length: (\d+)\r\n[^]*?\r\n\r\n/i.exec(final);
          if (head && final.length - head[0].length >= Number(head[1])) socket.destroy();
        });
        socket.on('error', () => undefined);
        socket.once('close', () => resolve(text));
        socket.write(`POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`);
        setTimeout(() => socket.destroy(), 10_000).unref();
      });
    const unknown = await exchange(MADE_UP_KEY, 100);
    expect(unknown).toMatch(/^HTTP\/1.1 401 /);
    const tooLarge = await exchange(ADMIN_KEY, 1_000_000);
    expect(tooLarge).toMatch(/^HTTP\/1.1 413 /);
    const body = JSON.stringify({ name: 'Continued', email: `continue-${Date.now()}@example.com` });
    const good = await exchange(ADMIN_KEY, Buffer.byteLength(body), body);
    expect(good).toMatch(/^HTTP\/1.1 100 Continue\r\n\r\nHTTP\/1.1 201 /);
  });

  it('a keep-alive agent meets no reset after a 413: it says close, and the next request opens a new connection', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const send = (body: string) =>
      new Promise<string>((resolve) => {
        const req = http.request(`${api.base}/accounts`, { method: 'POST', agent, headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' } }, (res) => {
          res.resume().on('end', () => resolve(`${res.statusCode} ${res.headers.connection}`));
        });
        req.on('error', (e: NodeJS.ErrnoException) => resolve(`failed: ${e.code}`));
        req.end(body);
      });
    const seen: string[] = [];
    for (let i = 0; i < 12; i++) {
      seen.push(await send(`{"name":"${'x'.repeat(20_000)}"}`));
      seen.push(await send('{"name":""}'));
    }
    agent.destroy();
    expect(seen.filter((s) => s.startsWith('failed'))).toEqual([]);
    // A 413 whose body had all arrived may keep the connection; one that had not says close.
    for (const s of seen.filter((_s, i) => i % 2 === 0)) expect(s).toMatch(/^413 (close|keep-alive)$/);
    expect(seen.filter((_s, i) => i % 2 === 1)).toEqual(Array(12).fill('400 keep-alive'));
  });
});

describe('charset: decided by the parser that decodes the body', () => {
  const utf16 = (s: string) => Buffer.from(s, 'utf16le');
  const post = (key: string, contentType: string, body: string | Buffer) =>
    fetch(`${api.base}/accounts`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': contentType }, body }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

  it.each([
    'application/json; x="; charset=utf-8"; charset=utf-16le',
    'application/json; charset=utf-16le',
    'application/json; CHARSET=UTF-16LE',
    'application/json; charset="utf-16le"',
    'application/json;charset=utf-16',
    'application/json; charset=utf-8; charset=utf-16le',
    'application/json; charset=utf-16le; charset=utf-8',
    'application/json; charset=latin1',
    'application/json; charset=utf8',
    'application/json; x="a\\"; charset=utf-8"; charset=utf-32',
  ])('refuses %s with 415', async (type) => {
    const r = await post(ADMIN_KEY, type, utf16(JSON.stringify({ name: 'Sixteen', email: 'sixteen@example.com' })));
    expect(r.status).toBe(415);
    expect(r.body.error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
  });

  it.each([
    'application/json',
    'application/json; charset=utf-8',
    'application/json; charset=UTF-8',
    'application/json;charset="utf-8"',
    'application/json ; charset = utf-8',
    'application/json; x="; charset=utf-16le"; charset=utf-8',
  ])('accepts %s as UTF-8', async (type) => {
    const r = await post(ADMIN_KEY, type, JSON.stringify({ name: 'Eight', email: `eight-${++seq}-${Date.now()}@example.com` }));
    expect(r.status).toBe(201);
  });
});

describe('rate: a bounded in-task limit per key', () => {
  let limited: InProcessApi;
  beforeAll(async () => {
    limited = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, RATE_LIMIT_REQUESTS: '3', RATE_LIMIT_OPERATOR_REQUESTS: '5', RATE_LIMIT_WINDOW_MS: '60000' });
  });
  afterAll(() => limited?.stop());
  const get = (key: string, path = '/accounts') => fetch(`${limited.base}${path}`, { headers: { authorization: `Bearer ${key}` } }).then(async (r) => ({ status: r.status, headers: r.headers, body: (await r.json()) as any }));

  it('answers 429 with Retry-After and RateLimit fields past the key\'s limit, and other keys are unaffected', async () => {
    const a = await newAccountKey();
    const b = await newAccountKey();
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await get(a.key)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const over = await get(a.key);
    expect(over.body.error.code).toBe('RATE_LIMITED');
    const retryAfter = Number(over.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(over.headers.get('ratelimit-policy')).toBe('"per-key";q=3;w=60');
    expect(over.headers.get('ratelimit')).toBe(`"per-key";r=0;t=${retryAfter}`);
    expect((await get(b.key)).status).toBe(200);
  });

  it('gives the operator its own limit', async () => {
    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push((await get(ADMIN_KEY)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
  });

  it('limits made-up keys too, without a query: 429, not 401, once over', async () => {
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await get(MADE_UP_KEY)).status);
    expect(statuses).toEqual([401, 401, 401, 429]);
  });
});
