/**
 * The job runner: what makes at-least-once delivery of a scheduled job safe and visible.
 *
 * One run key = the job's name + its scheduled time. In order:
 *   1. `run:<job>@<time>` advisory lock, tried once: held elsewhere means a duplicate delivery
 *      of this run key is already working ("already running", exit 0).
 *   2. A succeeded attempt of this run key means "already done" (exit 0), unless --force.
 *   3. `job:<job>` advisory lock: held elsewhere means a run of another scheduled time is
 *      still going; the table's overlap policy skips (exit 0) or waits for it.
 *   4. `running` rows of the job (their locks are free: we hold both) whose lock session
 *      (`lock_pid`) is gone, or whose heartbeat is older than 3 intervals, are marked
 *      `abandoned` at once. A row whose session still exists is waited for until its
 *      heartbeat goes stale, or treated as running when its heartbeat moves.
 *   5. Attempts, each a `job_runs` row, resumed from the last checkpoint of the run key;
 *      a failed attempt is retried in-process with exponential backoff and jitter.
 * Both locks live on dedicated connections (app/lock.ts); the run's row is written on the
 * run lock's connection, so the heartbeat also proves the lock is still held.
 *
 * A lost database connection (a restart, a terminated backend, a reset: app/db.ts
 * isConnectionError) fails the attempt as retryable. The runner then drops its locks'
 * connections, reconnects with the fast JOB_RECONNECT_BACKOFF_MS backoff, takes both locks
 * again and goes through steps 1-5, so it resumes from the last checkpoint; the failed
 * attempt counts against the job's retries.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { JobDefinition } from '../../lib/jobs.js';
import type { Config, JobFaults } from '../config.js';
import { isConnectionError, type Pool, type PoolClient } from '../db.js';
import { EXIT } from '../errors.js';
import { AdvisoryLock } from '../lock.js';
import type { Logger } from '../logger.js';
import { errorText } from '../shutdown.js';
import { sendFailureAlert } from './alert.js';
import { JobMetrics } from './emf.js';
import type { JobContext } from './handler.js';
import { Progress, ProgressLine, formatProgress } from './progress.js';
import type { AnyJobHandler } from './registry.js';
import { runLocation, type RunLocation } from './where.js';

/** Connections the runner keeps checked out for a whole run: the run lock's and the job lock's. */
export const LOCK_CONNECTIONS = 2;
/** A `running` row whose heartbeat is older than this many intervals, and whose lock is free, is abandoned. */
export const STALE_AFTER_HEARTBEATS = 3;
/** The longest backoff between two attempts. */
export const MAX_BACKOFF_MS = 60_000;
/**
 * Tries to reconnect after a lost connection, each JOB_RECONNECT_BACKOFF_MS·2^(n-1) later:
 * with the 250 ms default, about a minute in all, enough for a Multi-AZ failover.
 */
export const RECONNECT_TRIES = 8;
/**
 * After SIGTERM or the timeout, the handler has this share of SHUTDOWN_TIMEOUT_MS to finish
 * its batch; the rest records the run, releases the locks and closes the pool.
 */
export const STOP_GRACE_SHARE = 0.75;

/** Postgres's SQLSTATE for "relation does not exist". */
const UNDEFINED_TABLE = '42P01';

export type RunOutcome =
  | { readonly kind: 'succeeded'; readonly runId: string; readonly attempts: number }
  | { readonly kind: 'already-done'; readonly runId: string }
  | { readonly kind: 'already-running' }
  | { readonly kind: 'skipped' }
  | { readonly kind: 'interrupted'; readonly runId?: string }
  | { readonly kind: 'failed'; readonly reason: StopReason | 'error'; readonly runId?: string; readonly attempts: number; readonly error: string };

export function exitCodeOf(outcome: RunOutcome): number {
  switch (outcome.kind) {
    case 'interrupted':
      return EXIT.interrupted;
    case 'failed':
      return EXIT.failure;
    default:
      return EXIT.ok;
  }
}

type StopReason = 'shutdown' | 'timeout' | 'lock-lost';

