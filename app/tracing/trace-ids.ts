/**
 * Trace and span ids: X-Ray's format (the first 8 hex digits of a trace id are its start in
 * epoch seconds), made by the tracer provider and, for a request the sampler did not pick,
 * by the request's span itself (app/tracing/unsampled-span.ts), from the same generator.
 *
 * A job run's trace id comes from its run key (job + scheduled time), so every process that
 * works on the run (a retry, a rerun) writes to the same trace, and the operator can find it
 * from the run key alone (`runTraceId`): X-Ray's first 8 hex digits are the scheduled time in
 * epoch seconds, the other 24 the start of the run key's SHA-256.
 */
import { createHash } from 'node:crypto';
import { AWSXRayIdGenerator } from '@opentelemetry/id-generator-aws-xray';
import type { IdGenerator } from '@opentelemetry/sdk-trace-base';

export function runTraceId(job: string, scheduledTime: Date): string {
  const seconds = Math.floor(scheduledTime.getTime() / 1_000).toString(16).padStart(8, '0').slice(-8);
  return seconds + createHash('sha256').update(`${job}@${scheduledTime.toISOString()}`).digest('hex').slice(0, 24);
}

const xray = new AWSXRayIdGenerator();
let nextTraceId: string | undefined;
let nextSpanId: string | undefined;

/**
 * The next span started synchronously inside `fn` gets trace id `traceId` (when it is a root)
 * and, if given, span id `spanId`.
 */
export function withIds<T>(traceId: string, spanId: string | undefined, fn: () => T): T {
  nextTraceId = traceId;
  nextSpanId = spanId;
  try {
    return fn();
  } finally {
    nextTraceId = nextSpanId = undefined;
  }
}

/** The next root span started synchronously inside `fn` gets trace id `traceId`. */
export const withTraceId = <T>(traceId: string, fn: () => T): T => withIds(traceId, undefined, fn);

/** The tracer provider's ids: X-Ray's, except those set by `withIds`. */
export const traceIds: IdGenerator = {
  generateTraceId: () => {
    const id = nextTraceId ?? xray.generateTraceId();
    nextTraceId = undefined;
    return id;
  },
  generateSpanId: () => {
    const id = nextSpanId ?? xray.generateSpanId();
    nextSpanId = undefined;
    return id;
  },
};
