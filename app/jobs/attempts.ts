/**
 * Step 5 of a run (app/jobs/runner.ts): attempts, each a `job_runs` row, resumed from the
 * last checkpoint of the run key; a failed attempt is retried in-process with exponential
 * backoff and jitter, up to the job's `retries`. An attempt that lost its database
 * connection hands the run back to be reconnected (app/jobs/reconnect.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { PoolClient } from '../db.js';
import { errorText } from '../shutdown.js';
import { runAttempt } from './attempt.js';
import { backoffMs } from './backoff.js';
import { failRun, stopOf, type RunOutcome } from './outcome.js';
import { RECONNECT } from './reconnect.js';
import type { RunState } from './run-state.js';

export async function runAttempts(s: RunState, db: PoolClient): Promise<RunOutcome | typeof RECONNECT> {
  const { rows } = await db.query<{ attempt: number; status: string; checkpoint: unknown }>(
    `SELECT attempt, status, checkpoint FROM job_runs WHERE job = $1 AND scheduled_time = $2 ORDER BY attempt DESC LIMIT 1`,
    [s.job.name, s.iso],
  );
  const last = rows[0];
  let attemptNo = last?.attempt ?? 0;
  let checkpoint: unknown = !s.o.force && last && last.status !== 'succeeded' ? (last.checkpoint ?? undefined) : undefined;
  if (checkpoint !== undefined) {
    s.log.info({ checkpoint, fromAttempt: last!.attempt, fromStatus: last!.status }, `resuming from the checkpoint of attempt ${last!.attempt} (${last!.status})`);
  }
  const maxAttempts = s.job.retries + 1;
  const ranOn = (await s.location).ranOn;
  // Attempts are counted across reconnections: a lost connection spends one of the retries.
  for (let i = s.attemptsMade + 1; ; i++) {
    attemptNo += 1;
    s.attemptsMade = i;
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
      `${s.job.name} attempt ${attemptNo} started (run #${runId}, ${i} of ${maxAttempts} in this process): ${s.period}`,
    );

    const result = await runAttempt(s, db, runId, i, checkpoint, log);
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
    await finishAttempt(s, runId, 'failed', result.error);
    if (i >= maxAttempts) {
      log.error({ outcome: 'failed', err: result.error }, `${s.job.name} attempt ${attemptNo} failed: ${result.error}; no retries left`);
      return failRun(s, 'error', result.error);
    }
    if (result.disconnected) {
      log.warn(
        { err: result.error, checkpoint },
        `${s.job.name} attempt ${attemptNo} lost its database connection: ${result.error}; reconnecting (${maxAttempts - i} retr${maxAttempts - i === 1 ? 'y' : 'ies'} left)`,
      );
      return RECONNECT;
    }
    const delay = backoffMs(s.o.config.JOB_RETRY_BACKOFF_MS, i);
    log.warn({ err: result.error, retryInMs: delay }, `${s.job.name} attempt ${attemptNo} failed: ${result.error}; retrying in ${delay} ms (${maxAttempts - i} retr${maxAttempts - i === 1 ? 'y' : 'ies'} left)`);
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

/** Records the end of an attempt on the lock's connection, or through the pool when that connection is gone. */
async function finishAttempt(s: RunState, runId: string, status: 'succeeded' | 'failed' | 'interrupted', error: string | null): Promise<void> {
  const p = s.progress.snapshot();
  const sql = `UPDATE job_runs SET status = $2, finished_at = now(), processed = $3, total = $4, error = $5 WHERE id = $1 AND status = 'running'`;
  const params = [runId, status, p.processed, p.total, error];
  const runLock = s.locks[0];
  if (runLock?.held) {
    try {
      await runLock.connection.query(sql, params);
      return;
    } catch (err) {
      s.log.warn({ err: errorText(err) }, 'could not record the outcome on the lock connection; trying through the pool');
    }
  }
  await s.o.pool.query(sql, params);
}
