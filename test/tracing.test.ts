/**
 * Tracing, with the spans caught by an in-memory exporter (in process) or a file (the real
 * container): one request makes one trace, its server span and the spans of its tenancy
 * batch and statements, continuing its caller's trace; its id is on the access log line; a
 * job run makes one trace named by its run key; no attribute of a fuzzed run holds a key, a
 * password, a body or an email; an exporter that hangs or refuses slows no request and
 * breaks no drain.
 */
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { ROOT_CONTEXT, SpanStatusCode, trace as otelTrace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { applicationName } from '../app/db.js';
import { createLogger } from '../app/logger.js';
import { KeepingProcessor, MAX_BATCH } from '../app/tracing/keeping-processor.js';
import { ExportResultCode } from '@opentelemetry/core';
import { keepingSampler } from '../app/tracing/sampler.js';
import { startTracing } from '../app/tracing/setup.js';
import { runTraceId, traceIds as ids } from '../app/tracing/trace-ids.js';
import { xrayTraceId } from '../app/tracing/trace.js';
import { startApi, type InProcessApi } from './helpers/api.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_TIME, runJob } from './helpers/jobs.js';
import { startServer, type LogLine } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const exporter = new InMemorySpanExporter();
const tracing = startTracing(
  { TRACES: 'console', TRACES_SAMPLE_RATIO: 1, TRACES_FILE: '', METRICS_NAMESPACE: 'Test', SHUTDOWN_TIMEOUT_MS: 10_000 },
  createLogger('silent'),
  'test',
  exporter,
);

let db: TestDatabase;
let api: InProcessApi;

beforeAll(async () => {
  db = await createTestDatabase();
  api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY });
});
afterAll(async () => {
  await api.stop();
  await db.drop();
});

async function call(key: string, method: string, p: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${api.base}${p}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text.startsWith('{') ? JSON.parse(text) : text };
}

/** The spans exported since the last call (the queue is flushed first). */
async function takeSpans(): Promise<ReadableSpan[]> {
  await tracing.processor.flush(AbortSignal.timeout(5_000));
  const spans = exporter.getFinishedSpans();
  exporter.reset();
  return spans;
}

let seq = 0;
async function newAccountWithKey(): Promise<{ id: string; key: string; email: string }> {
  const email = `trace${++seq}-${Date.now()}@example.com`;
  const account = await call(ADMIN_KEY, 'POST', '/accounts', { name: 'Traced', email });
  expect(account.status).toBe(201);
  const minted = await call(ADMIN_KEY, 'POST', `/accounts/${account.body.id}/api-keys`);
  expect(minted.status).toBe(201);
  return { id: account.body.id, key: minted.body.key, email };
}

const traceIds = (spans: ReadableSpan[]) => new Set(spans.map((s) => s.spanContext().traceId));

