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
import { createHash, randomFillSync } from 'node:crypto';
import type { IdGenerator } from '@opentelemetry/sdk-trace-base';

export function runTraceId(job: string, scheduledTime: Date): string {
  const seconds = Math.floor(scheduledTime.getTime() / 1_000).toString(16).padStart(8, '0').slice(-8);
  return seconds + createHash('sha256').update(`${job}@${scheduledTime.toISOString()}`).digest('hex').slice(0, 24);
}

/**
 * Random hex digits for the ids, drawn from the OS 4 KiB at a time: a request's two ids are
 * two slices of a string, where drawing them a few bytes at a time (Math.random per 4 bytes,
 * each written into a buffer and hex-encoded) was about a sixth of what tracing costs an
 * unsampled request.
 */
const RANDOM_BYTES = 4_096;
const random = Buffer.allocUnsafe(RANDOM_BYTES);
let hex = '';
let used = 0;

function randomHex(digits: number): string {
  if (used + digits > hex.length) {
    hex = randomFillSync(random).toString('hex');
    used = 0;
  }
  return hex.slice(used, (used += digits));
}

/** X-Ray's trace id: the time in epoch seconds (8 hex digits), then 24 random ones. */
let second = 0;
let secondHex = '';

function newTraceId(): string {
  const now = Math.floor(Date.now() / 1_000);
  if (now !== second) secondHex = (second = now).toString(16).padStart(8, '0');
  return secondHex + randomHex(24);
}

const INVALID_SPAN_ID = '0000000000000000';

function newSpanId(): string {
  const id = randomHex(16);
  return id === INVALID_SPAN_ID ? newSpanId() : id;
}

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

/** The tracer provider's ids: X-Ray's format, except those set by `withIds`. */
export const traceIds: IdGenerator = {
  generateTraceId: () => {
    const id = nextTraceId ?? newTraceId();
    nextTraceId = undefined;
    return id;
  },
  generateSpanId: () => {
    const id = nextSpanId ?? newSpanId();
    nextSpanId = undefined;
    return id;
  },
};
