/**
 * Background work a test keeps going while it acts (a heartbeat it beats for a fake process,
 * a poller), in a form that cannot outlive the test or fail unseen: one call at a time, and
 * `stop()` waits for the call in flight and rethrows the first failure, so a rejection lands
 * in the test that caused it instead of surfacing later as an unhandled one.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface Repeating {
  /** How many calls have finished, ok or not. */
  readonly calls: () => number;
  /** Ends the loop after the call in flight; rejects with the first error any call threw. */
  stop(): Promise<void>;
}

/** Calls `fn` now and then every `everyMs` after each call ends, until `stop()`. */
export function repeat(fn: () => Promise<unknown>, everyMs: number): Repeating {
  const stopped = new AbortController();
  let calls = 0;
  let failure: { error: unknown } | undefined;
  const loop = (async () => {
    while (!stopped.signal.aborted) {
      try {
        await fn();
      } catch (error) {
        failure ??= { error };
      }
      calls++;
      await sleep(everyMs, undefined, { signal: stopped.signal }).catch(() => undefined);
    }
  })();
  return {
    calls: () => calls,
    async stop() {
      stopped.abort();
      await loop;
      if (failure) throw failure.error;
    },
  };
}