describe('a request', () => {
  it('makes one trace: a server span named by its route, with its status and account, and its statements beneath', async () => {
    const { id, key } = await newAccountWithKey();
    await takeSpans();
    expect((await call(key, 'GET', `/accounts/${id}`)).status).toBe(200);
    const spans = await takeSpans();
    expect(traceIds(spans).size).toBe(1);
    const server = spans.find((s) => s.parentSpanContext === undefined)!;
    expect(server.name).toBe('GET /accounts/:id');
    expect(server.attributes).toMatchObject({ 'http.route': 'GET /accounts/:id', 'http.response.status_code': 200, 'account.id': id });
    const statements = spans.filter((s) => s.attributes['db.system.name'] === 'postgresql');
    expect(statements.length).toBeGreaterThan(0);
    for (const s of statements) expect(s.name).toMatch(/^(SELECT|EXECUTE|INSERT|UPDATE|DELETE)( [a-z_]+)?$/);
    // Every span hangs off the server span.
    const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]));
    for (const s of spans) {
      let at: ReadableSpan | undefined = s;
      while (at?.parentSpanContext) at = byId.get(at.parentSpanContext.spanId);
      expect(at).toBe(server);
    }
  });

  it('continues the caller\'s trace from traceparent, and from the ALB\'s Root-only X-Amzn-Trace-Id', async () => {
    const { id, key } = await newAccountWithKey();
    await takeSpans();
    const w3c = '0af7651916cd43dd8448eb211c80319c';
    await call(key, 'GET', `/accounts/${id}`, undefined, { traceparent: `00-${w3c}-b7ad6b7169203331-01` });
    expect([...traceIds(await takeSpans())]).toEqual([w3c]);
    const alb = '5759e988bd862e3fe1be46a994272793';
    await call(key, 'GET', `/accounts/${id}`, undefined, { 'x-amzn-trace-id': `Root=1-${alb.slice(0, 8)}-${alb.slice(8)}` });
    const spans = await takeSpans();
    expect(traceIds(spans).size).toBe(1);
    expect(xrayTraceId([...traceIds(spans)][0]!)).toBe(`1-${alb.slice(0, 8)}-${alb.slice(8)}`);
  });

  it('puts no key, password, body or email in any attribute or event, across a fuzzed run', async () => {
    const secrets: string[] = [ADMIN_KEY, 'test-login-password'];
    const { id, key, email } = await newAccountWithKey();
    secrets.push(key, email);
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 6, maxLength: 40 }), fc.emailAddress(), fc.string({ minLength: 6, maxLength: 30 }), async (name, mail, idem) => {
        const marker = `${name}|${mail}|${idem}`;
        secrets.push(mail);
        if (name.trim().length >= 6) secrets.push(name);
        if (idem.trim().length >= 6) secrets.push(idem);
        await call(ADMIN_KEY, 'POST', '/accounts', { name, email: mail });
        await call(key, 'POST', `/accounts/${id}/usage`, { metric: 'api.calls', quantity: 1, idempotencyKey: idem });
        await call(key, 'POST', `/accounts/${id}/usage`, `{"metric":${JSON.stringify(marker)}`);
        await call(`sbk_${'x'.repeat(43)}`, 'GET', `/accounts/${id}?email=${encodeURIComponent(mail)}`);
      }),
      { numRuns: 25 },
    );
    const spans = await takeSpans();
    expect(spans.length).toBeGreaterThan(100);
    const values = spans.flatMap((s) => [s.name, s.status.message ?? '', ...Object.values(s.attributes), ...s.events.flatMap((e) => [e.name, ...Object.values(e.attributes ?? {})])]).map(String);
    const leaks = secrets.filter((secret) => values.some((v) => v.includes(secret)));
    expect(leaks).toEqual([]);
  });

  it('counts a made-up key as the caller\'s mistake, not a failure: no span of it is marked failed', async () => {
    const { id } = await newAccountWithKey();
    await takeSpans();
    expect((await call(`sbk_${'x'.repeat(43)}`, 'GET', `/accounts/${id}`)).status).toBe(401);
    const spans = await takeSpans();
    expect(spans.length).toBeGreaterThan(0);
    expect(spans.filter((s) => s.status.code === SpanStatusCode.ERROR).map((s) => s.name)).toEqual([]);
  });

  it.each([
    ['an all-zero ALB Root', { 'x-amzn-trace-id': 'Root=1-00000000-000000000000000000000000' }],
    ['an all-zero ALB Root beside a Self', { 'x-amzn-trace-id': 'Self=1-67891234-12456789abcdef012345678;Root=1-00000000-000000000000000000000000' }],
    ['an upper-case X-Amzn-Trace-Id with a Parent', { 'x-amzn-trace-id': 'Root=1-5759E988-BD862E3FE1BE46A9942727A0;Parent=53995C3F42CD8AD8;Sampled=1' }],
    ['an upper-case traceparent', { traceparent: '00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01' }],
  ])('starts a trace of its own, every span under its server span, for %s', async (_name, headers) => {
    const { id, key } = await newAccountWithKey();
    await takeSpans();
    expect((await call(key, 'GET', `/accounts/${id}`, undefined, headers)).status).toBe(200);
    const spans = await takeSpans();
    expect(traceIds(spans).size).toBe(1);
    const traceId = [...traceIds(spans)][0]!;
    expect(traceId).toMatch(/^(?!0{32})[0-9a-f]{32}$/);
    expect(Object.values(headers).join().toLowerCase()).not.toContain(traceId.slice(8));
    expect(spans.filter((s) => s.parentSpanContext === undefined).map((s) => s.name)).toEqual(['GET /accounts/:id']);
  });

  it('leaves the caller\'s tracestate out of its spans', async () => {
    const { id, key } = await newAccountWithKey();
    await takeSpans();
    const w3c = '4bf92f3577b34da6a3ce929d0e0e4736';
    await call(key, 'GET', `/accounts/${id}`, undefined, { traceparent: `00-${w3c}-00f067aa0ba902b7-01`, tracestate: 'caller=tracestate-marker,other=x' });
    const spans = await takeSpans();
    expect([...traceIds(spans)]).toEqual([w3c]);
    expect(spans.map((s) => s.spanContext().traceState?.serialize() ?? '')).toEqual(spans.map(() => ''));
  });

  it('gives a request cut off before its answer no status code, and says it was cut off', async () => {
    const { id, key } = await newAccountWithKey();
    await takeSpans();
    const { port, hostname } = new URL(api.base);
    const socket = connect(Number(port), hostname);
    await new Promise((resolve) => socket.once('connect', resolve));
    // Node answers "100 Continue" as it hands the request to the app: its span has begun.
    const continued = new Promise((resolve) => socket.on('data', (d: Buffer) => d.toString().includes('100 Continue') && resolve(undefined)));
    socket.write(`POST /accounts/${id}/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n`);
    await continued;
    socket.write('{"metric":');
    socket.destroy();
    let server: ReadableSpan | undefined;
    for (let i = 0; i < 100 && server === undefined; i++) {
      server = (await takeSpans()).find((s) => s.parentSpanContext === undefined && s.attributes['http.request.method'] === 'POST');
      if (server === undefined) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(server?.attributes['http.response.status_code']).toBeUndefined();
    expect(server?.events.map((e) => e.name)).toEqual(['cut off before an answer']);
  });
});

