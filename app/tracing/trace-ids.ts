/**
 * A job run's trace id comes from its run key (job + scheduled time), so every process that
 * works on the run (a retry, a rerun) writes to the same trace, and the operator can find it
 * from the run key alone (`runTraceId`): X-Ray's first 8 hex digits are the scheduled time in
 * epoch seconds, the other 24 the start of the run key's SHA-256.
 */
import { createHash } from 'node:crypto';
import type { IdGenerator } from '@opentelemetry/sdk-trace-base';

export function runTraceId(job: string, scheduledTime: Date): string {
  const seconds = Math.floor(scheduledTime.getTime() / 1_000).toString(16).padStart(8, '0').slice(-8);
  return seconds + createHash('sha256').update(`${job}@${scheduledTime.toISOString()}`).digest('hex').slice(0, 24);
}

let next: string | undefined;

/** The next root span started synchronously inside `fn` gets trace id `traceId`. */
export function withTraceId<T>(traceId: string, fn: () => T): T {
  next = traceId;
  try {
    return fn();
  } finally {
    next = undefined;
  }
}

/** `base`, except for a trace id set by `withTraceId`. */
export function fixedTraceIds(base: IdGenerator): IdGenerator {
  return {
    generateTraceId: () => {
      const id = next ?? base.generateTraceId();
      next = undefined;
      return id;
    },
    generateSpanId: () => base.generateSpanId(),
  };
}
