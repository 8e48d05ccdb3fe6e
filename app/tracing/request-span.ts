/**
 * A request's server span: started in its caller's trace (app/tracing/propagation.ts), named
 * after the route's template, and ended with the status and the account it ran for. Its
 * attributes are the method, the route template, the status and the account id: never the
 * path's values beyond the template, a header, a key, a body or an email.
 *
 * The sampling decision is made here, before any span: a sampled request gets the SDK's span
 * at once; any other gets an UnsampledSpan (app/tracing/unsampled-span.ts), and its SDK span
 * is made only if it fails, when it ends.
 */
import { context, SpanKind, SpanStatusCode, trace, type Context, type Span, type SpanOptions } from '@opentelemetry/api';
import type { Request, Response } from 'express';
import type { Identity } from '../tenancy.js';
import { routeOf } from '../api/route.js';
import { albRoot, callerContext } from './propagation.js';
import { KEEP_TRACE, rootSampled, sampleRatio, spanFields, tracer } from './trace.js';
import { traceIds, withIds } from './trace-ids.js';
import { UnsampledSpan } from './unsampled-span.js';

export interface RequestSpan {
  /** Runs `fn` with the request's span current. */
  run<T>(fn: () => T): T;
  /** The request's trace fields for a log line written outside `run` (its access line). */
  logFields(): Record<string, string>;
  /** Ends the span with what the response says. */
  end(): void;
}

export function requestSpan(req: Request, res: Response): RequestSpan {
  const parent = callerContext(req.headers);
  const caller = trace.getSpanContext(parent);
  const alb = caller === undefined ? albRoot(req.headers['x-amzn-trace-id']) : undefined;
  const traceId = caller?.traceId ?? alb?.traceId ?? traceIds.generateTraceId();
  // The ALB's header has no parent for the SDK's sampler to read its flag from: the span says it.
  const first: Span = alb?.sampled
    ? start({ attributes: { [KEEP_TRACE]: true } })
    : rootSampled(caller, traceId, sampleRatio())
      ? start()
      : new UnsampledSpan(traceId, traceIds.generateSpanId());
  const ctx: Context = trace.setSpan(parent, first);
  return {
    run: (fn) => context.with(ctx, fn),
    logFields: () => spanFields(first),
    end() {
      const span = first instanceof UnsampledSpan ? keptSpan(first) : first;
      if (span === undefined) return;
      describe(span, req, res);
      // What failed inside, rather than only the status it led to.
      if (first instanceof UnsampledSpan && first.failure !== undefined) span.setStatus(first.failure);
      span.end();
    },
  };

  function start(options: SpanOptions = {}, spanId?: string): Span {
    const attributes = { 'http.request.method': req.method, ...options.attributes };
    return withIds(traceId, spanId, () => tracer.startSpan(req.method, { kind: SpanKind.SERVER, ...options, attributes }, parent));
  }

  /** The SDK span of a request not sampled, made now if it failed (under its ids, from its start), always exported; else none. */
  function keptSpan(unsampled: UnsampledSpan): Span | undefined {
    if (res.statusCode < 500 && unsampled.failure === undefined) return undefined;
    return start({ startTime: unsampled.startedAt, attributes: { [KEEP_TRACE]: true } }, unsampled.spanContext().spanId);
  }
}

/** Names `span` by its route and sets what the response says. */
function describe(span: Span, req: Request, res: Response): void {
  const route = routeOf(req);
  span.updateName(route === 'unmatched' ? req.method : route);
  span.setAttribute('http.route', route);
  // A request cut off before its answer has no status: `res.statusCode` would say 200.
  const status = res.headersSent ? res.statusCode : undefined;
  if (status !== undefined) span.setAttribute('http.response.status_code', status);
  const identity = res.locals.identity as Identity | undefined;
  if (identity?.kind === 'operator') span.setAttribute('enduser.role', 'operator');
  const accountId = identity?.kind === 'account' || identity?.kind === 'key' ? identity.accountId : undefined;
  if (accountId !== undefined) span.setAttribute('account.id', accountId);
  if (status !== undefined && status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: `answered ${status}` });
  if (status === undefined) span.addEvent('cut off before an answer');
  else if (!res.writableFinished) span.addEvent('response cut short');
}