/** The reason an AbortSignal of the runner carries. */
class Stop extends Error {
  constructor(
    readonly reason: StopReason,
    message: string,
  ) {
    super(message);
  }
}

function stopOf(signal: AbortSignal): Stop {
  const r: unknown = signal.reason;
  return r instanceof Stop ? r : new Stop('shutdown', `interrupted by ${typeof r === 'string' ? r : 'a shutdown'}`);
}

export interface RunnerOptions {
  readonly job: JobDefinition;
  readonly handler: AnyJobHandler;
  readonly pool: Pool;
  readonly config: Config;
  readonly logger: Logger;
  readonly scheduledTime: Date;
  /** Run even when the run key already succeeded, from scratch. */
  readonly force: boolean;
  /** Aborts when the process starts to shut down (SIGTERM/SIGINT). */
  readonly shutdownSignal: AbortSignal;
  readonly faults?: JobFaults;
  /** Replaced in tests; the ECS task or the hostname. */
  readonly location?: Promise<RunLocation>;
}

type Attempt =
  | { kind: 'succeeded'; summary: Record<string, unknown> }
  | { kind: 'stopped'; stop: Stop }
  | { kind: 'error'; error: string; disconnected: boolean };

/** A session's way of saying: the connection was lost; reconnect, take the locks again and go on. */
const RECONNECT = Symbol('reconnect');

interface RunningRow {
  id: string;
  scheduled_time: Date;
  attempt: number;
  heartbeat_ms: string;
  age_ms: number;
  abandoned: boolean;
  /** Why it was abandoned: its lock session is gone, or its heartbeat is stale. */
  session_gone: boolean;
  lock_pid: number | null;
}

export class JobRunner {
  private readonly job: JobDefinition;
  private readonly iso: string;
  private readonly log: Logger;
  private readonly metrics: JobMetrics;
  private readonly progress = new Progress();
  private readonly progressLine: ProgressLine;
  private readonly timeout = new AbortController();
  /** Aborts on shutdown or timeout: the whole run stops. */
  private readonly stop: AbortSignal;
  private readonly location: Promise<RunLocation>;
  /** The current session's locks: the run lock first, then the job lock. */
  private locks: AdvisoryLock[] = [];
  private readonly period: string;
  private startedAt = 0;
  private runId: string | undefined;
  private attemptsMade = 0;
  private lastCheckpoint: unknown;
  private phase = 'starting';

  constructor(private readonly o: RunnerOptions) {
    this.job = o.job;
    this.iso = o.scheduledTime.toISOString();
    this.period = o.handler.describePeriod(o.scheduledTime);
    this.log = o.logger.child({ scheduledTime: this.iso });
    this.metrics = new JobMetrics(o.logger, o.config.METRICS_NAMESPACE, o.job.name);
    this.progressLine = new ProgressLine(o.job.name, this.progress);
    this.stop = AbortSignal.any([o.shutdownSignal, this.timeout.signal]);
    this.location = o.location ?? runLocation();
  }

  get timeoutMs(): number {
    return this.o.faults?.timeoutMs ?? this.job.timeoutSeconds * 1_000;
  }

  /** What the run is doing, for the shutdown deadline's log line. */
  pending(): string {
    const p = this.progress.snapshot();
    return `${this.job.name} ${this.phase}${this.phase === 'working' ? ` (${formatProgress(p)})` : ''}`;
  }

  /** The shutdown deadline's last resort: drop the lock connections, which frees the locks. */
  forceRelease(): void {
    for (const lock of this.locks) lock.destroy();
  }

  async run(): Promise<RunOutcome> {
    this.startedAt = performance.now();
    const timer = setTimeout(
      () => this.timeout.abort(new Stop('timeout', `timeout: the run passed its ${this.timeoutMs / 1_000} s timeout (lib/jobs.ts)`)),
      this.timeoutMs,
    );
    try {
      return await this.reconnecting();
    } catch (err) {
      // The runner itself failed (the database is unreachable, say): nobody else will tell.
      const error =
        (err as { code?: string }).code === UNDEFINED_TABLE
          ? `${errorText(err)}: the database is not migrated (run npm run migrate, or start the API, which migrates)`
          : errorText(err);
      this.log.error({ err: error, stack: err instanceof Error ? err.stack : undefined }, `the run of ${this.job.name} could not go on: ${error}`);
      return await this.finalFailure('error', error);
    } finally {
      clearTimeout(timer);
      this.progressLine.stop();
      this.phase = 'finished';
    }
  }

