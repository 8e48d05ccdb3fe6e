/**
 * What the rest of the container uses to trace: the tracer, spans around async work, and the
 * current trace's ids for the log lines. Only @opentelemetry/api, which does nothing until a
 * tracer provider is registered (app/tracing/setup.ts, when TRACES is not off): with tracing
 * off, a span here is the API's shared no-op span, and the log lines carry no ids.
 */
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace, type Attributes, type Span, type SpanContext } from '@opentelemetry/api';

export type { Attributes, Span };

export const tracer = trace.getTracer('ecs-saas-backend');

/** The current span's trace id in X-Ray's format (1-<8 hex>-<24 hex>), as CloudWatch and X-Ray show it. */
export function xrayTraceId(hex: string): string {
  return `1-${hex.slice(0, 8)}-${hex.slice(8)}`;
}

/** A root span's attribute that keeps its whole trace, sampled or not (a job run, a drain). */
export const KEEP_TRACE = 'trace.keep';

/**
 * The log line's trace fields (pino's mixin): `trace_id` in X-Ray's format and `span_id`,
 * the names CloudWatch's trace-to-log correlation reads; nothing outside a span. A request
 * the sampler did not pick has them too (app/tracing/unsampled-span.ts): its span is kept
 * if it fails, under those ids.
 */
export function traceFields(): Record<string, string> {
  const span = trace.getActiveSpan();
  // A new object each time: pino merges the line's fields into it.
  return span === undefined ? {} : spanFields(span);
}

/** `span`'s trace fields, as `traceFields` gives them for the current span. */
export function spanFields(span: Span): Record<string, string> {
  const { traceId, spanId } = span.spanContext();
  return { trace_id: xrayTraceId(traceId), span_id: spanId };
}

/**
 * Whether a local root (a request's span) is sampled: its caller's context says sampled, or
 * its trace id falls in `ratio`, judged by the id's random end, not X-Ray's timestamp at its start.
 */
export function rootSampled(caller: SpanContext | undefined, traceId: string, ratio: number): boolean {
  if (caller !== undefined && (caller.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED) return true;
  return Number.parseInt(traceId.slice(-8), 16) < Math.floor(ratio * 0x1_0000_0000);
}

/** Whether `span`'s trace is sampled, every span of it exported. */
export function isSampled(span: Span): boolean {
  return (span.spanContext().traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;
}

/**
 * Marks `span` failed, saying what kind of error it was and never its message: a database
 * error's message can quote a value it refused (`invalid input syntax for type bigint: "..."`),
 * which may be a caller's input. A database error is named by its SQLSTATE.
 */
export function failSpan(span: Span, err: unknown): void {
  const code = (err as { code?: unknown } | undefined)?.code;
  const message = typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? `SQLSTATE ${code}` : err instanceof Error ? err.name : 'error';
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}

/**
 * Whether `err` is the caller's mistake (it says it answers 4xx: an unknown key, a bad input),
 * which is no failure of the service: it keeps no trace, or an anonymous caller could fill the
 * export queue with made-up keys and crowd out the real failures.
 */
export function callerFault(err: unknown): boolean {
  const status = (err as { status?: unknown } | undefined)?.status;
  return typeof status === 'number' && status >= 400 && status < 500;
}

/** Marks `span` failed for `err`, unless `err` is the caller's mistake. */
function failUnlessCallers(span: Span, err: unknown): void {
  if (!callerFault(err)) failSpan(span, err);
}

/**
 * Runs `fn` in a new child span of the current one, ended when `fn` settles; a rejection marks it
 * failed, unless it is the caller's mistake (`callerFault`).
 *
 * In a trace the sampler did not pick (most requests: TRACES_SAMPLE_RATIO), no child is made:
 * `fn` runs in the current span, and a rejection marks that span failed, so the trace is still
 * kept (its server span, naming the error) while a clean one costs one span, not one per
 * statement. A sampled trace, a job run and the drain get every child.
 */
export function inSpan<T>(name: string, attributes: Attributes, fn: (span: Span) => Promise<T>, kind: SpanKind = SpanKind.INTERNAL): Promise<T> {
  const unsampled = attributes[KEEP_TRACE] === true ? undefined : unsampledSpan();
  if (unsampled !== undefined) return failing(unsampled, fn);
  return tracer.startActiveSpan(name, { attributes, kind }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failUnlessCallers(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/** The current span when its trace is not sampled (most requests): work in it makes no child span. */
export function unsampledSpan(): Span | undefined {
  const current = trace.getActiveSpan();
  return current !== undefined && !isSampled(current) ? current : undefined;
}

/** Runs `fn` in `span`, marking it failed if `fn` rejects: a trace not sampled is then kept. */
export async function failing<T>(span: Span, fn: (span: Span) => Promise<T>): Promise<T> {
  try {
    return await fn(span);
  } catch (err) {
    failUnlessCallers(span, err);
    throw err;
  }
}

/**
 * Runs `fn` outside any trace: for a callback that runs in the context of whatever opened its
 * resource (a pooled connection's 'error', in the request that opened the connection), so that
 * its log line carries no ids of a request long finished.
 */
export function outsideTraces<T>(fn: () => T): T {
  return context.with(ROOT_CONTEXT, fn);
}

/** An event on the current span, if one is recording. */
export function spanEvent(name: string, attributes?: Attributes): void {
  trace.getActiveSpan()?.addEvent(name, attributes);
}

/** Adds events to the span current now, from callbacks that run in other contexts (a socket's 'close'). */
export function eventsOfCurrentSpan(): (name: string, attributes?: Attributes) => void {
  const span = trace.getActiveSpan();
  return (name, attributes) => span?.addEvent(name, attributes);
}

/** TRACES_SAMPLE_RATIO once tracing is on; undefined while it is off. */
let ratio: number | undefined;

/** True once tracing is on: the request path starts its spans only then, so off costs nothing. */
export function tracingOn(): boolean {
  return ratio !== undefined;
}

/** The share of new traces sampled (TRACES_SAMPLE_RATIO); 0 while tracing is off. */
export function sampleRatio(): number {
  return ratio ?? 0;
}

/** What the "traces" shutdown step and the settings need from the configuration. */
export interface TracingConfig {
  readonly TRACES: 'off' | 'console' | 'file' | 'xray';
  readonly TRACES_SAMPLE_RATIO: number;
  readonly TRACES_FILE: string;
  readonly METRICS_NAMESPACE: string;
  readonly SHUTDOWN_TIMEOUT_MS: number;
}

/**
 * Starts tracing as TRACES says, after the process's first log line; returns its shutdown
 * step ("traces", to run after the pool's), or undefined when off. The SDK is only loaded here.
 */
export async function startTracingFor(config: TracingConfig, logger: import('../logger.js').Logger, service: string): Promise<import('../shutdown.js').ShutdownStep | undefined> {
  if (config.TRACES === 'off') return undefined;
  const { exporterFor, startTracing } = await import('./setup.js');
  return startTracing(config, logger, service, await exporterFor(config)).step;
}

/** Called by startTracing (app/tracing/setup.ts), which the tests call with an exporter of their own. */
export function markTracingOn(sampleRatio: number): void {
  ratio = sampleRatio;
}
