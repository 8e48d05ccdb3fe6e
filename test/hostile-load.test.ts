/**
 * The worst bodies we can build, at a fixed rate, against a real server process: deep, wide
 * and both, from an unknown key, a revoked key and a live one. Meanwhile the server samples
 * its own event-loop delay (perf_hooks.monitorEventLoopDelay) and the test probes /livez as
 * the ALB does: the task must stay in service, and the loop's p99 under a documented bound.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { gzipSync } from 'node:zlib';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { startServer, type Proc } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
/** docs/security.md: the p99 event-loop delay bound under this load, a quarter of the 2 s stall /livez reports. */
const LOOP_P99_BOUND_MS = 500;
const RATE_PER_SECOND = 20;
const DURATION_MS = 5_000;
/** The ALB's probe: one GET, answered within its timeout (here 2 s), every interval. */
const PROBE_EVERY_MS = 250;
const PROBE_TIMEOUT_MS = 2_000;
const BODY_LIMIT_BYTES = 100 * 1024;

let db: TestDatabase;
let server: Proc & { url: string };
beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ENABLE_DEBUG_ROUTES: 'true', ENABLE_WORKERS: 'false', BODY_LIMIT_BYTES: String(BODY_LIMIT_BYTES) });
});
afterAll(async () => {
  server?.kill('SIGTERM');
  await server?.exited;
  await db.drop();
});

const asAdmin = (method: string, path: string) => fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }, body: method === 'POST' && path === '/accounts' ? JSON.stringify({ name: 'Load', email: `load-${Date.now()}@example.com` }) : undefined }).then((r) => r.json() as Promise<any>);

interface Body { readonly data: string | Buffer; readonly encoding?: string }

/** Bodies just under the byte limit, and a gzip bomb that inflates far past it. */
function worstBodies(): Body[] {
  const room = BODY_LIMIT_BYTES - 1_024;
  const deep = `{"metric":${'['.repeat(room / 2)}${']'.repeat(room / 2)}}`;
  const deepObjects = `${'{"a":'.repeat(room / 6)}1${'}'.repeat(room / 6)}`;
  const mixed = `{"x":${'[{"a":'.repeat(room / 8)}1${'}]'.repeat(room / 8)}}`;
  const leaves = Array.from({ length: room / 24 }, () => '[[[[1,2,3,4,5]]]]').join(',');
  const wide = `{"metric":"a","quantity":1,"x":[${leaves}]}`;
  const both = `{"x":[${Array.from({ length: room / 200 }, () => `${'['.repeat(90)}1${']'.repeat(90)}`).join(',')}]}`;
  const commas = `{"x":[${'0,'.repeat(room / 2 - 10)}0]}`;
  const manyKeys = `{${Array.from({ length: room / 12 }, (_, i) => `"k${i}":1`).join(',')}}`;
  const escapes = `{"metric":"${'\\u0041'.repeat(room / 6)}","quantity":1}`;
  const numbers = `{"metric":"a","quantity":${'9'.repeat(room / 2)}e999999}`;
  const bomb = gzipSync(Buffer.alloc(64 * BODY_LIMIT_BYTES, '['));
  return [deep, deepObjects, mixed, wide, both, commas, manyKeys, escapes, numbers].map((data): Body => ({ data })).concat([{ data: bomb, encoding: 'gzip' }]);
}

describe('hostile bodies at a fixed rate', () => {
  it(`keep /livez 200 and the event loop's p99 under ${LOOP_P99_BOUND_MS} ms, from unknown, revoked and live keys`, async () => {
    const account = await asAdmin('POST', '/accounts');
    const live = (await asAdmin('POST', `/accounts/${account.id}/api-keys`)).key as string;
    const revokedKey = await asAdmin('POST', `/accounts/${account.id}/api-keys`);
    await asAdmin('DELETE', `/accounts/${account.id}/api-keys/${revokedKey.id}`);
    const keys = [`sbk_${'Z'.repeat(43)}`, revokedKey.key as string, live];
    const bodies = worstBodies();

    await fetch(`${server.url}/debug/event-loop-delay/reset`, { method: 'POST' });
    const statuses = new Map<number, number>();
    const probes: number[] = [];
    const started = Date.now();
    const probing = (async () => {
      while (Date.now() - started < DURATION_MS) {
        const r = await fetch(`${server.url}/livez`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) }).then((x) => x.status, () => 0);
        probes.push(r);
        await sleep(PROBE_EVERY_MS);
      }
    })();
    const sent: Promise<void>[] = [];
    for (let i = 0; Date.now() - started < DURATION_MS; i++) {
      const key = keys[i % keys.length]!;
      const body = bodies[Math.floor(i / keys.length) % bodies.length]!;
      sent.push(
        fetch(`${server.url}/accounts/${account.id}/usage`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(body.encoding ? { 'content-encoding': body.encoding } : {}) }, body: body.data }).then(
          async (r) => {
            await r.arrayBuffer();
            statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
          },
          () => void statuses.set(0, (statuses.get(0) ?? 0) + 1),
        ),
      );
      // A fixed rate: the next request leaves on schedule, whatever the answers do.
      await sleep(Math.max(0, started + ((i + 1) * 1_000) / RATE_PER_SECOND - Date.now()));
    }
    await Promise.all(sent);
    await probing;
    const loop = (await (await fetch(`${server.url}/debug/event-loop-delay`)).json()) as { samples: number; p99Ms: number; maxMs: number };

    // Unknown and revoked keys: 401 before the body is read; the live key: 400 from the bounds, 413 for the bomb.
    expect(Object.fromEntries(statuses)).toEqual({ 401: expect.any(Number), 400: expect.any(Number), 413: expect.any(Number) });
    expect(probes.length).toBeGreaterThan(5);
    expect(probes.every((s) => s === 200)).toBe(true);
    expect(loop.samples).toBeGreaterThan(0);
    expect(loop.p99Ms, JSON.stringify(loop)).toBeLessThan(LOOP_P99_BOUND_MS);
    console.log(`hostile load: ${[...statuses.values()].reduce((a, b) => a + b, 0)} requests, ${probes.length} /livez probes all 200, event loop ${JSON.stringify(loop)}`);
  });
});
