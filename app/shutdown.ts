/**
 * The shutdown coordinator: one ordered sequence of steps under one deadline.
 *
 * The server registers readiness → http → workers → pool; a job registers job → pool; with
 * tracing on, both add traces last (the spans still queued, app/tracing/setup.ts). The
 * coordinator always ends with the log flush. Each step is logged with its duration. A clean
 * sequence exits with `exitCode` as soon as the last step is done. At the deadline the log
 * names the step still running and what it waits for, every step's `force()` runs (sockets
 * destroyed, clients dropped), the logs are flushed and the process exits 1. A second
 * SIGTERM/SIGINT exits 1 at once. A crash (uncaughtException, unhandledRejection) logs a fatal
 * line and runs the same sequence, then exits 1. (A job's failures exit 4 instead until its
 * alert went out: `failureCode`.)
 */
import type { Logger } from './logger.js';
import { flushLogs, limitLogWaits } from './logger.js';
import { EXIT } from './errors.js';
import { takeSignals } from './signals.js';

export interface ShutdownStep {
  /** Short name, used in the log lines ("http", "workers", "pool"). */
  readonly name: string;
  /** Does the step's work; resolves when it is done. `signal` aborts at the deadline. */
  run(signal: AbortSignal): Promise<void>;
  /** What the step is still waiting for, for the deadline's log line. */
  pending?(): string;
  /** Called at the deadline on every step, run or not: give up and free what is held. */
  force?(): void;
}

export interface ShutdownOptions {
  readonly timeoutMs: number;
  readonly logger: Logger;
  /** Replaced in tests; exits the process by default. */
  readonly exit?: (code: number) => void;
  /**
   * The code of a failed sequence (a step failed, the deadline, a second signal, a crash).
   * A job answers 1 only once its alert went out, else 4 (app/errors.ts).
   * @default () => EXIT.failure
   */
  readonly failureCode?: () => number;
}

export class ShutdownCoordinator {
  /** The exit code of a sequence that completes in time; steps may change it (a job sets "interrupted"). */
  exitCode: number = EXIT.ok;
  /** The first crash (uncaughtException, unhandledRejection), if any: a job alerts it, since nothing else would. */
  crashed: { readonly kind: string; readonly error: string } | undefined;
  private readonly steps: ShutdownStep[] = [];
  private readonly controller = new AbortController();
  private readonly deadlineController = new AbortController();
  private current: ShutdownStep | undefined;
  private startedAt = 0;
  private finished = false;
  private readonly exit: (code: number) => void;
  private readonly failureCode: () => number;

  constructor(private readonly options: ShutdownOptions) {
    this.exit = options.exit ?? ((code) => process.exit(code));
    this.failureCode = options.failureCode ?? (() => EXIT.failure);
  }

  /** Aborts when shutdown begins: workers and jobs watch it to stop after their current batch. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get draining(): boolean {
    return this.controller.signal.aborted;
  }

  /** Appends a step; steps run in the order they were added. */
  add(step: ShutdownStep): this {
    this.steps.push(step);
    return this;
  }

  /** Routes SIGTERM, SIGINT and crashes into the sequence. */
  install(): this {
    // From here on the sequence answers signals: the one permanent listener (app/signals.ts)
    // hands them here instead of to the start-up guard, with no moment in between.
    takeSignals((sig) => void this.shutdown(sig, EXIT.ok));
    process.on('uncaughtException', (err) => this.crash('uncaughtException', err));
    process.on('unhandledRejection', (reason) => this.crash('unhandledRejection', reason));
    return this;
  }

  /** Starts the sequence; a second call (a second signal) exits 1 at once. */
  async shutdown(reason: string, exitCode: number = EXIT.ok): Promise<void> {
    const { logger, timeoutMs } = this.options;
    if (this.draining) {
      if (this.finished) return;
      logger.warn({ reason, step: this.current?.name }, `received ${reason} again during shutdown; exiting now`);
      this.end(this.failureCode());
      return;
    }
    this.exitCode = exitCode;
    this.startedAt = Date.now();
    this.controller.abort(reason);
    // A write to a full stdout must not hold the process past the deadline.
    limitLogWaits(this.startedAt + timeoutMs);
    const cause = /^SIG[A-Z]+$/.test(reason) ? `received ${reason}` : reason;
    logger.info({ reason, deadlineMs: timeoutMs, steps: this.steps.map((s) => s.name) }, `${cause}; shutting down (deadline ${timeoutMs} ms)`);
    const timer = setTimeout(() => this.onDeadline(), timeoutMs);
    try {
      for (const step of this.steps) {
        this.current = step;
        const t0 = Date.now();
        // `at`: a sub-millisecond epoch time, to order the step against events in other processes.
        logger.info({ step: step.name, pending: step.pending?.(), at: performance.timeOrigin + performance.now() }, `shutdown: ${step.name}`);
        try {
          await step.run(this.deadlineController.signal);
        } catch (err) {
          this.exitCode = this.failureCode();
          logger.error({ step: step.name, err: errorText(err) }, `shutdown step ${step.name} failed; going on with the next`);
        }
        if (this.finished) return;
        logger.info({ step: step.name, ms: Date.now() - t0 }, `shutdown: ${step.name} done in ${Date.now() - t0} ms`);
      }
    } finally {
      clearTimeout(timer);
    }
    this.current = undefined;
    logger.info({ ms: Date.now() - this.startedAt, exitCode: this.exitCode }, `shutdown complete in ${Date.now() - this.startedAt} ms; flushing logs and exiting ${this.exitCode}`);
    this.end(this.exitCode);
  }

  /** Logs a crash as fatal and drains; a crash during a drain only turns the exit code to 1. */
  crash(kind: string, err: unknown): void {
    this.crashed ??= { kind, error: errorText(err) };
    this.options.logger.fatal({ kind, err: errorText(err), stack: err instanceof Error ? err.stack : undefined }, `${kind}: ${errorText(err)}`);
    if (this.draining) {
      this.exitCode = this.failureCode();
      return;
    }
    void this.shutdown(kind, this.failureCode());
  }

  private onDeadline(): void {
    if (this.finished) return;
    const step = this.current;
    this.options.logger.error(
      { step: step?.name, waitingFor: step?.pending?.(), deadlineMs: this.options.timeoutMs },
      `shutdown deadline of ${this.options.timeoutMs} ms passed in step ${step?.name ?? '(none)'}, still waiting for ${step?.pending?.() ?? 'it to finish'}; forcing exit ${this.failureCode()}`,
    );
    this.deadlineController.abort(new Error('shutdown deadline passed'));
    for (const s of this.steps) {
      try {
        s.force?.();
      } catch (err) {
        this.options.logger.warn({ step: s.name, err: errorText(err) }, `forcing ${s.name} failed`);
      }
    }
    this.end(this.failureCode());
  }

  private end(code: number): void {
    this.finished = true;
    flushLogs();
    this.exit(code);
  }
}

/**
 * The "pool" step, the last before the log flush: ends the pool once every request, worker
 * and job is done with it. (Here rather than in server.ts so a job process can use it
 * without loading the HTTP stack.)
 */
export function poolStep(pool: { end(): Promise<void>; readonly totalCount: number; readonly idleCount: number }): ShutdownStep {
  return {
    name: 'pool',
    run: () => pool.end(),
    pending: () => `${pool.totalCount - pool.idleCount} checked-out connection(s) of ${pool.totalCount} to be returned`,
  };
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
