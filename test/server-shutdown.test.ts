/**
 * The drain, on the built server as a real child process: SIGTERM while requests are in
 * flight loses none of them, refuses new connections, exits 0 as soon as the work is done and
 * leaves no connection behind; the deadline, a second signal and keep-alive reuse behave as
 * documented.
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { get, loadAcrossSigterm } from './helpers/load.js';
import { startServer } from './helpers/process.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

function connect(port: number): Promise<'connected' | string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('SIGTERM with 50 requests in flight', () => {
  it('completes every request, refuses new connections, exits 0 promptly and leaks no connection', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_DEBUG_ROUTES: 'true', SHUTDOWN_TIMEOUT_MS: '20000' });
    const keepAlive = Array.from({ length: 5 }, () => new http.Agent({ keepAlive: true, maxSockets: 5 }));
    // Warm the keep-alive agents so that half the requests really ride on reused sockets.
    await Promise.all(keepAlive.flatMap((agent) => Array.from({ length: 5 }, () => get(`${server.url}/healthz`, agent))));

    const sentAt = Date.now();
    const durations = Array.from({ length: 50 }, (_, i) => 3000 + Math.round((i / 49) * 2000));
    const requests = durations.map((ms, i) =>
      get(`${server.url}/debug/sleep?ms=${ms}`, i % 2 === 0 ? keepAlive[i % 5]! : false).then((r) => ({ ...r, ms })),
    );
    await sleepMs(500);

    const sigtermAt = Date.now();
    server.kill('SIGTERM');
    const longestRemaining = sentAt + Math.max(...durations) - sigtermAt;
    await sleepMs(100);
    expect(await connect(server.port)).toBe('ECONNREFUSED');

    const replies = await Promise.all(requests);
    for (const reply of replies) {
      expect(reply.status).toBe(200);
      expect(JSON.parse(reply.body)).toEqual({ sleptMs: reply.ms });
    }
    const { code, at } = await server.exited;
    expect(code).toBe(0);
    expect(at - sigtermAt).toBeLessThanOrEqual(longestRemaining + 1000);
    expect(await eventually(async () => (await db.ourConnections()) === 0, 2000)).toBe(true);
    expect(await db.advisoryLocks()).toBe(0);

    const steps = server.logs.filter((l) => typeof l.msg === 'string' && /^shutdown: \w+ done in/.test(l.msg)).map((l) => l.step);
    expect(steps).toEqual(['readiness', 'http', 'workers', 'pool']);
    keepAlive.forEach((a) => a.destroy());
  });
});

describe('the drain deadline', () => {
  it('exits 1 at SHUTDOWN_TIMEOUT_MS and names the step still running', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_DEBUG_ROUTES: 'true', SHUTDOWN_TIMEOUT_MS: '1500' });
    const slow = get(`${server.url}/debug/sleep?ms=8000`, false).catch((err: Error) => err);
    await sleepMs(300);
    const sigtermAt = Date.now();
    server.kill('SIGTERM');
    const { code, at } = await server.exited;
    expect(code).toBe(1);
    expect(at - sigtermAt).toBeGreaterThanOrEqual(1400);
    expect(at - sigtermAt).toBeLessThan(2500);
    const line = server.logs.find((l) => /deadline of 1500 ms passed/.test(l.msg));
    expect(line?.step).toBe('http');
    expect(line?.msg).toContain('1 request(s) in flight');
    // The socket still open at the deadline is destroyed, not left to time out.
    expect(await slow).toBeInstanceOf(Error);
    expect(await eventually(async () => (await db.ourConnections()) === 0, 3000)).toBe(true);
  });
});

describe('a second signal', () => {
  it('exits 1 at once', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_DEBUG_ROUTES: 'true', SHUTDOWN_TIMEOUT_MS: '20000' });
    const slow = get(`${server.url}/debug/sleep?ms=8000`, false).catch((err: Error) => err);
    await sleepMs(300);
    server.kill('SIGTERM');
    await server.waitForLog((l) => l.step === 'http' && l.msg === 'shutdown: http');
    const secondAt = Date.now();
    server.kill('SIGINT');
    const { code, at } = await server.exited;
    expect(code).toBe(1);
    expect(at - secondAt).toBeLessThan(500);
    expect(server.logs.some((l) => /received SIGINT again during shutdown; exiting now/.test(l.msg))).toBe(true);
    await slow;
  });
});

describe('keep-alive during the drain', () => {
  it('answers a request in flight with Connection: close and closes idle keep-alive sockets at once', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_DEBUG_ROUTES: 'true', SHUTDOWN_TIMEOUT_MS: '20000' });
    const busyAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const idleAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });

    // Before the drain, keep-alive is on: the same socket serves two requests.
    const first = await get(`${server.url}/healthz`, busyAgent);
    expect(first.headers.connection).toBe('keep-alive');
    const idle = await get(`${server.url}/healthz`, idleAgent);
    expect(idle.headers.connection).toBe('keep-alive');
    const idleSocket = Object.values(idleAgent.freeSockets).flat()[0]!;
    const idleClosed = new Promise<number>((resolve) => idleSocket.once('close', () => resolve(Date.now())));

    // This request reuses busyAgent's kept-alive socket and is in flight when SIGTERM arrives.
    const inFlight = get(`${server.url}/debug/sleep?ms=1500`, busyAgent);
    const reusedSocket = await new Promise<net.Socket>((resolve) => {
      const socket = Object.values(busyAgent.sockets).flat()[0];
      if (socket) resolve(socket);
    });
    const reusedClosed = new Promise<number>((resolve) => reusedSocket.once('close', () => resolve(Date.now())));
    await sleepMs(200);
    const sigtermAt = Date.now();
    server.kill('SIGTERM');

    expect((await idleClosed) - sigtermAt).toBeLessThan(500);
    const reply = await inFlight;
    const repliedAt = Date.now();
    expect(reply.status).toBe(200);
    expect(reply.headers.connection).toBe('close');
    expect((await reusedClosed) - repliedAt).toBeLessThan(500);
    expect((await server.exited).code).toBe(0);
    busyAgent.destroy();
    idleAgent.destroy();
  });
});

describe('SIGTERM under keep-alive load', () => {
  it('fails no request sent before the listener closed, even one racing the close of its idle socket', async () => {
    const server = await startServer({ DATABASE_URL: db.url, ENABLE_DEBUG_ROUTES: 'true', ENABLE_WORKERS: 'false' });
    const outcome = await loadAcrossSigterm(server, { connections: 20, requests: 800 });
    expect(outcome.errors).toEqual([]);
    // Each connection may have its next request started but not yet on the wire when SIGTERM lands.
    expect(outcome.inFlight).toBeGreaterThanOrEqual(800 - 20);
    expect(outcome.exitCode).toBe(0);
  });
});
