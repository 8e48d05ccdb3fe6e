/**
 * Step 5 of a run (app/jobs/runner.ts): attempts, each a `job_runs` row, resumed from the
 * last checkpoint of the run key; a failed attempt is retried in-process with exponential
 * backoff and jitter, up to the job's `retries`. An attempt that lost its database
 * connection hands the run back to be reconnected (app/jobs/reconnect.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { PoolClient } from '../db.js';
import { isTransientDbError } from '../db-errors.js';
import { errorText } from '../shutdown.js';
import { runAttempt } from './attempt.js';
import { backoffMs } from './backoff.js';
import { failRun, stopOf, type RunOutcome } from './outcome.js';
import { RECONNECT, answeredAgain, nextWaitMs, outOfReach } from './reconnect.js';
import type { RunState } from './run-state.js';
import { failSpan, inSpan, spanEvent } from '../tracing/trace.js';

export async function runAttempts(s: RunState, db: PoolClient): Promise<RunOutcome | typeof RECONNECT> {
  const { rows } = await db.query<{ attempt: number; status: string; checkpoint: unknown }>(
    `SELECT attempt, status, checkpoint FROM job_runs WHERE job = $1 AND scheduled_time = $2 ORDER BY attempt DESC LIMIT 1`,
    [s.job.name, s.iso],
  );
  const last = rows[0];
  let attemptNo = last?.attempt ?? 0;
  let checkpoint = resumeFrom(s, last);
  const maxAttempts = s.job.retries + 1;
  const ranOn = (await s.location).ranOn;
  // Only the job's own errors spend its retries (counted across reconnections). A lost
  // connection, a busy or a read-only database spends none: the reconnect budget, bounded by
  // time (app/jobs/reconnect.ts), covers those.
  for (;;) {
    // The run lock's connection died while the run waited to retry: reconnect, as after a batch.
    if (!s.locks[0]!.held) {
      s.lastTrouble = 'lost the database connection while waiting to retry';
      outOfReach(s);
      return RECONNECT;
    }
    attemptNo += 1;
    const i = ++s.attemptsMade;
    const inserted = await db.query<{ id: string }>(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, checkpoint, ran_on, lock_pid) VALUES ($1, $2, 'running', $3, $4, $5, $6) RETURNING id::text`,
      [s.job.name, s.iso, attemptNo, checkpoint === undefined ? null : JSON.stringify(checkpoint), ranOn, s.locks[0]!.pid],
    );
    const runId = inserted.rows[0]!.id;
    s.runId = runId;
    s.lastCheckpoint = checkpoint;
    const log = s.log.child({ runId, attempt: attemptNo });
    log.info(
      { period: s.period, ranOn, resumed: checkpoint !== undefined, timeoutMs: s.timeoutMs },
      `${s.job.name} attempt ${attemptNo} started (run #${runId}, ${s.failures} of ${s.job.retries} retries used): ${s.period}`,
    );

    const result = await inSpan(`${s.job.name} attempt`, { 'job.attempt': attemptNo, 'job.run_id': runId, 'job.resumed': checkpoint !== undefined }, async (span) => {
      const r = await runAttempt(s, db, runId, i, checkpoint, log);
      span.setAttribute('job.attempt.result', r.kind);
      // Named by its kind (SQLSTATE, error class), never its message, which may quote a value.
      if (r.kind === 'error') failSpan(span, r.cause);
      return r;
    });
    checkpoint = s.lastCheckpoint;
    const p = s.progress.snapshot();
    if (result.kind === 'succeeded') {
      await finishAttempt(s, runId, 'succeeded', null);
      const durationMs = s.elapsedMs();
      s.metrics.emit({ duration: durationMs, succeeded: 1 }, { processed: p.processed, total: p.total, outcome: 'succeeded' }, 'run succeeded');
      log.info({ outcome: 'succeeded', durationMs, summary: result.summary }, `${s.job.name} succeeded in ${durationMs} ms: ${JSON.stringify(result.summary)}`);
      return { kind: 'succeeded', runId, attempts: i };
    }
    if (result.kind === 'stopped') {
      if (result.stop.reason === 'shutdown') {
        await finishAttempt(s, runId, 'interrupted', result.stop.message);
        s.metrics.emit({ duration: s.elapsedMs() }, { outcome: 'interrupted' }, 'run interrupted');
        log.warn(
          { outcome: 'interrupted', checkpoint, processed: p.processed, total: p.total },
          `${s.job.name} interrupted (${result.stop.message}); recorded "interrupted" with its checkpoint; rerun the same scheduled time to resume`,
        );
        return { kind: 'interrupted', runId };
      }
      await finishAttempt(s, runId, 'failed', result.stop.message);
      log.error({ outcome: 'failed', reason: result.stop.reason }, `${s.job.name} attempt ${attemptNo} failed: ${result.stop.message}`);
      return failRun(s, result.stop.reason, result.stop.message);
    }
    if (result.disconnected) outOfReach(s);
    await finishAttempt(s, runId, 'failed', result.error);
    if (result.disconnected) {
      s.lastTrouble = result.error;
      const left = maxAttempts - 1 - s.failures;
      log.warn(
        { err: result.error, checkpoint },
        `${s.job.name} attempt ${attemptNo} was stopped by the database, not by its own error (${result.error}); reconnecting, which spends none of its retries (${left} retr${left === 1 ? 'y' : 'ies'} left)`,
      );
      return RECONNECT;
    }
    s.failures += 1;
    if (s.failures >= maxAttempts) {
      log.error({ outcome: 'failed', err: result.error }, `${s.job.name} attempt ${attemptNo} failed: ${result.error}; no retries left`);
      return failRun(s, 'error', result.error);
    }
    const left = maxAttempts - s.failures;
    const delay = backoffMs(s.o.config.JOB_RETRY_BACKOFF_MS, s.failures);
    log.warn({ err: result.error, retryInMs: delay }, `${s.job.name} attempt ${attemptNo} failed: ${result.error}; retrying in ${delay} ms (${left} retr${left === 1 ? 'y' : 'ies'} left)`);
    spanEvent('retry', { 'job.attempt': attemptNo, 'job.retry_in_ms': delay, 'job.retries_left': left });
    s.phase = 'waiting to retry';
    try {
      await sleep(delay, undefined, { signal: s.stop });
    } catch {
      const stop = stopOf(s.stop);
      if (stop.reason === 'shutdown') {
        log.warn({ outcome: 'interrupted' }, `${s.job.name} interrupted before its retry; attempt ${attemptNo} stays "failed" with its checkpoint; rerun the same scheduled time to resume`);
        return { kind: 'interrupted', runId };
      }
      return failRun(s, stop.reason, stop.message);
    }
  }
}

/**
 * The checkpoint the run resumes from: the last unfinished attempt's. A forced run starts from
 * scratch once, ignoring the attempts made before it, and from then on is one run: after a
 * reconnection it resumes from the checkpoint of its own attempts like any other run.
 */
