/**
 * Requests that are hostile at the HTTP level, served in-process by the real app on a real
 * Postgres: requests pipelined behind a 413, bodies in a
 * charset the shape check cannot read, and bytes Node cannot read as a request. Each answers
 * a 4xx in the API's error shape, and nothing behind a closed connection runs.
 */
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../app/api.js';
import { loadConfig } from '../app/config.js';
import { createPool, type Pool } from '../app/db.js';
import { DrainableServer } from '../app/http-server.js';
import { createLogger } from '../app/logger.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const BODY_LIMIT_BYTES = 16 * 1024;
let db: TestDatabase;
let pool: Pool;
let port: number;
let base: string;
let account: { id: string; key: string };

const serve = async () => {
  const config = loadConfig({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, BODY_LIMIT_BYTES: String(BODY_LIMIT_BYTES) });
  const server = new DrainableServer(createApi({ pool, logger: createLogger('silent'), config, isDraining: () => false }), config);
  return { server, port: ((await server.listen(0)) as AddressInfo).port };
};
let main: DrainableServer;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool(loadConfig({ DATABASE_URL: db.url }).database, { role: 'test-api', max: 5, logger: createLogger('silent'), waitMs: 2_000, statementTimeoutMs: 5_000 });
  ({ server: main, port } = await serve());
  base = `http://127.0.0.1:${port}`;
  const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' };
  const a = (await (await fetch(`${base}/accounts`, { method: 'POST', headers: admin, body: JSON.stringify({ name: 'Hostile', email: 'hostile@example.com' }) })).json()) as { id: string };
  const k = (await (await fetch(`${base}/accounts/${a.id}/api-keys`, { method: 'POST', headers: admin })).json()) as { key: string };
  account = { id: a.id, key: k.key };
});
afterAll(async () => {
  await main.drain();
  await pool.end();
  await db.drop();
});

const usageRows = async (metric: string) => (await db.query('SELECT 1 FROM usage WHERE metric = $1', [metric])).length;
const postUsage = (body: string, key = account.key) =>
  `POST /accounts/${account.id}/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const chunked = (data: string) => `${Buffer.byteLength(data).toString(16)}\r\n${data}\r\n`;

/** Sends `data` on a new socket and collects what comes back until the server closes its side. */
function exchange(at: number, data: string | Buffer, { halfOpen = false } = {}): Promise<{ text: string; ended: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect({ port: at, host: '127.0.0.1', allowHalfOpen: halfOpen });
    let text = '';
    socket.setEncoding('latin1').on('data', (c: string) => (text += c));
    socket.on('error', () => {});
    const giveUp = setTimeout(() => resolve({ text, ended: false }), 15_000);
    // A half-open client keeps its side open: the test decides when it ends.
    socket.once(halfOpen ? 'end' : 'close', () => {
      clearTimeout(giveUp);
      resolve({ text, ended: true });
      socket.destroy();
    });
    socket.write(data);
  });
}
const statuses = (text: string) => text.match(/^HTTP\/1\.1 \d+/gm) ?? [];
const bodyOf = (text: string) => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } };

describe('a body past the limit', () => {
  it('never runs a request pipelined behind a 413: the connection closes on it, and no row is written', async () => {
    const own = await serve();
    const over = `POST /accounts/${account.id}/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ADMIN_KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n` +
      chunked(`{"metric":"a","pad":"${'x'.repeat(BODY_LIMIT_BYTES)}"}`) + '0\r\n\r\n';
    // All in one write, so the server reads the POST behind the 413 before it answers; the
    // client keeps its side open, as a client still busy sending would.
    const r = await exchange(own.port, over + postUsage(JSON.stringify({ metric: 'behind_413', quantity: 1 }), ADMIN_KEY), { halfOpen: true });
    // The drain waits for every request that was dispatched: after it, whatever ran has written its row.
    await own.server.drain();
    expect(r.ended).toBe(true);
    expect(statuses(r.text)).toEqual(['HTTP/1.1 413']);
    // Before: the POST behind ran (its row was written) and its 201 went into the closed socket.
    expect(await usageRows('behind_413')).toBe(0);
  });
});

describe('charsets', () => {
  it('refuses a body in any charset but UTF-8 with 415, before the shape check it could slip past', async () => {
    const deep = Buffer.from(`{"metric":"\u2200","x":${'['.repeat(2_000)}${']'.repeat(2_000)}}`, 'utf16le');
    for (const charset of ['utf-16le', 'UTF-16', 'utf-32']) {
      const r = await fetch(`${base}/accounts/${account.id}/usage`, { method: 'POST', headers: { authorization: `Bearer ${account.key}`, 'content-type': `application/json; charset=${charset}` }, body: deep });
      expect(r.status, charset).toBe(415);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    }
    for (const charset of ['utf-8', 'UTF-8', '"utf-8"']) {
      const r = await fetch(`${base}/accounts/${account.id}/usage`, { method: 'POST', headers: { authorization: `Bearer ${account.key}`, 'content-type': `application/json; charset=${charset}` }, body: JSON.stringify({ metric: 'utf8', quantity: 1 }) });
      expect(r.status, charset).toBe(201);
    }
  });
});

describe('bytes Node cannot read as a request', () => {
  it('answers in the error shape: headers over the limit 431, a malformed request 400, a smuggling attempt 400', async () => {
    const cases: [string, string, number, string][] = [
      ['one huge header', `GET /accounts HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`, 431, 'HEADERS_TOO_LARGE'],
      ['a huge Authorization', `GET /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'HEADERS_TOO_LARGE'],
      ['3,000 headers', `GET /accounts HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 3_000 }, (_, i) => `X-H${i}: 1\r\n`).join('')}\r\n`, 431, 'HEADERS_TOO_LARGE'],
      ['a huge URL', `GET /accounts?${'a=1&'.repeat(5_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, 'HEADERS_TOO_LARGE'],
      ['no request line', 'GARBAGE\r\n\r\n', 400, 'BAD_REQUEST'],
      ['a header with a space in its name', 'GET /accounts HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n', 400, 'BAD_REQUEST'],
      ['a control character in a header', 'GET /accounts HTTP/1.1\r\nHost: x\r\nX-Ctl: a\x01b\r\n\r\n', 400, 'BAD_REQUEST'],
      ['Content-Length with Transfer-Encoding', `POST /accounts/${account.id}/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${account.key}\r\nContent-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, 400, 'BAD_REQUEST'],
    ];
    for (const [what, data, status, code] of cases) {
      const r = await exchange(port, data);
      expect(r.ended, what).toBe(true);
      expect(statuses(r.text), what).toEqual([`HTTP/1.1 ${status}`]);
      expect(r.text, what).toMatch(/\r\nConnection: close\r\n/);
      expect(bodyOf(r.text).error.code, what).toBe(code);
    }
    expect((await fetch(`${base}/livez`)).status).toBe(200);
  });

  it('answers a request read whole in full when bytes after it cannot be read, and runs nothing after it', async () => {
    const r = await exchange(port, postUsage(JSON.stringify({ metric: 'before_garbage', quantity: 1 })) + 'NOT HTTP\r\n\r\n' + postUsage(JSON.stringify({ metric: 'after_garbage', quantity: 1 })));
    expect(statuses(r.text)).toEqual(['HTTP/1.1 201']);
    expect(await usageRows('before_garbage')).toBe(1);
    // Nothing after the unreadable bytes is read: the last request was never parsed.
    expect(await usageRows('after_garbage')).toBe(0);
  });
});