  /** Runs sessions (locks, checks, attempts) until one ends the run, reconnecting after a lost connection. */
  private async reconnecting(): Promise<RunOutcome> {
    let tries = 0;
    let lastError = '';
    for (;;) {
      try {
        const outcome = await this.runKey();
        if (outcome !== RECONNECT) return outcome;
        tries = 0;
      } catch (err) {
        if (!isConnectionError(err) || this.stop.aborted) throw err;
        lastError = errorText(err);
        this.log.warn({ err: lastError, reconnectTry: tries }, `the database connection failed (${lastError})`);
      } finally {
        // A lock whose connection died is gone; the live ones are released to be taken again.
        await Promise.all(this.locks.map((lock) => lock.release()));
        this.locks = [];
      }
      tries += 1;
      if (tries > RECONNECT_TRIES) {
        throw new Error(`the database stayed unreachable through ${RECONNECT_TRIES} reconnection tries: ${lastError}`);
      }
      const delay = backoffMs(this.o.config.JOB_RECONNECT_BACKOFF_MS, tries);
      this.phase = 'reconnecting';
      this.log.warn({ reconnectTry: tries, of: RECONNECT_TRIES, inMs: delay }, `reconnecting to the database in ${delay} ms (try ${tries} of ${RECONNECT_TRIES}); the run then takes its locks again and resumes from its checkpoint`);
      try {
        await sleep(delay, undefined, { signal: this.stop });
      } catch {
        const stop = stopOf(this.stop);
        if (stop.reason === 'shutdown') {
          this.log.warn({ outcome: 'interrupted' }, `${this.job.name} interrupted while reconnecting (${stop.message}); rerun the same scheduled time to resume from its checkpoint`);
          return { kind: 'interrupted', runId: this.runId };
        }
        return this.finalFailure(stop.reason, `${stop.message} while reconnecting to the database`);
      }
    }
  }

  private async runKey(): Promise<RunOutcome | typeof RECONNECT> {
    this.phase = 'taking the run lock';
    const runLock = this.lock(`run:${this.job.name}@${this.iso}`);
    if (!(await runLock.tryAcquire())) {
      this.log.info({ outcome: 'already-running', lock: runLock.name }, `already running: another process holds the run key ${runLock.name}; exiting 0`);
      return { kind: 'already-running' };
    }
    try {
      const db = runLock.connection;
      await keepDeadPeersDetectable(db);
      const done = await db.query<{ id: string; finished_at: Date }>(
        `SELECT id::text, finished_at FROM job_runs WHERE job = $1 AND scheduled_time = $2 AND status = 'succeeded' ORDER BY job_runs.id DESC LIMIT 1`,
        [this.job.name, this.iso],
      );
      const succeeded = done.rows[0];
      if (succeeded && !this.o.force) {
        this.log.info(
          { outcome: 'already-done', runId: succeeded.id },
          `already done: run #${succeeded.id} of ${this.job.name} for ${this.iso} succeeded at ${succeeded.finished_at.toISOString()}; exiting 0 (--force runs it again)`,
        );
        return { kind: 'already-done', runId: succeeded.id };
      }
      if (succeeded) this.log.info({ runId: succeeded.id }, `--force: run #${succeeded.id} already succeeded; running it again from scratch`);

      const jobLock = this.lock(`job:${this.job.name}`);
      const taken = await this.takeJobLock(jobLock, db);
      if (taken !== true) return taken;
      try {
        await keepDeadPeersDetectable(jobLock.connection);
        const settled = await this.settlePreviousRuns(db);
        if (settled !== true) return settled;
        if (this.stop.aborted) return await this.stoppedBeforeStart(db, stopOf(this.stop));
        return await this.attempts(db);
      } finally {
        await jobLock.release();
      }
    } finally {
      await runLock.release();
    }
  }

