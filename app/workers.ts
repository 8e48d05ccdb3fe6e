/**
 * In-process background workers: periodic tasks that run inside the server process.
 *
 * Every replica runs the same loop, but a task only runs on the replica that holds its
 * advisory lock (`worker:<name>`), so exactly one replica runs it at a time. The leader keeps
 * the lock, on its own dedicated connection, for as long as it lives; the others try again
 * every period, so when the leader dies (its connection closes and Postgres frees the lock)
 * another one takes over within one period. On stop, each task finishes its current batch,
 * then releases the lock, then the connection.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolClient } from './db.js';
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

interface Loop {
  readonly task: PeriodicTask;
  readonly lock: AdvisoryLock;
  batchRunning: boolean;
  done?: Promise<void>;
}

export class Workers {
  private readonly loops: Loop[];
  private readonly controller = new AbortController();

  constructor(
    pool: Pool,
    private readonly logger: Logger,
    tasks: readonly PeriodicTask[],
  ) {
    this.loops = tasks.map((task) => ({ task, lock: new AdvisoryLock(pool, `worker:${task.name}`, logger), batchRunning: false }));
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
      try {
        if (lock.held && !(await lock.verify())) {
          log.warn('lost the worker lock with its connection; will try to take it again');
          await lock.release();
        }
        if (!lock.held && (await lock.tryAcquire())) {
          log.info({ lockKey: lock.key }, `took the lock for worker ${task.name}; this replica runs it now`);
        }
        if (lock.held && !signal.aborted) {
          loop.batchRunning = true;
          const t0 = Date.now();
          await task.runOnce({ db: lock.connection, logger: log, signal });
          log.info({ ms: Date.now() - t0 }, `worker ${task.name}: batch done in ${Date.now() - t0} ms`);
        }
      } catch (err) {
        log.error({ err: errorText(err) }, `worker ${task.name}: batch failed; retrying in ${task.intervalMs} ms`);
      } finally {
        loop.batchRunning = false;
      }
      await sleep(task.intervalMs, undefined, { signal }).catch(() => undefined);
    }
    await lock.release();
    log.info(`worker ${task.name} stopped`);
  }
}

/**
 * Refreshes account_usage_30d, the usage summary GET /accounts/:id shows. CONCURRENTLY keeps
 * the view readable during the refresh.
 */
export function usageSummaryTask(intervalMs: number): PeriodicTask {
  return {
    name: 'usage-summary',
    intervalMs,
    async runOnce({ db }) {
      await db.query('REFRESH MATERIALIZED VIEW CONCURRENTLY account_usage_30d');
    },
  };
}
