/**
 * In-process background workers: periodic tasks that run inside the server process.
 *
 * Every replica runs the same loop, but a task only runs on the replica that holds its
 * advisory lock (`worker:<name>`), so exactly one replica runs it at a time. The leader keeps
 * the lock, on its own dedicated connection, for as long as it lives; the others try again
 * every period, so when the leader dies (its connection closes and Postgres frees the lock)
 * another one takes over within one period. On stop, each task finishes its current batch,
 * then releases the lock, then the connection.
 *
 * A leader whose lock connection dies (a database restart, pg_terminate_backend, a network
 * reset) has lost the lock with it: it logs that, frees the dead client and tries to lead
 * again on its next period like every other replica, so within two periods of the database
 * coming back exactly one replica leads again. A replica that has neither completed a batch
 * nor seen the lock held by a live leader elsewhere for WORKER_STALL_PERIODS periods reports
 * the worker stalled, once in the log and every period as the WorkerStalled EMF metric that
 * the stack's alarm reads.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { SERVICE_METRICS, USAGE_SUMMARY_WORKER, WORKER_DIMENSION } from '../lib/metrics.js';
import type { Pool, PoolClient } from './db.js';
import { emf } from './jobs/emf.js';
import type { Logger } from './logger.js';
import { AdvisoryLock } from './lock.js';
import type { ShutdownStep } from './shutdown.js';
import { errorText } from './shutdown.js';

export interface TaskContext {
  /** The connection that holds the task's lock; run the batch's queries on it. */
  readonly db: PoolClient;
  readonly logger: Logger;
  /** Aborts when the process starts to shut down; a batch may check it between steps. */
  readonly signal: AbortSignal;
}

export interface PeriodicTask {
  /** Names the lock (`worker:<name>`) and the log lines. */
  readonly name: string;
  /** Time between the end of one batch and the start of the next, and between two lock attempts. */
  readonly intervalMs: number;
  /** One batch of work. */
  runOnce(ctx: TaskContext): Promise<void>;
}

export interface WorkerOptions {
  /** The lock connection's statement_timeout: a batch may run longer than an API query (JOB_STATEMENT_TIMEOUT_MS). */
  readonly statementTimeoutMs: number;
  /** Periods without progress before the worker is reported stalled (WORKER_STALL_PERIODS). */
  readonly stallPeriods: number;
  /** CloudWatch namespace of the WorkerStalled metric (METRICS_NAMESPACE). */
  readonly metricsNamespace: string;
}

interface Loop {
  readonly task: PeriodicTask;
  readonly lock: AdvisoryLock;
  batchRunning: boolean;
  /** When this replica last saw the task make progress: a batch done here, or a live leader elsewhere. */
  progressAt: number;
  stalled: boolean;
  done?: Promise<void>;
}

export class Workers {
  private readonly loops: Loop[];
  private readonly controller = new AbortController();
  private readonly metricsOut: Logger;

  constructor(
    pool: Pool,
    private readonly logger: Logger,
    tasks: readonly PeriodicTask[],
    private readonly options: WorkerOptions,
  ) {
    this.loops = tasks.map((task) => ({
      task,
      lock: new AdvisoryLock(pool, `worker:${task.name}`, logger),
      batchRunning: false,
      progressAt: performance.now(),
      stalled: false,
    }));
    // The metric must not vanish under LOG_LEVEL=warn.
    this.metricsOut = logger.child({}, { level: 'info' });
  }

  start(): void {
    for (const loop of this.loops) loop.done = this.run(loop);
  }

  /** Stops every loop after its current batch and releases its lock. */
  async stop(): Promise<void> {
    this.controller.abort();
    await Promise.all(this.loops.map((loop) => loop.done));
  }

  shutdownStep(): ShutdownStep {
    return {
      name: 'workers',
      run: () => this.stop(),
      pending: () => {
        const busy = this.loops.filter((l) => l.batchRunning).map((l) => l.task.name);
        return busy.length ? `the current batch of ${busy.join(', ')}` : 'the worker locks to be released';
      },
      force: () => this.loops.forEach((l) => l.lock.destroy()),
    };
  }

  private async run(loop: Loop): Promise<void> {
    const { task, lock } = loop;
    const signal = this.controller.signal;
    const log = this.logger.child({ worker: task.name });
    while (!signal.aborted) {
      let lastError: string | undefined;
      try {
        if (lock.broken || (lock.held && !(await lock.verify()))) {
          log.warn(
            { lockKey: lock.key },
            `worker ${task.name}: the connection holding its lock died, so the lock is gone; released the dead connection, trying to lead again now`,
          );
          await lock.release();
        }
        if (!lock.held) {
          if (await lock.tryAcquire()) {
            await lock.connection.query(`SELECT set_config('statement_timeout', $1, false)`, [String(this.options.statementTimeoutMs)]);
            log.info({ lockKey: lock.key }, `took the lock for worker ${task.name}; this replica runs it now`);
          } else {
            // Another session holds it, and Postgres frees a dead session's locks: a live leader.
            loop.progressAt = performance.now();
          }
        }
        if (lock.held && !signal.aborted) {
          loop.batchRunning = true;
          const t0 = Date.now();
          await task.runOnce({ db: lock.connection, logger: log, signal });
          loop.progressAt = performance.now();
          log.info({ ms: Date.now() - t0 }, `worker ${task.name}: batch done in ${Date.now() - t0} ms`);
        }
      } catch (err) {
        lastError = errorText(err);
        log.error({ err: lastError }, `worker ${task.name}: batch failed; retrying in ${task.intervalMs} ms`);
      } finally {
        loop.batchRunning = false;
      }
      if (!signal.aborted) this.checkStall(loop, log, lastError);
      await sleep(task.intervalMs, undefined, { signal }).catch(() => undefined);
    }
    await lock.release();
    log.info(`worker ${task.name} stopped`);
  }

  private checkStall(loop: Loop, log: Logger, lastError: string | undefined): void {
    const { task } = loop;
    const sinceMs = Math.round(performance.now() - loop.progressAt);
    const stalled = sinceMs >= this.options.stallPeriods * task.intervalMs;
    if (stalled && !loop.stalled) {
      log.error(
        { sinceMs, stallPeriods: this.options.stallPeriods, lastError },
        `worker ${task.name} stalled: no batch completed here and no live leader elsewhere for ${sinceMs} ms (${this.options.stallPeriods} periods of ${task.intervalMs} ms)${lastError ? `; last error: ${lastError}` : ''}`,
      );
    } else if (!stalled && loop.stalled) {
      log.info(`worker ${task.name} runs again after a stall`);
    }
    loop.stalled = stalled;
    if (stalled) {
      this.metricsOut.info(
        emf(this.options.metricsNamespace, { [WORKER_DIMENSION]: task.name }, { [SERVICE_METRICS.workerStalled]: { value: 1, unit: 'Count' } }),
        `metrics: worker ${task.name} stalled`,
      );
    }
  }
}

/**
 * Refreshes account_usage_30d, the usage summary GET /accounts/:id shows. CONCURRENTLY keeps
 * the view readable during the refresh.
 */
export function usageSummaryTask(intervalMs: number): PeriodicTask {
  return {
    name: USAGE_SUMMARY_WORKER,
    intervalMs,
    async runOnce({ db }) {
      await db.query('REFRESH MATERIALIZED VIEW CONCURRENTLY account_usage_30d');
    },
  };
}