  private lock(name: string): AdvisoryLock {
    const lock = new AdvisoryLock(this.o.pool, name, this.log);
    this.locks.push(lock);
    return lock;
  }

  /** The overlap policy: true when the job lock is ours, else the run's outcome. */
  private async takeJobLock(jobLock: AdvisoryLock, db: PoolClient): Promise<true | RunOutcome> {
    this.phase = 'taking the job lock';
    if (await jobLock.tryAcquire()) return true;
    const holder = await describeRunning(db, this.job.name);
    if (this.job.overlap === 'skip') {
      this.log.info(
        { outcome: 'skipped', overlap: 'skip' },
        `skipped: ${holder} of ${this.job.name} is still going and the job's overlap policy is "skip"; exiting 0`,
      );
      return { kind: 'skipped' };
    }
    this.phase = 'waiting for the previous run';
    const t0 = performance.now();
    this.log.info({ overlap: 'wait' }, `waiting: ${holder} of ${this.job.name} is still going and the job's overlap policy is "wait" (at most until the timeout)`);
    if (!(await jobLock.acquire(this.stop, Math.min(1_000, this.o.config.HEARTBEAT_INTERVAL_MS)))) {
      return this.stoppedBeforeStart(db, stopOf(this.stop), `while waiting for ${holder}`);
    }
    this.log.info({ waitedMs: Math.round(performance.now() - t0) }, `the previous run is over after ${Math.round(performance.now() - t0)} ms; starting`);
    return true;
  }

  /**
   * With both locks held, every `running` row of this job belongs to a process that lost its
   * locks: one that died (its connection closed) or, rarely, one still alive whose lock
   * connection broke. A stale heartbeat tells them apart.
   */
  private async settlePreviousRuns(db: PoolClient): Promise<true | RunOutcome> {
    this.phase = 'checking for abandoned runs';
    const staleMs = STALE_AFTER_HEARTBEATS * this.o.config.HEARTBEAT_INTERVAL_MS;
    const firstSeen = new Map<string, string>();
    for (;;) {
      // The lock session is gone when no backend has its pid. A reused pid only looks alive:
      // the row then goes stale by its heartbeat, the safe side.
      const { rows } = await db.query<RunningRow>(
        `WITH stale AS (
           UPDATE job_runs r
           SET status = 'abandoned', finished_at = now(),
               error = CASE WHEN gone.yes
                 THEN format('abandoned: its lock session (backend pid %s) is gone and its lock was free', r.lock_pid)
                 ELSE format('abandoned: no heartbeat since %s (over %s ms) and its lock was free', r.heartbeat_at, $2::int) END
           FROM job_runs o
           CROSS JOIN LATERAL (SELECT o.lock_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = o.lock_pid) AS yes) gone
           WHERE r.id = o.id AND o.job = $1 AND o.status = 'running'
             AND (gone.yes OR o.heartbeat_at < now() - make_interval(secs => $2::int / 1000.0))
           RETURNING r.id, r.scheduled_time, r.attempt, o.heartbeat_at, o.lock_pid, gone.yes AS session_gone
         )
         SELECT id::text, scheduled_time, attempt, (extract(epoch FROM heartbeat_at) * 1000)::text AS heartbeat_ms,
                (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms, true AS abandoned, session_gone, lock_pid
         FROM stale
         UNION ALL
         SELECT id::text, scheduled_time, attempt, (extract(epoch FROM heartbeat_at) * 1000)::text,
                (extract(epoch FROM now() - heartbeat_at) * 1000)::float8, false, false, lock_pid
         FROM job_runs
         WHERE job = $1 AND status = 'running' AND id NOT IN (SELECT id FROM stale)`,
        [this.job.name, staleMs],
      );
      for (const r of rows.filter((row) => row.abandoned)) {
        const same = r.scheduled_time.getTime() === this.o.scheduledTime.getTime();
        const why = r.session_gone ? `its lock session (backend pid ${r.lock_pid}) is gone` : `no heartbeat for ${Math.round(r.age_ms)} ms`;
        this.log.warn(
          { abandonedRunId: r.id, abandonedScheduledTime: r.scheduled_time.toISOString(), heartbeatAgeMs: Math.round(r.age_ms), sessionGone: r.session_gone, lockPid: r.lock_pid },
          `run #${r.id} (${r.scheduled_time.toISOString()}, attempt ${r.attempt}) is abandoned: ${why} and its lock is free; ${
            same ? 'this run resumes from its checkpoint' : `rerun ${this.job.name} --scheduled-time ${r.scheduled_time.toISOString()} to finish it`
          }`,
        );
      }
      const live = rows.filter((row) => !row.abandoned);
      if (live.length === 0) return true;

      const moved = live.find((r) => firstSeen.has(r.id) && firstSeen.get(r.id) !== r.heartbeat_ms);
      if (moved) {
        const same = moved.scheduled_time.getTime() === this.o.scheduledTime.getTime();
        if (same) {
          this.log.warn({ outcome: 'already-running', runId: moved.id }, `already running: run #${moved.id} of this run key still beats its heartbeat, though its lock is free; exiting 0`);
          return { kind: 'already-running' };
        }
        if (this.job.overlap === 'skip') {
          this.log.info({ outcome: 'skipped', runId: moved.id }, `skipped: run #${moved.id} (${moved.scheduled_time.toISOString()}) is still going and the overlap policy is "skip"; exiting 0`);
          return { kind: 'skipped' };
        }
      }
      for (const r of live) if (!firstSeen.has(r.id)) firstSeen.set(r.id, r.heartbeat_ms);
      const waitMs = Math.max(50, Math.min(...live.map((r) => staleMs - r.age_ms)) + 50);
      this.log.info(
        { runningRunIds: live.map((r) => r.id), waitMs: Math.round(waitMs) },
        `run #${live[0]!.id} is marked running but its lock is free; waiting ${Math.round(waitMs)} ms to see whether its heartbeat stops (abandoned) or goes on (alive)`,
      );
      try {
        await sleep(waitMs, undefined, { signal: this.stop });
      } catch {
        return this.stoppedBeforeStart(db, stopOf(this.stop), 'while checking for abandoned runs');
      }
    }
  }

