/**
 * The connection itself, against the real server process: a body streamed past
 * BODY_LIMIT_BYTES is cut off at once, slow clients are bounded by HEADERS_TIMEOUT_MS and
 * REQUEST_TIMEOUT_MS (while an idle keep-alive socket is not), and no key reaches the log.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { startServer } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
let db: TestDatabase;
let server: Awaited<ReturnType<typeof startServer>>;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({
    DATABASE_URL: db.url,
    ADMIN_API_KEY: ADMIN_KEY,
    ENABLE_WORKERS: 'false',
    BODY_LIMIT_BYTES: '1024',
    HEADERS_TIMEOUT_MS: '1000',
    REQUEST_TIMEOUT_MS: '2000',
    KEEP_ALIVE_TIMEOUT_MS: '4000',
  });
});
afterAll(async () => {
  server.kill('SIGTERM');
  await server.exited;
  await db.drop();
});

interface RawExchange {
  /** The status line of the first answer, or undefined if none came. */
  statusLine?: string;
  /** Everything the server sent. */
  text: string;
  answeredAfterMs?: number;
  closedAfterMs: number;
}

/** Opens a socket, sends `head`, then calls `trickle` until the server answers or closes. */
function raw(head: string, trickle: (socket: net.Socket) => void, everyMs: number, giveUpMs = 15_000): Promise<RawExchange> {
  return new Promise((resolve) => {
    const socket = net.connect(server.port, '127.0.0.1');
    const t0 = Date.now();
    const out: Partial<RawExchange> = {};
    let text = '';
    socket.on('data', (d) => {
      text += d.toString('latin1');
      if (out.statusLine === undefined) {
        out.statusLine = d.toString('latin1').split('\r\n')[0];
        out.answeredAfterMs = Date.now() - t0;
      }
    });
    socket.on('error', () => {});
    const timer = setInterval(() => socket.writable && trickle(socket), everyMs);
    const giveUp = setTimeout(() => socket.destroy(), giveUpMs);
    socket.once('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      resolve({ ...out, text, closedAfterMs: Date.now() - t0 });
    });
    socket.write(head);
  });
}

describe('body limit while streaming', () => {
  it('answers 413 and closes as soon as a chunked body passes BODY_LIMIT_BYTES, without reading the rest', async () => {
    const chunk = 'a'.repeat(16_384);
    let sent = 0;
    const r = await raw(
      `POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ADMIN_KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
      (s) => {
        s.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
        sent += chunk.length;
      },
      2,
    );
    // The client would send forever; before the fix nothing came back until the body ended.
    expect(r.statusLine).toBe('HTTP/1.1 413 Payload Too Large');
    expect(r.answeredAfterMs).toBeLessThan(5_000);
    expect(r.closedAfterMs).toBeLessThan(8_000);
    expect(sent).toBeGreaterThan(1024);
  });
  it('answers 413 to an upload that passes the limit, and the client still sending reads it: no reset', async () => {
    const seen: string[] = [];
    for (let i = 0; i < 6; i++) {
      // Within EARLY_ANSWER_DRAIN_BYTES (64 KiB) past the limit: a longer upload is cut off there.
      const body = new ReadableStream({
        start(c) {
          for (let k = 0; k < 50; k++) c.enqueue(new TextEncoder().encode('['.repeat(1_000)));
          c.close();
        },
      });
      seen.push(
        await fetch(`http://127.0.0.1:${server.port}/accounts`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }, body, duplex: 'half' } as RequestInit).then(
          async (r) => `${r.status} ${((await r.json()) as { error: { code: string } }).error.code}`,
          (e: Error & { cause?: { code?: string } }) => `failed: ${e.cause?.code ?? e.message}`,
        ),
      );
    }
    // Before: Node destroyed the socket as soon as the 413 was out, and the upload met a reset (EPIPE).
    expect(seen).toEqual(Array(6).fill('413 BODY_TOO_LARGE'));
  });
});

describe('slow clients', () => {
  it('answers 408 and closes a client that trickles its headers, after HEADERS_TIMEOUT_MS', async () => {
    const r = await raw('GET /accounts HTTP/1.1\r\nHost: x\r\n', (s) => s.write('X-Slow: 1\r\n'), 300);
    expect(r.statusLine).toBe('HTTP/1.1 408 Request Timeout');
    // In the API's error shape, not Node's bare status line.
    expect(JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: { code: 'REQUEST_TIMEOUT' } });
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(900);
    expect(r.closedAfterMs).toBeLessThan(5_000);
  });

  it('answers 408 and closes a client that trickles its body, after REQUEST_TIMEOUT_MS', async () => {
    const r = await raw(
      `POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ADMIN_KEY}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n`,
      (s) => s.write(' '),
      300,
    );
    expect(r.statusLine).toBe('HTTP/1.1 408 Request Timeout');
    expect(JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: { code: 'REQUEST_TIMEOUT' } });
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1_900);
    expect(r.closedAfterMs).toBeLessThan(6_000);
  });

  it('keeps an idle keep-alive socket past HEADERS_TIMEOUT_MS: only KEEP_ALIVE_TIMEOUT_MS closes it', async () => {
    const socket = net.connect(server.port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    const answers: string[] = [];
    socket.on('data', (d) => answers.push(d.toString('latin1').split('\r\n')[0]!));
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise((r) => setTimeout(r, 2_500));
    expect(socket.destroyed).toBe(false);
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await eventually(async () => answers.length === 2, 10_000);
    expect(answers).toEqual(['HTTP/1.1 200 OK', 'HTTP/1.1 200 OK']);
    socket.destroy();
  });
});

describe('keys in logs', () => {
  it('never writes a key, good or bad, to the log', async () => {
    const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
    const account = await fetch(`${server.url}/accounts`, { method: 'POST', headers: auth(ADMIN_KEY), body: JSON.stringify({ name: 'Logged', email: 'logged@example.com' }) });
    const { id } = (await account.json()) as { id: string };
    const created = await fetch(`${server.url}/accounts/${id}/api-keys`, { method: 'POST', headers: auth(ADMIN_KEY) });
    const { key } = (await created.json()) as { key: string };
    expect((await fetch(`${server.url}/accounts/${id}`, { headers: auth(key) })).status).toBe(200);
    const wrong = `sbk_${'Z'.repeat(43)}`;
    expect((await fetch(`${server.url}/accounts/${id}`, { headers: auth(wrong) })).status).toBe(401);
    expect((await fetch(`${server.url}/accounts/${id}`, { headers: auth('short-wrong-key') })).status).toBe(401);
    await server.waitForLog(() => server.logs.filter((l) => l.msg === 'request' && l.status === 401).length === 2);
    const out = server.stdout();
    expect(out).toContain(`/accounts/${id}`);
    for (const secret of [ADMIN_KEY, key, wrong, 'short-wrong-key', key.slice(4, 20)]) expect(out).not.toContain(secret);
  });
});
