/**
 * A caller's trace, continued: W3C `traceparent` (a client's OpenTelemetry), else
 * `X-Amzn-Trace-Id` (another AWS service, or the ALB). The ALB's header has only a Root (no
 * Parent span): the request's span then takes that trace id, so the ALB's access log and the
 * trace share it, as a new root of its own.
 */
import { context, propagation, ROOT_CONTEXT, trace, TraceFlags, type Context } from '@opentelemetry/api';
import { CompositePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { AWSXRayPropagator } from '@opentelemetry/propagator-aws-xray';

/** X-Ray first, W3C last: when a caller sends both, its traceparent wins. */
export const propagator = new CompositePropagator({ propagators: [new AWSXRayPropagator(), new W3CTraceContextPropagator()] });

const ALB_ROOT = /(?:^|;)\s*Root=1-([0-9a-f]{8})-([0-9a-f]{24})(?:;|$)/;
const SAMPLED = /(?:^|;)\s*Sampled=1(?:;|$)/;
/** Ids as W3C and X-Ray write them: lower-case hex, not all zeros. */
const TRACE_ID = /^(?!0{32})[0-9a-f]{32}$/;
const SPAN_ID = /^(?!0{16})[0-9a-f]{16}$/;

/** A Root-only X-Amzn-Trace-Id (the ALB's): its trace id, and whether it says sampled. */
export interface AlbRoot {
  readonly traceId: string;
  readonly sampled: boolean;
}

/** The Root of a Root-only X-Amzn-Trace-Id (the ALB's), or undefined when there is none or it is not a valid id. */
export function albRoot(header: unknown): AlbRoot | undefined {
  if (typeof header !== 'string' || /(?:^|;)\s*Parent=/.test(header)) return undefined;
  const m = ALB_ROOT.exec(header);
  const traceId = m ? `${m[1]}${m[2]}` : undefined;
  return traceId !== undefined && TRACE_ID.test(traceId) ? { traceId, sampled: SAMPLED.test(header) } : undefined;
}

/**
 * The context a request's span starts in: its caller's, or ROOT_CONTEXT when it sent none or
 * ids not written as the standards write them (upper-case, all zeros). The caller's
 * `tracestate` is left out: it is a header of the caller's, and would be copied onto every span.
 */
export function callerContext(headers: Record<string, string | string[] | undefined>): Context {
  // A request from neither the ALB nor a traced caller: nothing to extract.
  if (headers.traceparent === undefined && headers['x-amzn-trace-id'] === undefined) return ROOT_CONTEXT;
  const caller = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, headers));
  if (caller === undefined || !TRACE_ID.test(caller.traceId) || !SPAN_ID.test(caller.spanId)) return ROOT_CONTEXT;
  const { traceState: _dropped, ...ids } = caller;
  return trace.setSpanContext(ROOT_CONTEXT, ids);
}

export { context, TraceFlags };