function resumeFrom(s: RunState, last: { attempt: number; status: string; checkpoint: unknown } | undefined): unknown {
  s.firstAttempt ??= (last?.attempt ?? 0) + 1;
  if (last === undefined || last.status === 'succeeded') return undefined;
  const before = last.attempt < s.firstAttempt;
  if (s.o.force && before) {
    if (last.checkpoint !== null) s.log.info({ fromAttempt: last.attempt }, `--force: not resuming from the checkpoint of attempt ${last.attempt} (${last.status}); this run starts from scratch`);
    return undefined;
  }
  const checkpoint = last.checkpoint ?? undefined;
  if (checkpoint !== undefined) {
    s.log.info({ checkpoint, fromAttempt: last.attempt, fromStatus: last.status, ownAttempt: !before }, `resuming from the checkpoint of attempt ${last.attempt} (${last.status})`);
  }
  return checkpoint;
}

/**
 * Records the end of an attempt on the lock's connection, or through the pool when that
 * connection is gone. Database trouble (read-only for a moment, a lost connection) is waited
 * out on the run's one reconnect clock (app/jobs/reconnect.ts): past its budget the error
 * ends the session, and the run fails at once rather than start the budget again.
 */
async function finishAttempt(s: RunState, runId: string, status: 'succeeded' | 'failed' | 'interrupted', error: string | null): Promise<void> {
  const p = s.progress.snapshot();
  const sql = `UPDATE job_runs SET status = $2, finished_at = now(), processed = $3, total = $4, error = $5 WHERE id = $1 AND status = 'running'`;
  const params = [runId, status, p.processed, p.total, error];
  let waited = false;
  // After waiting, the database answered again: the session that follows is owed its try.
  const recorded = () => {
    if (waited) answeredAgain(s);
  };
  for (;;) {
    const runLock = s.locks[0];
    if (runLock?.held) {
      try {
        await runLock.connection.query(sql, params);
        return recorded();
      } catch (err) {
        s.log.warn({ err: errorText(err) }, 'could not record the outcome on the lock connection; trying through the pool');
      }
    }
    try {
      await s.o.pool.query(sql, params);
      return recorded();
    } catch (err) {
      if (!isTransientDbError(err)) throw err;
      const { delay, outMs, budgetMs, over } = nextWaitMs(s);
      if (over) throw err;
      s.log.warn(
        { err: errorText(err), inMs: delay, outMs, budgetMs },
        `could not record run #${runId}'s outcome "${status}" (${errorText(err)}); trying again in ${delay} ms (${outMs} of ${budgetMs} ms out of reach)`,
      );
      // Not cut short by a stop: the record is what a rerun resumes from; the budget bounds it.
      await sleep(delay);
      waited = true;
    }
  }
}