  private async attempts(db: PoolClient): Promise<RunOutcome | typeof RECONNECT> {
    const { rows } = await db.query<{ attempt: number; status: string; checkpoint: unknown }>(
      `SELECT attempt, status, checkpoint FROM job_runs WHERE job = $1 AND scheduled_time = $2 ORDER BY attempt DESC LIMIT 1`,
      [this.job.name, this.iso],
    );
    const last = rows[0];
    let attemptNo = last?.attempt ?? 0;
    let checkpoint: unknown = !this.o.force && last && last.status !== 'succeeded' ? (last.checkpoint ?? undefined) : undefined;
    if (checkpoint !== undefined) {
      this.log.info({ checkpoint, fromAttempt: last!.attempt, fromStatus: last!.status }, `resuming from the checkpoint of attempt ${last!.attempt} (${last!.status})`);
    }
    const maxAttempts = this.job.retries + 1;
    const ranOn = (await this.location).ranOn;
    // Attempts are counted across reconnections: a lost connection spends one of the retries.
    for (let i = this.attemptsMade + 1; ; i++) {
      attemptNo += 1;
      this.attemptsMade = i;
      const inserted = await db.query<{ id: string }>(
        `INSERT INTO job_runs (job, scheduled_time, status, attempt, checkpoint, ran_on, lock_pid) VALUES ($1, $2, 'running', $3, $4, $5, $6) RETURNING id::text`,
        [this.job.name, this.iso, attemptNo, checkpoint === undefined ? null : JSON.stringify(checkpoint), ranOn, this.locks[0]!.pid],
      );
      const runId = inserted.rows[0]!.id;
      this.runId = runId;
      this.lastCheckpoint = checkpoint;
      const log = this.log.child({ runId, attempt: attemptNo });
      log.info(
        { period: this.period, ranOn, resumed: checkpoint !== undefined, timeoutMs: this.timeoutMs },
        `${this.job.name} attempt ${attemptNo} started (run #${runId}, ${i} of ${maxAttempts} in this process): ${this.period}`,
      );

      const result = await this.attempt(db, runId, i, checkpoint, log);
      checkpoint = this.lastCheckpoint;
      const p = this.progress.snapshot();
      if (result.kind === 'succeeded') {
        await this.finish(runId, 'succeeded', null);
        const durationMs = this.elapsedMs();
        this.metrics.emit({ duration: durationMs, succeeded: 1 }, { processed: p.processed, total: p.total, outcome: 'succeeded' }, 'run succeeded');
        log.info({ outcome: 'succeeded', durationMs, summary: result.summary }, `${this.job.name} succeeded in ${durationMs} ms: ${JSON.stringify(result.summary)}`);
        return { kind: 'succeeded', runId, attempts: i };
      }
      if (result.kind === 'stopped') {
        if (result.stop.reason === 'shutdown') {
          await this.finish(runId, 'interrupted', result.stop.message);
          this.metrics.emit({ duration: this.elapsedMs() }, { outcome: 'interrupted' }, 'run interrupted');
          log.warn(
            { outcome: 'interrupted', checkpoint, processed: p.processed, total: p.total },
            `${this.job.name} interrupted (${result.stop.message}); recorded "interrupted" with its checkpoint; rerun the same scheduled time to resume`,
          );
          return { kind: 'interrupted', runId };
        }
        await this.finish(runId, 'failed', result.stop.message);
        log.error({ outcome: 'failed', reason: result.stop.reason }, `${this.job.name} attempt ${attemptNo} failed: ${result.stop.message}`);
        return this.finalFailure(result.stop.reason, result.stop.message);
      }
      await this.finish(runId, 'failed', result.error);
      if (i >= maxAttempts) {
        log.error({ outcome: 'failed', err: result.error }, `${this.job.name} attempt ${attemptNo} failed: ${result.error}; no retries left`);
        return this.finalFailure('error', result.error);
      }
      if (result.disconnected) {
        log.warn(
          { err: result.error, checkpoint },
          `${this.job.name} attempt ${attemptNo} lost its database connection: ${result.error}; reconnecting (${maxAttempts - i} retr${maxAttempts - i === 1 ? 'y' : 'ies'} left)`,
        );
        return RECONNECT;
      }
      const delay = backoffMs(this.o.config.JOB_RETRY_BACKOFF_MS, i);
      log.warn({ err: result.error, retryInMs: delay }, `${this.job.name} attempt ${attemptNo} failed: ${result.error}; retrying in ${delay} ms (${maxAttempts - i} retr${maxAttempts - i === 1 ? 'y' : 'ies'} left)`);
      this.phase = 'waiting to retry';
      try {
        await sleep(delay, undefined, { signal: this.stop });
      } catch {
        const stop = stopOf(this.stop);
        if (stop.reason === 'shutdown') {
          log.warn({ outcome: 'interrupted' }, `${this.job.name} interrupted before its retry; attempt ${attemptNo} stays "failed" with its checkpoint; rerun the same scheduled time to resume`);
          return { kind: 'interrupted', runId };
        }
        return this.finalFailure(stop.reason, stop.message);
      }
    }
  }

