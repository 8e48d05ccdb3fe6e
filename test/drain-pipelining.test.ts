/**
 * Pipelined requests on one socket (HTTP/1.1 lets a client send several without waiting),
 * made deterministic: the test holds each request open until it lets it go, and knows when
 * the server has read the bytes it sent (the server socket's bytesRead). The rule: a socket
 * runs one request at a time, the next only once the answer before it is out and the socket
 * stays open; so whatever closes a socket (the drain, an answer that says close, bytes that
 * are not HTTP) closes it on requests that never ran. Never run, then dropped.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../app/config.js';
import { DrainableServer } from '../app/http-server.js';
import { createTestDatabase, eventually } from './helpers/db.js';
import { startServer } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const config = loadConfig({ DATABASE_URL: 'postgres://unused@127.0.0.1/none' });
const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`;
const del = (path: string) => `DELETE ${path} HTTP/1.1\r\nHost: test\r\n\r\n`;
const post = (path: string, body = '{}') => `POST ${path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(1);
  }
}

/**
 * A server whose every request waits until the test releases it (as if for the database),
 * then answers `done <url>` after reading its body; `answer` may change that answer.
 */
async function heldServer(answer: (req: IncomingMessage, res: ServerResponse, body: string) => void = (req, res, body) => res.end(`done ${req.url}${body ? ` ${body}` : ''}`)) {
  const dispatched: string[] = [];
  const releases = new Map<string, () => void>();
  let serverSocket: net.Socket | undefined;
  const server = new DrainableServer((req, res) => {
    dispatched.push(req.url!);
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    const held = new Promise<void>((resolve) => releases.set(req.url!, resolve));
    req.once('end', () => void held.then(() => answer(req, res, body)));
  }, config);
  server.server.on('connection', (s: net.Socket) => (serverSocket = s));
  const { port } = await server.listen(0);
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  let written = 0;
  socket.setEncoding('utf8').on('data', (c: string) => (received += c));
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return {
    server,
    dispatched,
    release: (url: string) => releases.get(url)!(),
    /** Writes `data` and resolves once the server has read all of it (and so parsed every request in it). */
    async send(data: string) {
      written += Buffer.byteLength(data);
      socket.write(data);
      await until(() => (serverSocket?.bytesRead ?? 0) >= written, 'the server to read what was sent');
    },
    answers: () => received.split(/(?=HTTP\/1\.1 )/).filter(Boolean),
    closed: () => Promise.race([closed.then(() => true), sleep(10_000).then(() => false)]),
  };
}