describe('ids', () => {
  it('makes trace ids in X-Ray\'s format (the time in epoch seconds, then 24 random hex digits) and valid span ids, none repeated', () => {
    const from = Math.floor(Date.now() / 1_000);
    // Enough ids to use several draws of random bytes.
    const traces = Array.from({ length: 5_000 }, () => ids.generateTraceId());
    const spans = Array.from({ length: 5_000 }, () => ids.generateSpanId());
    const to = Math.floor(Date.now() / 1_000);
    for (const id of traces) {
      expect(id).toMatch(/^[0-9a-f]{32}$/);
      expect(Number.parseInt(id.slice(0, 8), 16)).toBeGreaterThanOrEqual(from);
      expect(Number.parseInt(id.slice(0, 8), 16)).toBeLessThanOrEqual(to);
    }
    for (const id of spans) expect(id).toMatch(/^(?!0{16})[0-9a-f]{16}$/);
    expect(new Set(traces.map((id) => id.slice(8))).size).toBe(traces.length);
    expect(new Set(spans).size).toBe(spans.length);
  });
});

describe('keeping', () => {
  it('exports an unsampled trace whole when one of its spans failed, and lets a clean one go', async () => {
    const kept = new InMemorySpanExporter();
    const processor = new KeepingProcessor(kept, () => {});
    const tracer = new BasicTracerProvider({ sampler: keepingSampler(0), spanProcessors: [processor] }).getTracer('t');
    for (const fail of [false, true]) {
      const root = tracer.startSpan(fail ? 'failing' : 'clean');
      const child = tracer.startSpan('child', {}, otelTrace.setSpan(ROOT_CONTEXT, root));
      if (fail) child.setStatus({ code: 2, message: 'boom' });
      child.end();
      root.end();
    }
    await processor.flush(AbortSignal.timeout(5_000));
    expect(kept.getFinishedSpans().map((s) => s.name).sort()).toEqual(['child', 'failing']);
    await processor.shutdown();
  });

  it.each([
    ['hangs', (_spans: ReadableSpan[], _done: (r: { code: number }) => void) => {}],
    ['refuses', (_spans: ReadableSpan[], done: (r: { code: number }) => void) => done({ code: ExportResultCode.FAILED })],
  ] as const)('counts every span a flush could not send, when its exporter %s', async (_kind, exportFn) => {
    const reported: number[] = [];
    const processor = new KeepingProcessor({ export: exportFn, shutdown: async () => {} }, (n) => reported.push(n));
    const tracer = new BasicTracerProvider({ sampler: keepingSampler(1), spanProcessors: [processor] }).getTracer('t');
    const spans = MAX_BATCH + 10;
    for (let i = 0; i < spans; i++) tracer.startSpan(`s${i}`).end();
    await processor.flush(AbortSignal.timeout(200));
    expect(reported.reduce((a, b) => a + b, 0)).toBe(spans);
  });
});