  private async attempt(db: PoolClient, runId: string, index: number, checkpoint: unknown, log: Logger): Promise<Attempt> {
    const lost = new AbortController();
    const signal = AbortSignal.any([this.stop, lost.signal]);
    let open = true;
    this.phase = 'working';
    this.progress.begin();
    this.progressLine.start();

    const ctx: JobContext<unknown> = {
      job: this.job,
      scheduledTime: this.o.scheduledTime,
      pool: this.o.pool,
      config: this.o.config,
      logger: log,
      signal,
      checkpoint,
      progress: (processed, total) => this.progress.report(processed, total),
      saveCheckpoint: async (next, processed) => {
        if (!open) throw new Error('this attempt is over: its checkpoint can no longer change');
        this.progress.report(processed);
        await db.query(`UPDATE job_runs SET checkpoint = $2, processed = $3, total = $4, heartbeat_at = now() WHERE id = $1`, [
          runId,
          JSON.stringify(next),
          processed,
          this.progress.total,
        ]);
        this.lastCheckpoint = next;
      },
    };

    let beating: Promise<void> | undefined;
    const beat = async () => {
      const p = this.progress.snapshot();
      try {
        const { rowCount } = await db.query(`UPDATE job_runs SET heartbeat_at = now(), processed = $2, total = $3 WHERE id = $1 AND status = 'running'`, [runId, p.processed, p.total]);
        if (rowCount !== 1) throw new Error('its row is no longer "running"');
      } catch (err) {
        lost.abort(new Stop('lock-lost', `lost the run's lock: the heartbeat failed (${errorText(err)})`));
        return;
      }
      this.metrics.emit(
        { heartbeat: 1, processed: p.processed },
        { processed: p.processed, total: p.total, rate: p.rate === null ? null : Math.round(p.rate), etaSeconds: p.etaSeconds === null ? null : Math.round(p.etaSeconds) },
        `heartbeat: ${formatProgress(p)}`,
      );
    };
    const heartbeat = setInterval(() => {
      beating ??= beat().finally(() => (beating = undefined));
    }, this.o.config.HEARTBEAT_INTERVAL_MS);
    this.metrics.emit({ heartbeat: 1, processed: 0 }, {}, 'heartbeat: started');

    try {
      const crash = this.o.faults?.crash;
      if (crash && index === 1) {
        // Outside any promise chain of the runner, as a bug in a library callback would be.
        setImmediate(() => {
          const err = new Error(`injected crash (JOB_FAULT_INJECTION crash=${crash})`);
          if (crash === 'exception') throw err;
          void Promise.reject(err);
        });
      }
      const failAttempts = this.o.faults?.failAttempts ?? 0;
      if (index <= failAttempts) {
        throw new Error(`injected failure (JOB_FAULT_INJECTION fail-attempts=${Number.isFinite(failAttempts) ? failAttempts : 'all'}): attempt ${index} fails on purpose`);
      }
      const summary = await this.untilStopped(this.o.handler.run(ctx), signal);
      return { kind: 'succeeded', summary };
    } catch (err) {
      if (this.stop.aborted) return { kind: 'stopped', stop: stopOf(this.stop) };
      // The heartbeat found the lock's connection gone, or a statement failed on a lost connection:
      // no retry may run without the lock, so the runner reconnects and takes it again.
      if (lost.signal.aborted) return { kind: 'error', error: stopOf(lost.signal).message, disconnected: true };
      if (isConnectionError(err) || !(await this.locks[0]!.verify())) {
        return { kind: 'error', error: `lost the database connection: ${errorText(err)}`, disconnected: true };
      }
      return { kind: 'error', error: errorText(err), disconnected: false };
    } finally {
      open = false;
      clearInterval(heartbeat);
      await beating;
      this.progressLine.stop();
      this.phase = 'recording the outcome';
    }
  }