describe('pipelined requests on one socket', () => {
  it('runs them one at a time, in order, and answers each in full: GET, POST and DELETE', async () => {
    const s = await heldServer();
    await s.send(get('/a') + post('/b', '{"n":1}') + del('/c'));
    // Read, and not dispatched while the one before is unanswered.
    expect(s.dispatched).toEqual(['/a']);
    s.release('/a');
    await until(() => s.dispatched.length === 2, 'the POST to run');
    expect(s.answers()).toHaveLength(1);
    s.release('/b');
    await until(() => s.dispatched.length === 3, 'the DELETE to run');
    s.release('/c');
    await until(() => s.answers().length === 3, 'three answers');
    expect(s.answers().map((a) => a.slice(a.indexOf('\r\n\r\n') + 4))).toEqual(['done /a', 'done /b {"n":1}', 'done /c']);
    await s.server.drain();
    expect(await s.closed()).toBe(true);
  });

  it('drain: answers the one running with Connection: close, and never runs the pipelined ones read behind it', async () => {
    const s = await heldServer();
    await s.send(get('/slow'));
    await s.send(post('/usage-1') + post('/usage-2'));
    const drained = s.server.drain();
    s.release('/slow');
    await drained;
    expect(await s.closed()).toBe(true);
    expect(s.dispatched).toEqual(['/slow']);
    expect(s.answers()).toHaveLength(1);
    expect(s.answers()[0]).toMatch(/\r\nConnection: close\r\n/i);
    expect(s.answers()[0]!.endsWith('done /slow')).toBe(true);
  });

  it('drain: never dispatches pipelined requests that arrive after the drain began, and answers the one running', async () => {
    const s = await heldServer();
    await s.send(get('/slow'));
    const drained = s.server.drain();
    // Two full loop turns: the drain has begun before these bytes can be read.
    await new Promise<void>((r) => setImmediate(() => setImmediate(r)));
    await s.send(post('/usage-1') + post('/usage-2'));
    s.release('/slow');
    await drained;
    expect(await s.closed()).toBe(true);
    expect(s.dispatched).toEqual(['/slow']);
    expect(s.answers()).toHaveLength(1);
    expect(s.answers()[0]).toMatch(/\r\nConnection: close\r\n/i);
  });

  it('drain: a request whose body is still arriving when the drain begins is read to its end and answered in full', async () => {
    const s = await heldServer();
    const whole = post('/late-body', '{"metric":"late"}');
    await s.send(whole.slice(0, -8));
    expect(s.dispatched).toEqual(['/late-body']);
    const drained = s.server.drain();
    await new Promise<void>((r) => setImmediate(() => setImmediate(r)));
    await s.send(whole.slice(-8) + post('/behind'));
    s.release('/late-body');
    await drained;
    expect(await s.closed()).toBe(true);
    expect(s.dispatched).toEqual(['/late-body']);
    expect(s.answers()).toHaveLength(1);
    expect(s.answers()[0]!.endsWith('done /late-body {"metric":"late"}')).toBe(true);
  });

  it('an answer that closes the connection (a 413 does) closes it on pipelined requests that never ran', async () => {
    const s = await heldServer((req, res, body) => {
      if (req.url === '/too-large') res.setHeader('Connection', 'close');
      res.end(`done ${req.url}${body ? ` ${body}` : ''}`);
    });
    await s.send(post('/too-large') + post('/usage-1') + get('/after'));
    s.release('/too-large');
    expect(await s.closed()).toBe(true);
    expect(s.dispatched).toEqual(['/too-large']);
    expect(s.answers()).toHaveLength(1);
    await s.server.drain();
  });

  it('bytes after a request with Connection: close are not read as requests: that request is answered in full', async () => {
    const s = await heldServer();
    await s.send(post('/closing').replace('Host: test\r\n', 'Host: test\r\nConnection: close\r\n') + post('/usage-1'));
    s.release('/closing');
    expect(await s.closed()).toBe(true);
    expect(s.dispatched).toEqual(['/closing']);
    expect(s.answers()).toHaveLength(1);
    expect(s.answers()[0]!.endsWith('done /closing {}')).toBe(true);
    await s.server.drain();
  });

  it('a malformed request behind one in flight: the one in flight is answered in full, the socket closes, nothing else runs', async () => {
    const s = await heldServer();
    await s.send(get('/first') + 'NOT HTTP AT ALL\r\n\r\n' + get('/never'));
    s.release('/first');
    expect(await s.closed()).toBe(true);
    expect(s.dispatched).toEqual(['/first']);
    expect(s.answers()).toHaveLength(1);
    expect(s.answers()[0]!.endsWith('done /first')).toBe(true);
    await s.server.drain();
  });
});

describe('a client that pipelines without bound', () => {
  it('is read only 32 requests ahead of the one running (plus the bytes at hand), then served to the end, in order', async () => {
    const total = 10_000;
    let parsed = 0;
    let releaseFirst!: () => void;
    const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
    const server = new DrainableServer((req, res) => {
      if (req.url === '/r0') void firstHeld.then(() => res.end(`done ${req.url}`));
      else res.end(`done ${req.url}`);
    }, config);
    let serverSocket: net.Socket | undefined;
    server.server.on('connection', (s: net.Socket) => (serverSocket = s));
    server.server.prependListener('request', () => parsed++);
    const { port } = await server.listen(0);
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8').on('data', (c: string) => (received += c));
    socket.write(Array.from({ length: total }, (_, i) => get(`/r${i}`)).join(''));
    // The first request holds the socket: once 32 are waiting behind it, the server stops reading.
    await until(() => serverSocket?.isPaused() === true, 'the server to stop reading the socket');
    const atPause = parsed;
    await new Promise<void>((r) => setImmediate(() => setImmediate(() => setImmediate(r))));
    // At most the rest of one socket read (64 KiB of 28-byte requests) is parsed past the 32.
    expect(atPause).toBeLessThan(33 + Math.ceil(65_536 / get('/r0').length) + 1);
    expect(parsed).toBe(atPause);
    releaseFirst();
    await until(() => (received.match(/HTTP\/1\.1 200/g) ?? []).length === total, 'every answer');
    const bodies = received.split(/(?=HTTP\/1\.1 )/).map((a) => a.slice(a.indexOf('\r\n\r\n') + 4));
    expect(bodies[0]).toBe('done /r0');
    expect(bodies.at(-1)).toBe(`done /r${total - 1}`);
    expect(bodies.every((b, i) => b === `done /r${i}`)).toBe(true);
    socket.destroy();
    await server.drain();
  });
});