describe('the container', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'traces-'));
  const spansIn = (file: string) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { traceId: string; spanId: string; name: string; parentSpanId?: string; durationMs: number; status: { code: number; message?: string }; attributes: Record<string, unknown> });

  it('writes a request\'s trace id on its access log line, and its spans under that id', async () => {
    const file = path.join(dir, 'server.jsonl');
    const { id, key } = await newAccountWithKey();
    const server = await startServer({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ENABLE_WORKERS: 'false', TRACES: 'file', TRACES_FILE: file, TRACES_SAMPLE_RATIO: '1' });
    // A failed assertion must not leave it serving.
    onTestFinished(() => void server.kill('SIGKILL'));
    const res = await fetch(`${server.url}/accounts/${id}`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    const access = await server.waitForLog((l: LogLine) => l.msg === 'request' && l.path === `/accounts/${id}`);
    expect(access.trace_id).toMatch(/^1-[0-9a-f]{8}-[0-9a-f]{24}$/);
    // The API's pool opens its connections inside requests (this one's, a burst's); idle
    // again, they die: those lines belong to no request.
    const burst = await Promise.all(Array.from({ length: 12 }, () => fetch(`${server.url}/accounts/${id}`, { headers: { authorization: `Bearer ${key}` } })));
    expect(burst.map((r) => r.status)).toEqual(burst.map(() => 200));
    const killed = await db.withClient((c) =>
      c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()`, [applicationName('api')]),
    );
    expect(killed.rowCount).toBeGreaterThan(0);
    const lost = () => server.logs.filter((l) => /^(idle )?(a )?database connection( in use)? failed/.test(l.msg));
    await server.waitForLog(() => lost().length >= killed.rowCount!);
    expect(lost().map((l) => l.trace_id)).toEqual(lost().map(() => undefined));
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    const steps = server.logs.filter((l) => /^shutdown: \w+ done in/.test(l.msg)).map((l) => l.step);
    expect(steps).toEqual(['readiness', 'http', 'workers', 'pool', 'traces']);
    const spans = spansIn(file).filter((s) => s.traceId === access.trace_id);
    expect(spans.find((s) => s.parentSpanId === undefined)?.name).toBe('GET /accounts/:id');
    expect(spans.length).toBeGreaterThan(1);
    const drain = spansIn(file).find((s) => s.name === 'drain') as { events?: { name: string }[] } | undefined;
    expect(drain?.events?.map((e) => e.name)).toEqual(['listener closed', 'idle sockets closed', 'last request answered']);
  });

  it('exports nothing for a request the sampler did not pick, unless it fails: then its server span alone is kept, under its access line\'s trace id', async () => {
    const file = path.join(dir, 'unsampled.jsonl');
    const { id, key } = await newAccountWithKey();
    const server = await startServer({
      DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ENABLE_WORKERS: 'false', TRACES: 'file', TRACES_FILE: file, TRACES_SAMPLE_RATIO: '0',
      // The statement is cancelled (by its timeout) before the deadline answers: the span names it.
      REQUEST_DEADLINE_MS: '3000', DB_STATEMENT_TIMEOUT_MS: '1000', DB_POOL_WAIT_MS: '1500',
    });
    // A failed assertion must not leave it serving.
    onTestFinished(() => void server.kill('SIGKILL'));
    const get = async () => {
      const res = await fetch(`${server.url}/accounts/${id}`, { headers: { authorization: `Bearer ${key}` } });
      const requestId = res.headers.get('x-request-id');
      await res.arrayBuffer();
      return { status: res.status, access: await server.waitForLog((l: LogLine) => l.msg === 'request' && l.requestId === requestId) };
    };
    const clean = await get();
    expect(clean.status).toBe(200);
    // A made-up key is the caller's mistake: nothing kept. An X-Amzn-Trace-Id that says sampled is followed.
    const madeUp = await fetch(`${server.url}/accounts/${id}`, { headers: { authorization: `Bearer sbk_${'x'.repeat(43)}` } });
    expect(madeUp.status).toBe(401);
    const madeUpAccess = await server.waitForLog((l: LogLine) => l.msg === 'request' && l.requestId === madeUp.headers.get('x-request-id'));
    const root = '1-5759e988-bd862e3fe1be46a994272793';
    const asked = await fetch(`${server.url}/accounts/${id}`, { headers: { authorization: `Bearer ${key}`, 'x-amzn-trace-id': `Root=${root};Sampled=1` } });
    expect(asked.status).toBe(200);
    await server.waitForLog((l: LogLine) => l.msg === 'request' && l.trace_id === root);
    // A lock held past the statement's timeout: it answers 503.
    const failed = await db.withClient(async (c) => {
      await c.query('BEGIN');
      await c.query('LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE');
      try {
        return await get();
      } finally {
        await c.query('ROLLBACK');
      }
    });
    expect(failed.status).toBe(503);
    server.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    for (const { access } of [clean, failed]) {
      expect(access.trace_id).toMatch(/^1-[0-9a-f]{8}-[0-9a-f]{24}$/);
      expect(access.span_id).toMatch(/^[0-9a-f]{16}$/);
    }
    const spans = spansIn(file);
    expect(spans.filter((s) => s.traceId === clean.access.trace_id)).toEqual([]);
    expect(spans.filter((s) => s.traceId === madeUpAccess.trace_id)).toEqual([]);
    expect(spans.filter((s) => s.traceId === root).map((s) => s.name)).toContain('GET /accounts/:id');
    const kept = spans.filter((s) => s.traceId === failed.access.trace_id);
    expect(kept.map((s) => s.name)).toEqual(['GET /accounts/:id']);
    // Made as the request ended, under the ids its log lines carry, and from its start.
    expect(kept[0]!.spanId).toBe(failed.access.span_id);
    expect(kept[0]!.attributes['http.response.status_code']).toBe(503);
    expect(kept[0]!.durationMs).toBeGreaterThanOrEqual(900);
    // What failed inside it (the statement its timeout cancelled), not only the status it led to.
    expect(kept[0]!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'SQLSTATE 57014' });
  });

  it('makes one trace of a job run, its id derived from the run key, with its attempt, and on the run\'s log lines', async () => {
    const file = path.join(dir, 'job.jsonl');
    const execution = 'arn:aws:states:eu-west-1:123456789012:execution:Test-billing-run:run-1';
    const { code, logs } = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { TRACES: 'file', TRACES_FILE: file, TRACES_SAMPLE_RATIO: '0', SFN_EXECUTION_ARN: execution });
    expect(code).toBe(0);
    const spans = spansIn(file);
    const expected = xrayTraceId(runTraceId('billing-run', new Date(NIGHTLY_TIME)));
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([expected]));
    const root = spans.find((s) => s.parentSpanId === undefined)!;
    expect(root.name).toBe('job billing-run');
    expect(root.attributes['job.run_key']).toBe(`billing-run@${NIGHTLY_TIME}`);
    expect(root.attributes['aws.step_functions.execution.arn']).toBe(execution);
    const attempt = spans.find((s) => s.name === 'billing-run attempt')!;
    expect(attempt.attributes['job.attempt']).toBe(1);
    const batches = spans.filter((s) => s.name === 'billing-run batch');
    expect(batches.length).toBeGreaterThan(0);
    for (const b of batches) expect(b.parentSpanId).toBe(attempt.spanId);
    // Each range its batches run side by side is a span of the attempt, its statements within it.
    const ranges = spans.filter((s) => s.name === 'billing-run range');
    expect(ranges.length).toBeGreaterThan(0);
    for (const r of ranges) expect(r.parentSpanId).toBe(attempt.spanId);
    const parentOf = new Map(spans.map((s) => [s.spanId, s.parentSpanId]));
    const inRange = (s: { spanId: string }) => {
      for (let id = parentOf.get(s.spanId); id !== undefined; id = parentOf.get(id)) if (ranges.some((r) => r.spanId === id)) return true;
      return false;
    };
    // Each range's transaction: its lock, its checkpoint (and its invoices, when it bills any).
    const transactions = spans.filter((s) => s.name === 'tenancy transaction' && ranges.some((r) => r.spanId === s.parentSpanId));
    expect(transactions).toHaveLength(ranges.length);
    const within = spans.filter(inRange).map((s) => s.name);
    expect(within.filter((n) => n === 'SELECT accounts')).toHaveLength(ranges.length);
    expect(within.filter((n) => n === 'SET job_runs')).toHaveLength(ranges.length);
    expect(logs.find((l) => /attempt 1 started/.test(l.msg))?.trace_id).toBe(expected);
  });

  it('marks a failed attempt\'s batch and attempt spans failed, naming the error\'s kind, never its message', async () => {
    const file = path.join(dir, 'job-failed.jsonl');
    const { code } = await runJob(db, ['data-cleanup', '--scheduled-time', '2025-03-11T06:00:00Z'], { TRACES: 'file', TRACES_FILE: file, JOB_FAULT_INJECTION: 'fail-attempts=all' });
    expect(code).toBe(1);
    const spans = spansIn(file);
    const failedOnes = (name: string) => spans.filter((s) => s.name === name).map((s) => s.status);
    const attempts = failedOnes('data-cleanup attempt');
    expect(attempts.length).toBeGreaterThan(1);
    for (const status of [...attempts, ...failedOnes('data-cleanup batch')]) expect(status).toEqual({ code: SpanStatusCode.ERROR, message: 'Error' });
    expect(failedOnes('data-cleanup batch').length).toBe(attempts.length);
  });

  it('counts the spans its last export could not send, when the exporter refuses at the end of a run', async () => {
    const otlp = await endpoint('refuses');
    const { code, logs } = await runJob(db, ['billing-run', '--scheduled-time', '2025-01-03T02:00:00Z'], {
      TRACES: 'xray', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_XRAY: otlp.url, AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
    });
    expect(code).toBe(0);
    const dropped = logs.filter((l) => typeof l.TracesDropped === 'number').reduce((n, l) => n + (l.TracesDropped as number), 0);
    // The run's span, its attempt's and at least one batch's.
    expect(dropped).toBeGreaterThanOrEqual(3);
  });

  /** An OTLP endpoint that never answers, or a port where nothing listens. */
  async function endpoint(kind: 'hangs' | 'refuses'): Promise<{ url: string; close(): void }> {
    const server: Server = createServer(() => {});
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    if (kind === 'refuses') await new Promise((resolve) => server.close(resolve));
    return { url: `http://127.0.0.1:${port}`, close: () => server.closeAllConnections?.() ?? server.close() };
  }

  it.each(['hangs', 'refuses'] as const)('answers requests promptly and drains cleanly when the exporter %s', async (kind) => {
    const otlp = await endpoint(kind);
    const { id, key } = await newAccountWithKey();
    const server = await startServer({
      DATABASE_URL: db.url,
      ADMIN_API_KEY: ADMIN_KEY,
      ENABLE_WORKERS: 'false',
      TRACES: 'xray',
      TRACES_SAMPLE_RATIO: '1',
      AWS_REGION: 'eu-west-1',
      AWS_ENDPOINT_URL_XRAY: otlp.url,
      AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE',
      AWS_SECRET_ACCESS_KEY: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
      SHUTDOWN_TIMEOUT_MS: '10000',
      // The loop below runs for a time, not a count: a fast machine must not meet the key's rate limit.
      RATE_LIMIT_REQUESTS: '0',
    });
    // A failed assertion must not leave it serving.
    onTestFinished(() => void server.kill('SIGKILL'));
    // Past the first export's tick: later requests queue behind an export that is stuck or failed.
    const slowest = { ms: 0 };
    const until = Date.now() + 2_500;
    while (Date.now() < until) {
      const t0 = performance.now();
      const res = await fetch(`${server.url}/accounts/${id}`, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
      slowest.ms = Math.max(slowest.ms, performance.now() - t0);
    }
    // Generous for a loaded machine; a request waiting on the exporter would take its 5-s timeout.
    expect(slowest.ms).toBeLessThan(2_000);
    // The spans that could not go out are counted, in the metric the dashboard and the runbook read.
    const dropped = await server.waitForLog((l) => typeof l.TracesDropped === 'number', 30_000);
    expect(dropped.TracesDropped).toBeGreaterThan(0);
    const t0 = Date.now();
    server.kill('SIGTERM');
    const { code } = await server.exited;
    otlp.close();
    expect(code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
  });
});
