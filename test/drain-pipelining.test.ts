/**
 * Pipelined requests on one socket across the drain, made deterministic: a slow request is
 * held open by the test, two POSTs are pipelined behind it on the same socket, and the
 * drain begins while the slow one runs. Every request the server dispatched must be answered
 * in full, in order, the last one with `Connection: close`; a request that arrives after the
 * drain began is never dispatched. Never run, then dropped.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../app/config.js';
import { DrainableServer } from '../app/http-server.js';

const config = loadConfig({ DATABASE_URL: 'postgres://unused@127.0.0.1/none' });
const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`;
const post = (path: string) => `POST ${path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;

async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(1);
  }
}

/** Runs the scenario; `postsBeforeDrain` says whether the POSTs reach the server before drain() begins. */
async function pipeline(postsBeforeDrain: boolean) {
  const dispatched: string[] = [];
  let releaseSlow!: () => void;
  const slowHeld = new Promise<void>((resolve) => (releaseSlow = resolve));
  const server = new DrainableServer((req, res) => {
    dispatched.push(req.url!);
    req.resume();
    // Every request "waits for the database" until the test lets it go, after drain() began.
    void slowHeld.then(() => res.end(`done ${req.url}`));
  }, config);
  const { port } = await server.listen(0);
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  socket.setEncoding('utf8').on('data', (c: string) => (received += c));
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));

  socket.write(get('/slow'));
  await until(() => dispatched.includes('/slow'), 'the slow request to run');
  let drained: Promise<void>;
  if (postsBeforeDrain) {
    socket.write(post('/usage-1') + post('/usage-2'));
    await until(() => dispatched.length === 3, 'the pipelined POSTs to be dispatched');
    drained = server.drain();
  } else {
    drained = server.drain();
    // Two full loop turns: the drain has begun before these bytes can be read.
    await new Promise<void>((r) => setImmediate(() => setImmediate(r)));
    socket.write(post('/usage-1') + post('/usage-2'));
    await sleep(50);
  }
  releaseSlow();
  await drained;
  await Promise.race([closed, sleep(10_000)]);
  const answers = received.split(/(?=HTTP\/1\.1 )/).filter(Boolean);
  return { dispatched, answers, closed: socket.destroyed || socket.readableEnded };
}

describe('pipelined requests on one socket during the drain', () => {
  it('answers every dispatched request in full, in order, the last with Connection: close', async () => {
    const { dispatched, answers, closed } = await pipeline(true);
    expect(dispatched).toEqual(['/slow', '/usage-1', '/usage-2']);
    expect(answers).toHaveLength(3);
    answers.forEach((a, i) => {
      expect(a).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(a.endsWith(`done ${dispatched[i]}`)).toBe(true);
    });
    expect(answers.at(-1)).toMatch(/\r\nConnection: close\r\n/i);
    expect(closed).toBe(true);
  });

  it('never dispatches pipelined requests that arrive after the drain began, and answers the one running', async () => {
    const { dispatched, answers, closed } = await pipeline(false);
    expect(dispatched).toEqual(['/slow']);
    expect(answers).toHaveLength(1);
    expect(answers[0]).toMatch(/\r\nConnection: close\r\n/i);
    expect(answers[0]!.endsWith('done /slow')).toBe(true);
    expect(closed).toBe(true);
  });
});
