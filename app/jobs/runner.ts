/**
 * The job runner: what makes at-least-once delivery of a scheduled job safe and visible.
 *
 * One run key = the job's name + its scheduled time. A session of a run goes, in order:
 *   1. the run lock `run:<job>@<time>`: held elsewhere means "already running" (exit 0);
 *   2. a succeeded attempt of the run key means "already done" (exit 0), unless --force;
 *   3. the job lock `job:<job>`: the overlap policy skips (exit 0) or waits;
 *      (steps 1-3: the lock protocol, app/jobs/run-locks.ts)
 *   4. earlier `running` rows of the job whose lock session is gone or whose heartbeat is
 *      stale are marked `abandoned` (app/jobs/settle.ts);
 *   5. attempts, resumed from the last checkpoint, retried with backoff (app/jobs/attempts.ts,
 *      one attempt: app/jobs/attempt.ts).
 * A lost connection ends the session; the run reconnects and starts a new one
 * (app/jobs/reconnect.ts). How the run ends, and its alert: app/jobs/outcome.ts.
 */
import { errorText } from '../shutdown.js';
import { runAttempts } from './attempts.js';
import { failRun, Stop, stoppedBeforeStart, stopOf, type RunOutcome } from './outcome.js';
import { RECONNECT, reconnecting } from './reconnect.js';
import { alreadyDone, takeJobLock, takeRunLock } from './run-locks.js';
import { RunState, type RunnerOptions } from './run-state.js';
import { inRunSpan } from './run-span.js';
import { settlePreviousRuns } from './settle.js';
import { formatProgress } from './progress.js';

export { MAX_BACKOFF_MS, backoffMs } from './backoff.js';
export { STOP_GRACE_SHARE } from './attempt.js';
export { exitCodeOf, type RunOutcome } from './outcome.js';
export { RECONNECT_TRIES } from './reconnect.js';
export { LOCK_CONNECTIONS, LOCK_CONNECTION_READY } from './run-locks.js';
export type { RunnerOptions } from './run-state.js';
export { STALE_AFTER_HEARTBEATS } from './settle.js';

/** Postgres's SQLSTATE for "relation does not exist". */
const UNDEFINED_TABLE = '42P01';

export class JobRunner {
  private readonly timeout = new AbortController();
  private readonly s: RunState;

  constructor(o: RunnerOptions) {
    this.s = new RunState(o, AbortSignal.any([o.shutdownSignal, this.timeout.signal]));
  }

  get timeoutMs(): number {
    return this.s.timeoutMs;
  }

  /** What the run is doing, for the shutdown deadline's log line. */
  pending(): string {
    const { job, phase, progress } = this.s;
    return `${job.name} ${phase}${phase === 'working' ? ` (${formatProgress(progress.snapshot())})` : ''}`;
  }

  /** A failure alert of this run was published (or logged): the process may then exit 1 rather than 4. */
  get alerted(): boolean {
    return this.s.alerted;
  }

  /** The shutdown deadline's last resort: drop the lock connections, which frees the locks. */
  forceRelease(): void {
    for (const lock of this.s.locks) lock.destroy();
  }

  /** The run, in its trace (app/jobs/run-span.ts). */
  run(): Promise<RunOutcome> {
    return inRunSpan(this.s, () => this.runTraced());
  }

  private async runTraced(): Promise<RunOutcome> {
    const s = this.s;
    s.startedAt = performance.now();
    const timer = setTimeout(
      () => this.timeout.abort(new Stop('timeout', `timeout: the run passed its ${s.timeoutMs / 1_000} s timeout (lib/jobs.ts)`)),
      s.timeoutMs,
    );
    try {
      return await reconnecting(s, () => this.session());
    } catch (err) {
      // The runner itself failed (the database is unreachable, say): nobody else will tell.
      const error =
        (err as { code?: string }).code === UNDEFINED_TABLE
          ? `${errorText(err)}: the database is not migrated (run npm run migrate, or start the API, which migrates)`
          : errorText(err);
      s.log.error({ err: error, stack: err instanceof Error ? err.stack : undefined }, `the run of ${s.job.name} could not go on: ${error}`);
      return await failRun(s, 'error', error);
    } finally {
      clearTimeout(timer);
      s.detach();
      s.progressLine.stop();
      s.phase = 'finished';
    }
  }

  /** Steps 1-5 under the session's two locks; the locks are released however it ends. */
  private async session(): Promise<RunOutcome | typeof RECONNECT> {
    const s = this.s;
    const runLock = s.lock(`run:${s.job.name}@${s.iso}`);
    if (!(await takeRunLock(s, runLock))) return { kind: 'already-running' };
    const prepared = this.prepare();
    try {
      const db = runLock.connection;
      const done = await alreadyDone(s, db);
      if (done) return done;
      const jobLock = s.lock(`job:${s.job.name}`);
      try {
        const taken = await takeJobLock(s, jobLock, db);
        if (taken !== true) return taken;
        const settled = await settlePreviousRuns(s, db);
        if (settled !== true) return settled;
        if (s.stop.aborted) return await stoppedBeforeStart(s, db, stopOf(s.stop));
        await prepared;
        return await runAttempts(s, db);
      } finally {
        await jobLock.release();
      }
    } finally {
      await prepared;
      await runLock.release();
    }
  }

  /** The handler's `prepare`, side by side with steps 2-4; never rejects. */
  private async prepare(): Promise<void> {
    const { o, log } = this.s;
    if (o.handler.prepare === undefined) return;
    try {
      await o.handler.prepare({ pool: o.pool, config: o.config, scheduledTime: o.scheduledTime });
    } catch (err) {
      log.debug({ err: errorText(err) }, `preparing the batches' connections failed (${errorText(err)}); the batches open their own`);
    }
  }

  /**
   * Alerts a crash of the process (an uncaught exception or rejection: a bug). The run was
   * recorded "interrupted" and resumes from its checkpoint; the process exits 1 after this.
   */
  async alertCrash(crash: { readonly kind: string; readonly error: string }): Promise<void> {
    await failRun(this.s, 'error', `the process crashed (${crash.kind}: ${crash.error}); the run is recorded "interrupted", and a rerun resumes from its checkpoint`);
  }
}
