/**
 * The lock protocol, steps 1 to 3 of a run (app/jobs/runner.ts):
 *   1. `run:<job>@<time>` advisory lock, tried once: held elsewhere means a duplicate delivery
 *      of this run key is already working ("already running", exit 0).
 *   2. A succeeded attempt of this run key means "already done" (exit 0), unless --force.
 *   3. `job:<job>` advisory lock: held elsewhere means a run of another scheduled time is
 *      still going; the table's overlap policy skips (exit 0) or waits for it.
 * Both locks live on dedicated connections (app/lock.ts); the run's row is written on the
 * run lock's connection, so the heartbeat also proves the lock is still held.
 */
import type { PoolClient } from '../db.js';
import type { AdvisoryLock } from '../lock.js';
import { stopOf, stoppedBeforeStart, type RunOutcome } from './outcome.js';
import type { RunState } from './run-state.js';

/** Connections the runner keeps checked out for a whole run: the run lock's and the job lock's. */
export const LOCK_CONNECTIONS = 2;

/** Step 1: true when the run lock is ours; false when a duplicate delivery holds it (logged). */
export async function takeRunLock(s: RunState, runLock: AdvisoryLock): Promise<boolean> {
  s.phase = 'taking the run lock';
  if (await runLock.tryAcquire()) {
    await keepDeadPeersDetectable(runLock.connection);
    return true;
  }
  s.log.info({ outcome: 'already-running', lock: runLock.name }, `already running: another process holds the run key ${runLock.name}; exiting 0`);
  return false;
}

/** Step 2: "already done" when the run key succeeded and --force was not given. */
export async function alreadyDone(s: RunState, db: PoolClient): Promise<RunOutcome | undefined> {
  const done = await db.query<{ id: string; finished_at: Date }>(
    `SELECT id::text, finished_at FROM job_runs WHERE job = $1 AND scheduled_time = $2 AND status = 'succeeded' ORDER BY job_runs.id DESC LIMIT 1`,
    [s.job.name, s.iso],
  );
  const succeeded = done.rows[0];
  if (!succeeded) return undefined;
  if (!s.o.force) {
    s.log.info(
      { outcome: 'already-done', runId: succeeded.id },
      `already done: run #${succeeded.id} of ${s.job.name} for ${s.iso} succeeded at ${succeeded.finished_at.toISOString()}; exiting 0 (--force runs it again)`,
    );
    return { kind: 'already-done', runId: succeeded.id };
  }
  const again = s.firstAttempt === undefined ? 'running it again from scratch' : 'this forced run goes on from its own checkpoint';
  s.log.info({ runId: succeeded.id }, `--force: run #${succeeded.id} already succeeded; ${again}`);
  return undefined;
}

/** Step 3, the overlap policy: true when the job lock is ours, else the run's outcome. */
export async function takeJobLock(s: RunState, jobLock: AdvisoryLock, db: PoolClient): Promise<true | RunOutcome> {
  s.phase = 'taking the job lock';
  if (!(await jobLock.tryAcquire())) {
    const holder = await describeRunning(db, s.job.name);
    if (s.job.overlap === 'skip') {
      s.log.info({ outcome: 'skipped', overlap: 'skip' }, `skipped: ${holder} of ${s.job.name} is still going and the job's overlap policy is "skip"; exiting 0`);
      return { kind: 'skipped' };
    }
    s.phase = 'waiting for the previous run';
    const t0 = performance.now();
    s.log.info({ overlap: 'wait' }, `waiting: ${holder} of ${s.job.name} is still going and the job's overlap policy is "wait" (at most until the timeout)`);
    if (!(await jobLock.acquire(s.stop, Math.min(1_000, s.o.config.HEARTBEAT_INTERVAL_MS)))) {
      return stoppedBeforeStart(s, db, stopOf(s.stop), `while waiting for ${holder}`);
    }
    s.log.info({ waitedMs: Math.round(performance.now() - t0) }, `the previous run is over after ${Math.round(performance.now() - t0)} ms; starting`);
  }
  await keepDeadPeersDetectable(jobLock.connection);
  return true;
}

/**
 * Postgres frees a dead client's advisory locks only once it notices the connection is gone.
 * A Fargate task that is killed may never send a FIN, and the kernel's default keepalive
 * would take two hours to notice; with these, a dead lock holder is found within a minute.
 */
async function keepDeadPeersDetectable(db: PoolClient): Promise<void> {
  await db.query(KEEPALIVES);
}

const KEEPALIVES = `SELECT set_config('tcp_keepalives_idle', '20', false), set_config('tcp_keepalives_interval', '10', false), set_config('tcp_keepalives_count', '3', false)`;

/**
 * What a lock connection (and each connection the run uses at once, app/jobs/registry.ts) runs
 * as soon as it opens, while the job's modules load: the
 * keepalives, and a look at `job_runs`, which load the new backend's caches (its first
 * statements took 40 to 60 ms each, on the run's clock, before the first lock was taken).
 */
export const LOCK_CONNECTION_READY = `${KEEPALIVES}, pg_backend_pid(), (SELECT count(*) FROM job_runs WHERE false)`;

/** "run #12 (2025-01-02T00:15:00.000Z, heartbeat 3 s ago)", or "another run" when no row says which. */
async function describeRunning(db: PoolClient, job: string): Promise<string> {
  const { rows } = await db.query<{ id: string; scheduled_time: Date; age_s: number }>(
    `SELECT id::text, scheduled_time, extract(epoch FROM now() - heartbeat_at)::float8 AS age_s
     FROM job_runs WHERE job = $1 AND status = 'running' ORDER BY job_runs.id DESC LIMIT 1`,
    [job],
  );
  const r = rows[0];
  return r ? `run #${r.id} (${r.scheduled_time.toISOString()}, heartbeat ${r.age_s.toFixed(1)} s ago)` : 'another run';
}
