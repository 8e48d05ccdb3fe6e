/**
 * The route metrics every access log line carries, in CloudWatch's Embedded Metric Format: what
 * the API dashboard and its alarms read. A real server process; its JSON lines as CloudWatch
 * Logs would receive them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomAdminKey } from './helpers/admin-key.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { startServer, type LogLine, type Proc } from './helpers/process.js';

const ADMIN_KEY = randomAdminKey();
let db: TestDatabase;
let server: Proc & { url: string };

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ENABLE_WORKERS: 'false', METRICS_NAMESPACE: 'Test/Api', RATE_LIMIT_REQUESTS: '1' });
});
afterAll(async () => {
  server?.kill('SIGTERM');
  await server?.exited;
  await db?.drop();
});

async function accessLineOf(path: string, key?: string): Promise<LogLine> {
  const res = await fetch(`${server.url}${path}`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  const id = res.headers.get('x-request-id');
  await res.arrayBuffer();
  return server.waitForLog((l) => l.msg === 'request' && l.requestId === id, 30_000);
}

describe('the access line\'s route metrics', () => {
  it.each([
    ['a 200', '/accounts', ADMIN_KEY, 200, 'GET /accounts', ['Latency']],
    ['a 404 on a route', '/accounts/999999', ADMIN_KEY, 404, 'GET /accounts/:id', ['Latency']],
    ['a 401 before any route', '/accounts', undefined, 401, 'unmatched', ['Latency']],
  ])('%s: the route template, its latency, and only the metrics it counts', async (_name, path, key, status, route, metrics) => {
    const line = await accessLineOf(path, key);
    expect(line.status).toBe(status);
    expect(line.Route).toBe(route);
    expect(line.Latency).toBe(line.ms);
    const aws = line._aws as { Timestamp: number; CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string; Unit: string }[] }[] };
    expect(Math.abs(aws.Timestamp - Date.now())).toBeLessThan(60_000);
    expect(aws.CloudWatchMetrics).toEqual([{ Namespace: 'Test/Api', Dimensions: [['Route']], Metrics: metrics.map((Name) => ({ Name, Unit: 'Milliseconds' })) }]);
    for (const counted of ['Errors', 'Throttled', 'Unavailable']) expect(line).not.toHaveProperty(counted);
  });

  it('a 429: Throttled counted too, one per answer', async () => {
    const account = await (await fetch(`${server.url}/accounts`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Metered', email: 'metered@example.com' }) })).json() as { id: string };
    const { key } = await (await fetch(`${server.url}/accounts/${account.id}/api-keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_KEY}` } })).json() as { key: string };
    // RATE_LIMIT_REQUESTS=1: the key's first request passes, its second is over the limit.
    expect((await accessLineOf(`/accounts/${account.id}`, key)).status).toBe(200);
    const line = await accessLineOf(`/accounts/${account.id}`, key);
    expect(line.status).toBe(429);
    expect(line.Throttled).toBe(1);
    const aws = line._aws as { CloudWatchMetrics: { Metrics: { Name: string; Unit: string }[] }[] };
    expect(aws.CloudWatchMetrics[0]!.Metrics).toEqual([{ Name: 'Latency', Unit: 'Milliseconds' }, { Name: 'Throttled', Unit: 'Count' }]);
    expect(line).not.toHaveProperty('Errors');
  });
});