  /** The handler's promise, or a rejection once `signal` aborted and the grace period passed without it. */
  private untilStopped<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
    const graceMs = Math.floor(this.o.config.SHUTDOWN_TIMEOUT_MS * STOP_GRACE_SHARE);
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => {
        timer = setTimeout(() => reject(new Error(`the handler did not stop within ${graceMs} ms`)), graceMs);
      };
      work.then(resolve, reject).finally(() => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      });
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Records the end of an attempt on the lock's connection, or through the pool when that connection is gone. */
  private async finish(runId: string, status: 'succeeded' | 'failed' | 'interrupted', error: string | null): Promise<void> {
    const p = this.progress.snapshot();
    const sql = `UPDATE job_runs SET status = $2, finished_at = now(), processed = $3, total = $4, error = $5 WHERE id = $1 AND status = 'running'`;
    const params = [runId, status, p.processed, p.total, error];
    const runLock = this.locks[0];
    if (runLock?.held) {
      try {
        await runLock.connection.query(sql, params);
        return;
      } catch (err) {
        this.log.warn({ err: errorText(err) }, 'could not record the outcome on the lock connection; trying through the pool');
      }
    }
    await this.o.pool.query(sql, params);
  }

  /** The run stopped before any attempt started: SIGTERM (interrupted) or the timeout (failed, recorded, alerted). */
  private async stoppedBeforeStart(db: PoolClient, stop: Stop, where = 'before it started'): Promise<RunOutcome> {
    if (stop.reason === 'shutdown') {
      this.log.warn({ outcome: 'interrupted' }, `${this.job.name} interrupted ${where} (${stop.message}); nothing was done; rerun the same scheduled time`);
      return { kind: 'interrupted' };
    }
    const message = `${stop.message} ${where}`;
    const ranOn = (await this.location).ranOn;
    // The row carries the previous attempt's checkpoint: the next run resumes from the last attempt's.
    const { rows } = await db.query<{ id: string }>(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, finished_at, error, ran_on, checkpoint)
       SELECT $1, $2, 'failed', coalesce(max(attempt), 0) + 1, now(), $3, $4,
              (SELECT checkpoint FROM job_runs WHERE job = $1 AND scheduled_time = $2 ORDER BY attempt DESC LIMIT 1)
       FROM job_runs WHERE job = $1 AND scheduled_time = $2
       RETURNING id::text`,
      [this.job.name, this.iso, message, ranOn],
    );
    this.runId = rows[0]!.id;
    this.log.error({ outcome: 'failed', reason: stop.reason, runId: this.runId }, `${this.job.name} failed: ${message}`);
    return this.finalFailure(stop.reason, message);
  }

  /**
   * Alerts a crash of the process (an uncaught exception or rejection: a bug). The run was
   * recorded "interrupted" and resumes from its checkpoint; the process exits 1 after this.
   */
  async alertCrash(crash: { readonly kind: string; readonly error: string }): Promise<void> {
    await this.finalFailure('error', `the process crashed (${crash.kind}: ${crash.error}); the run is recorded "interrupted", and a rerun resumes from its checkpoint`);
  }

  private async finalFailure(reason: StopReason | 'error', error: string): Promise<RunOutcome> {
    const durationMs = this.elapsedMs();
    this.metrics.emit({ duration: durationMs, failed: 1 }, { outcome: 'failed', reason }, 'run failed');
    this.phase = 'sending the failure alert';
    await sendFailureAlert(
      {
        job: this.job.name,
        scheduledTime: this.o.scheduledTime,
        period: this.period,
        runId: this.runId,
        attempts: this.attemptsMade,
        maxAttempts: this.job.retries + 1,
        durationMs,
        error,
        location: await this.location,
      },
      { topicArn: this.o.config.ALERT_TOPIC_ARN, logger: this.log },
    );
    return { kind: 'failed', reason, runId: this.runId, attempts: this.attemptsMade, error };
  }

  private elapsedMs(): number {
    return Math.round(performance.now() - this.startedAt);
  }
}

/** Exponential backoff with jitter: about base·2^(n-1), between half and all of it, at most MAX_BACKOFF_MS. */
export function backoffMs(baseMs: number, failedAttempts: number, random: () => number = Math.random): number {
  const ceiling = Math.min(MAX_BACKOFF_MS, baseMs * 2 ** (failedAttempts - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/**
 * Postgres frees a dead client's advisory locks only once it notices the connection is gone.
 * A Fargate task that is killed may never send a FIN, and the kernel's default keepalive
 * would take two hours to notice; with these, a dead lock holder is found within a minute.
 */
async function keepDeadPeersDetectable(db: PoolClient): Promise<void> {
  await db.query(
    `SELECT set_config('tcp_keepalives_idle', '20', false), set_config('tcp_keepalives_interval', '10', false), set_config('tcp_keepalives_count', '3', false)`,
  );
}

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
