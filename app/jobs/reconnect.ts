/**
 * Reconnecting. A lost database connection (a restart, a terminated backend, a reset:
 * app/db-errors.ts isConnectionLost) fails the attempt as retryable. The runner then drops
 * its locks' connections, reconnects with the fast JOB_RECONNECT_BACKOFF_MS backoff, takes
 * both locks again and goes through the run's steps again, so it resumes from the last
 * checkpoint; the failed attempt counts against the job's retries.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isConnectionError } from '../db.js';
import { errorText } from '../shutdown.js';
import { backoffMs } from './backoff.js';
import { failRun, stopOf, type RunOutcome } from './outcome.js';
import type { RunState } from './run-state.js';

/**
 * Tries to reconnect after a lost connection, each JOB_RECONNECT_BACKOFF_MS·2^(n-1) later:
 * with the 250 ms default, about a minute in all, enough for a Multi-AZ failover.
 */
export const RECONNECT_TRIES = 8;

/** A session's way of saying: the connection was lost; reconnect, take the locks again and go on. */
export const RECONNECT = Symbol('reconnect');

/** One session: take the locks, check, attempt; its outcome, or RECONNECT. */
export type Session = () => Promise<RunOutcome | typeof RECONNECT>;

/** Runs sessions (locks, checks, attempts) until one ends the run, reconnecting after a lost connection. */
export async function reconnecting(s: RunState, session: Session): Promise<RunOutcome> {
  let tries = 0;
  let lastError = '';
  for (;;) {
    try {
      const outcome = await session();
      if (outcome !== RECONNECT) return outcome;
      tries = 0;
    } catch (err) {
      if (!isConnectionError(err) || s.stop.aborted) throw err;
      lastError = errorText(err);
      s.log.warn({ err: lastError, reconnectTry: tries }, `the database connection failed (${lastError})`);
    } finally {
      // A lock whose connection died is gone; the live ones are released to be taken again.
      await Promise.all(s.locks.map((lock) => lock.release()));
      s.locks = [];
    }
    tries += 1;
    if (tries > RECONNECT_TRIES) {
      throw new Error(`the database stayed unreachable through ${RECONNECT_TRIES} reconnection tries: ${lastError}`);
    }
    const delay = backoffMs(s.o.config.JOB_RECONNECT_BACKOFF_MS, tries);
    s.phase = 'reconnecting';
    s.log.warn({ reconnectTry: tries, of: RECONNECT_TRIES, inMs: delay }, `reconnecting to the database in ${delay} ms (try ${tries} of ${RECONNECT_TRIES}); the run then takes its locks again and resumes from its checkpoint`);
    try {
      await sleep(delay, undefined, { signal: s.stop });
    } catch {
      const stop = stopOf(s.stop);
      if (stop.reason === 'shutdown') {
        s.log.warn({ outcome: 'interrupted' }, `${s.job.name} interrupted while reconnecting (${stop.message}); rerun the same scheduled time to resume from its checkpoint`);
        return { kind: 'interrupted', runId: s.runId };
      }
      return failRun(s, stop.reason, `${stop.message} while reconnecting to the database`);
    }
  }
}
