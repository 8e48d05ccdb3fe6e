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

/** The trace id of a Root-only X-Amzn-Trace-Id (the ALB's), or undefined. */
export function albRoot(header: unknown): string | undefined {
  if (typeof header !== 'string' || /(?:^|;)\s*Parent=/.test(header)) return undefined;
  const m = ALB_ROOT.exec(header);
  return m ? `${m[1]}${m[2]}` : undefined;
}

/** The context a request's span starts in: its caller's, or ROOT_CONTEXT. */
export function callerContext(headers: Record<string, string | string[] | undefined>): Context {
  // A request from neither the ALB nor a traced caller: nothing to extract.
  if (headers.traceparent === undefined && headers['x-amzn-trace-id'] === undefined) return ROOT_CONTEXT;
  const extracted = propagation.extract(ROOT_CONTEXT, headers);
  if (trace.getSpanContext(extracted) !== undefined) return extracted;
  return ROOT_CONTEXT;
}

export { context, TraceFlags };
