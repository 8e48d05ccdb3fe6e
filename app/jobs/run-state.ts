/**
 * What one run of the runner knows and shares among its parts (the lock protocol, settling
 * earlier runs, the attempts, reconnecting, the outcome): its options, its log, its progress,
 * the signal that stops it, the locks of its current session and the run's counters.
 */
import type { JobDefinition } from '../../lib/jobs.js';
import type { Config, JobFaults } from '../config.js';
import type { Pool, PoolClient } from '../db.js';
import { AdvisoryLock } from '../lock.js';
import type { Logger } from '../logger.js';
import { JobMetrics } from './emf.js';
import { Progress, ProgressLine } from './progress.js';
import type { AnyJobHandler } from './registry.js';
import { runLocation, type RunLocation } from './where.js';

/** The run's time out of reach: since when, how many tries, and whether the session is owed a try. */
export interface Outage {
  readonly since: number;
  tries: number;
  /** A step that waited on the clock (recording an attempt's end) reached the database again. */
  answered: boolean;
  /** The try that answer owes the session was given: only once an outage. */
  owedGiven: boolean;
}

export interface RunnerOptions {
  readonly job: JobDefinition;
  readonly handler: AnyJobHandler;
  readonly pool: Pool;
  readonly config: Config;
  readonly logger: Logger;
  readonly scheduledTime: Date;
  /** Run even when the run key already succeeded, from scratch (then resumed across reconnections from its own checkpoints). */
  readonly force: boolean;
  /** Aborts when the process starts to shut down (SIGTERM/SIGINT). */
  readonly shutdownSignal: AbortSignal;
  readonly faults?: JobFaults;
  /** Replaced in tests; the ECS task or the hostname. */
  readonly location?: Promise<RunLocation>;
}

export class RunState {
  readonly job: JobDefinition;
  /** The scheduled time as ISO-8601: half of the run key. */
  readonly iso: string;
  readonly period: string;
  readonly log: Logger;
  readonly metrics: JobMetrics;
  readonly progress = new Progress();
  readonly progressLine: ProgressLine;
  readonly location: Promise<RunLocation>;
  /** The current session's locks: the run lock first, then the job lock. */
  locks: AdvisoryLock[] = [];
  startedAt = 0;
  /** The row of the latest attempt (or of the failure recorded before any), once there is one. */
  runId: string | undefined;
  /**
   * The number of this process's first attempt of the run key: attempts from it on are this
   * run's (a forced run resumes from those, never from older ones).
   */
  firstAttempt: number | undefined;
  /** Since when the database has been out of reach, and the tries since (app/jobs/reconnect.ts); undefined while it answers. */
  outage: Outage | undefined;
  /** What last sent the run to reconnect, for the message if it gives up. */
  lastTrouble?: string;
  /** Attempts made in this process, across reconnections. */
  attemptsMade = 0;
  /** Attempts that failed by the job's own errors: these, not database trouble, spend its retries. */
  failures = 0;
  lastCheckpoint: unknown;
  /** A failure alert of this run went out: from then on the process may exit 1. */
  alerted = false;
  /** What the run is doing, for the shutdown deadline's log line. */
  phase = 'starting';
  /** The pool's connections checked out now (the handler's and the locks'): a stopped handler's statements are cancelled on them. */
  readonly checkedOut = new Set<PoolClient>();

  constructor(
    readonly o: RunnerOptions,
    /** Aborts on shutdown or timeout: the whole run stops. */
    readonly stop: AbortSignal,
  ) {
    this.job = o.job;
    this.iso = o.scheduledTime.toISOString();
    this.period = o.handler.describePeriod(o.scheduledTime);
    this.log = o.logger.child({ scheduledTime: this.iso });
    this.metrics = new JobMetrics(o.logger, o.config.METRICS_NAMESPACE, o.job.name);
    this.progressLine = new ProgressLine(o.job.name, this.progress);
    this.location = o.location ?? runLocation();
    o.pool.on('acquire', this.onAcquire).on('release', this.onRelease).on('remove', this.onRemove);
  }

  /** Stops watching the pool: the run is over (a pool may serve several runs, as in the benchmarks). */
  detach(): void {
    this.o.pool.off('acquire', this.onAcquire).off('release', this.onRelease).off('remove', this.onRemove);
  }

  private readonly onAcquire = (client: PoolClient) => void this.checkedOut.add(client);
  private readonly onRelease = (_err: Error | undefined, client: PoolClient) => void this.checkedOut.delete(client);
  private readonly onRemove = (client: PoolClient) => void this.checkedOut.delete(client);

  get timeoutMs(): number {
    return this.o.faults?.timeoutMs ?? this.job.timeoutSeconds * 1_000;
  }

  /** A lock of the current session, on its own connection (released when the session ends). */
  lock(name: string): AdvisoryLock {
    const lock = new AdvisoryLock(this.o.pool, name, this.log);
    this.locks.push(lock);
    return lock;
  }

  elapsedMs(): number {
    return Math.round(performance.now() - this.startedAt);
  }
}
