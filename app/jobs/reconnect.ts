/**
 * Reconnecting. Database trouble that a moment may cure (app/db-errors.ts): a lost connection
 * (a restart, a terminated backend, a reset), a busy database (class 53: too many
 * connections), a read-only one (25006: a failover in progress), stops the session, or fails
 * the attempt without spending the job's retries. The runner then drops its locks'
 * connections, waits JOB_RECONNECT_BACKOFF_MS (doubling per try), takes both locks again and
 * goes through the run's steps again, so it resumes from the last checkpoint.
 *
 * The budget is time, and one for the whole run: the run gives up (one alert, exit 1) once the
 * database has been out of reach for longer than the backoffs of RECONNECT_TRIES tries add up
 * to (about a minute with the 250 ms default, enough for a Multi-AZ failover), after a last
 * try at the budget itself. The clock starts at the first trouble, whichever step meets it
 * (the handler's batch, recording the attempt's end, taking the locks again), and every step
 * that waits reads the same clock. It stops only when the run is at work again: an attempt
 * saved a checkpoint or wrote its heartbeat (`backInReach`). When recording an attempt's end
 * waited on the clock and then reached the database, the session tries again at once, even
 * past the budget, once an outage: the record may have made the budget's last try. Taking an attempt's row is not
 * enough: with the connection slots nearly all taken, the locks' connections still work while
 * the handler's cannot be had, and a clock stopped there would loop, a row per attempt, until
 * the job's timeout. A run that works between its losses ends only at the job's timeout,
 * never by a count.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isTransientDbError } from '../db-errors.js';
import { errorText } from '../shutdown.js';
import { backoffMs, MAX_BACKOFF_MS } from './backoff.js';
import { failRun, stopOf, type RunOutcome } from './outcome.js';
import type { Outage, RunState } from './run-state.js';
import { spanEvent } from '../tracing/trace.js';

/** The number of tries whose full backoffs make the reconnect budget. */
export const RECONNECT_TRIES = 8;

/** How long the database may stay out of reach: the sum of RECONNECT_TRIES backoffs at their ceiling. */
export function reconnectBudgetMs(baseMs: number): number {
  let total = 0;
  for (let n = 1; n <= RECONNECT_TRIES; n++) total += Math.min(MAX_BACKOFF_MS, baseMs * 2 ** (n - 1));
  return total;
}

/** A session's way of saying: the connection was lost; reconnect, take the locks again and go on. */
export const RECONNECT = Symbol('reconnect');

/** One session: take the locks, check, attempt; its outcome, or RECONNECT. */
export type Session = () => Promise<RunOutcome | typeof RECONNECT>;

/** The database is out of reach from now, unless it already was: the run's one clock starts. */
export function outOfReach(s: RunState): Outage {
  s.outage ??= { since: performance.now(), tries: 0, answered: false, owedGiven: false };
  return s.outage;
}

/**
 * A step that waited on the clock has reached the database: the session that follows is owed
 * its try at once, even at the budget, where the step may have spent the last try (once an
 * outage, so a database that answers the run's records but never its batches still ends it).
 */
export function answeredAgain(s: RunState): void {
  if (s.outage !== undefined) s.outage.answered = true;
}

/** The run saved a checkpoint or wrote its heartbeat: it is at work again, and the clock stops. */
export function backInReach(s: RunState): void {
  s.outage = undefined;
}

/**
 * The wait before the next try, and whether the time out of reach is past the budget: one
 * count of tries and one clock for every step that waits. The last wait ends at the budget,
 * so the last try is made there, not a backoff earlier.
 */
export function nextWaitMs(s: RunState): { delay: number; outMs: number; tries: number; budgetMs: number; over: boolean } {
  const outage = outOfReach(s);
  outage.tries += 1;
  const baseMs = s.o.config.JOB_RECONNECT_BACKOFF_MS;
  const budgetMs = reconnectBudgetMs(baseMs);
  const outMs = Math.round(performance.now() - outage.since);
  if (outage.answered && !outage.owedGiven) {
    outage.answered = false;
    outage.owedGiven = true;
    return { delay: 0, outMs, tries: outage.tries, budgetMs, over: false };
  }
  const delay = Math.max(0, Math.min(backoffMs(baseMs, outage.tries), budgetMs - outMs));
  return { delay, outMs, tries: outage.tries, budgetMs, over: outMs >= budgetMs };
}

/** Runs sessions (locks, checks, attempts) until one ends the run, reconnecting after database trouble. */
export async function reconnecting(s: RunState, session: Session): Promise<RunOutcome> {
  let lastError = '';
  for (;;) {
    try {
      const outcome = await session();
      if (outcome !== RECONNECT) return outcome;
      lastError = s.lastTrouble ?? lastError;
    } catch (err) {
      if (!isTransientDbError(err) || s.stop.aborted) throw err;
      lastError = errorText(err);
      outOfReach(s);
      s.log.warn({ err: lastError }, `the database connection failed (${lastError})`);
      spanEvent('database connection lost');
    } finally {
      // A lock whose connection died is gone; the live ones are released to be taken again.
      await Promise.all(s.locks.map((lock) => lock.release()));
      s.locks = [];
    }
    const { delay, outMs, tries, budgetMs, over } = nextWaitMs(s);
    if (over) {
      throw new Error(`the database stayed unreachable for ${outMs} ms through ${tries - 1} tries (the budget is ${budgetMs} ms): ${lastError}`);
    }
    spanEvent('reconnect', { 'job.reconnect_try': tries, 'job.reconnect_in_ms': delay, 'job.out_of_reach_ms': outMs });
    s.phase = 'reconnecting';
    s.log.warn(
      { reconnectTry: tries, inMs: delay, outMs, budgetMs },
      `reconnecting to the database in ${delay} ms (try ${tries}, ${outMs} of ${budgetMs} ms out of reach); the run then takes its locks again and ${s.lastCheckpoint === undefined ? 'goes on from the last checkpoint the run saved, if any' : 'resumes from its last checkpoint'}`,
    );
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
