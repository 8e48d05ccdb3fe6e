/**
 * The drain's last race, made deterministic: a request lands on an idle keep-alive socket at
 * every point of the closing window, from just before the drain begins to well after the
 * idle sockets closed. Server and client share one event loop, so each landing point is a
 * fixed number of loop turns after drain() and repeats exactly. Whatever the point, the
 * request is either answered in full with `Connection: close`, or never dispatched (the
 * socket closes without an answer, which a load balancer may retry); never run and then
 * dropped.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../app/config.js';
import { DrainableServer } from '../app/http-server.js';

const config = loadConfig({ DATABASE_URL: 'postgres://unused@127.0.0.1/none' });
const request = (path: string) => `GET ${path} HTTP/1.1\r\nHost: test\r\nConnection: keep-alive\r\n\r\n`;
const immediate = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Sends the request at its landing point; resolves when the drain has ended. */
type Landing = { label: string; land: (send: () => void, drain: () => Promise<void>) => Promise<void> };

/** Where the second request lands relative to drain(): before it, or after N loop turns or ms. */
const LANDINGS: Landing[] = [
  { label: 'written just before the drain begins', land: async (send, drain) => (send(), drain()) },
  { label: 'written in the same tick, after drain()', land: async (send, drain) => { const d = drain(); send(); return d; } },
  ...[1, 2, 3, 4, 6].map((n) => ({
    label: `written ${n} loop turn(s) after drain()`,
    land: async (send: () => void, drain: () => Promise<void>) => {
      const d = drain();
      for (let i = 0; i < n; i++) await immediate();
      send();
      return d;
    },
  })),
  ...[1, 5, 20].map((ms) => ({
    label: `written ${ms} ms after drain()`,
    land: async (send: () => void, drain: () => Promise<void>) => {
      const d = drain();
      await sleep(ms);
      send();
      return d;
    },
  })),
];

async function raceOnce(landing: Landing): Promise<{ dispatched: string[]; afterFirst: string }> {
  const dispatched: string[] = [];
  // Each request "reads the database" for 20 ms before it answers, as the one did.
  const server = new DrainableServer((req, res) => {
    dispatched.push(req.url!);
    setTimeout(() => res.end(`ok ${req.url}`), 20);
  }, config);
  const { port } = await server.listen(0);
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  socket.setEncoding('utf8').on('data', (c: string) => (received += c));
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(request('/first'));
  while (!received.includes('ok /first')) await sleep(1);
  const firstLength = received.length;
  expect(received).toMatch(/connection: keep-alive/i);

  await landing.land(() => socket.write(request('/second')), () => server.drain());
  await Promise.race([closed, sleep(5_000)]);
  return { dispatched, afterFirst: received.slice(firstLength) };
}

describe('a request landing on an idle keep-alive socket during the drain', () => {
  it.each(LANDINGS.map((l) => [l.label, l] as const))('%s: answered in full with Connection: close, or never dispatched', async (_, landing) => {
    const { dispatched, afterFirst } = await raceOnce(landing);
    if (dispatched.includes('/second')) {
      expect(afterFirst).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(afterFirst).toMatch(/\r\nConnection: close\r\n/i);
      expect(afterFirst.endsWith('ok /second')).toBe(true);
    } else {
      expect(afterFirst).toBe('');
    }
  });

  it('covers both outcomes: a request already on the wire is served, a late one is never dispatched', async () => {
    const early = await raceOnce(LANDINGS[0]!);
    expect(early.dispatched).toEqual(['/first', '/second']);
    const late = await raceOnce(LANDINGS.at(-1)!);
    expect(late.dispatched).toEqual(['/first']);
  });
});