describe('SIGTERM with pipelined requests on one socket, against the real server process', () => {
  it('answers the request running in full and never runs the POST, DELETE and GET pipelined behind it (rows checked)', async () => {
    const db = await createTestDatabase();
    const adminKey = randomAdminKey();
    const server = await startServer({ DATABASE_URL: db.url, ADMIN_API_KEY: adminKey, ENABLE_WORKERS: 'false', PRE_STOP_DELAY_MS: '0' });
    try {
      const asAdmin = { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' };
      const account = (await (await fetch(`${server.url}/accounts`, { method: 'POST', headers: asAdmin, body: JSON.stringify({ name: 'Pipelined', email: 'pipelined@example.com' }) })).json()) as { id: string };
      const mint = async () => (await (await fetch(`${server.url}/accounts/${account.id}/api-keys`, { method: 'POST', headers: asAdmin })).json()) as { id: string; key: string };
      const key = await mint();
      const spare = await mint();
      const auth = `Host: x\r\nAuthorization: Bearer ${key.key}\r\n`;
      const usage = (metric: string) => {
        const body = JSON.stringify({ metric, quantity: 1 });
        return `POST /accounts/${account.id}/usage HTTP/1.1\r\n${auth}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
      };
      const pipelined = usage('first') + usage('second') + `DELETE /accounts/${account.id}/api-keys/${spare.id} HTTP/1.1\r\n${auth}\r\n` + `GET /accounts/${account.id} HTTP/1.1\r\n${auth}\r\n`;

      // The test holds the usage table, so the first POST is running (waiting on the lock) when SIGTERM comes.
      await db.withClient(async (lock) => {
        await lock.query('BEGIN');
        await lock.query('LOCK TABLE usage IN ACCESS EXCLUSIVE MODE');
        const socket = net.connect(server.port, '127.0.0.1');
        let received = '';
        socket.setEncoding('utf8').on('data', (c: string) => (received += c));
        socket.on('error', () => {});
        const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
        socket.write(pipelined);
        const waiting = async () => (await db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name LIKE 'ecs-saas-backend:%'`)).length === 1;
        expect(await eventually(waiting, 20_000, 20)).toBe(true);
        server.kill('SIGTERM');
        await server.waitForLog((l) => l.msg === 'shutdown: http');
        await lock.query('ROLLBACK');
        await Promise.race([closed, sleep(20_000)]);
        const answers = received.split(/(?=HTTP\/1\.1 )/).filter(Boolean);
        expect(answers).toHaveLength(1);
        expect(answers[0]).toMatch(/^HTTP\/1\.1 201 Created\r\n/);
        expect(answers[0]).toMatch(/\r\nConnection: close\r\n/i);
        expect(JSON.parse(answers[0]!.slice(answers[0]!.indexOf('\r\n\r\n') + 4))).toMatchObject({ metric: 'first' });
      });
      expect((await server.exited).code).toBe(0);
      // Answered means it ran; unanswered means it never ran: the second POST wrote nothing, the DELETE revoked nothing.
      expect((await db.query<{ metric: string }>('SELECT metric FROM usage ORDER BY id')).map((r) => r.metric)).toEqual(['first']);
      expect(await db.query('SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL', [spare.id])).toHaveLength(1);
    } finally {
      server.kill('SIGKILL');
      await server.exited;
      await db.drop();
    }
  });
});
