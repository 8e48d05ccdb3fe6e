/**
 * `node dist/app/main.js <job> [--scheduled-time ISO] [--force]`: runs one scheduled job
 * through the runner and exits with its outcome's code (app/errors.ts EXIT).
 *
 * The process registers two shutdown steps, job → pool (then traces, with tracing on). SIGTERM (ECS StopTask, a Spot
 * interruption, a deploy) aborts the job's signal; the job step waits for the runner to
 * record the run `interrupted` and release its locks; the pool closes; the logs flush; the
 * process exits 3, all under SHUTDOWN_TIMEOUT_MS. A run that ends by itself goes through
 * the same sequence.
 */
import { findJob, type JobName } from '../../lib/jobs.js';
import type { Config } from '../config.js';
import { createPool, openConnections } from '../db.js';
import { UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import { ShutdownCoordinator, poolStep } from '../shutdown.js';
import { EXIT } from '../errors.js';
import type { JobArgs } from './args.js';
import { CONNECTIONS_AT_ONCE, HANDLERS } from './registry.js';
import { startTracingFor } from '../tracing/trace.js';
import { JobRunner, LOCK_CONNECTIONS, LOCK_CONNECTION_READY, exitCodeOf } from './runner.js';

/** Runs job `name` for its parsed arguments (app/jobs/args.ts). */
export async function runJobCommand(name: string, jobArgs: JobArgs, config: Config): Promise<void> {
  const job = findJob(name);
  if (!job) throw new UsageError(`Unknown job "${name}".`, 'UNKNOWN_JOB');
  const { scheduledTime, scheduledTimeSource, force } = jobArgs;

  const logger = createLogger(config.LOG_LEVEL, { mode: 'job', job: name });
  // The two lock connections come on top: with DB_POOL_MAX=2 they would leave the handler none.
  const pool = createPool(config.database, {
    role: `job:${name}`,
    max: config.DB_POOL_MAX + LOCK_CONNECTIONS,
    logger,
    waitMs: config.DB_POOL_WAIT_MS,
    statementTimeoutMs: config.JOB_STATEMENT_TIMEOUT_MS,
  });
  // The locks' connections, and those the job's run uses at once, open (and load their caches)
  // while the handler loads, side by side, instead of one after the other as the run asks for
  // them. The run waits for them: the handshakes move on only between the modules' loads, and a
  // lock asking for a connection while they are under way would open another.
  const opened = openConnections(pool, LOCK_CONNECTIONS + CONNECTIONS_AT_ONCE[name as JobName](config), LOCK_CONNECTION_READY);
  // Tracing loads beside the handler, after the job's first line.
  const [handler, traces] = await Promise.all([HANDLERS[name as JobName](), startTracingFor(config, logger, 'ecs-saas-backend-jobs'), opened]);
  // Exit 1 tells the execution "failed, alerted": only true once the runner's alert went out.
  let runner: JobRunner | undefined;
  const failureCode = () => (runner?.alerted ? EXIT.failure : EXIT.unalerted);
  const shutdown = new ShutdownCoordinator({ timeoutMs: config.SHUTDOWN_TIMEOUT_MS, logger, failureCode }).install();
  runner = new JobRunner({
    job,
    handler,
    pool,
    config,
    logger,
    scheduledTime,
    force,
    shutdownSignal: shutdown.signal,
    faults: config.JOB_FAULT_INJECTION,
  });
  logger.info(
    { scheduledTime: scheduledTime.toISOString(), scheduledTimeSource, force, faults: config.JOB_FAULT_INJECTION },
    `running ${name} for ${scheduledTime.toISOString()} (from ${scheduledTimeSource})${force ? ' with --force' : ''}`,
  );
  const running = runner;
  const outcome = running.run();
  shutdown
    .add({
      name: 'job',
      run: async () => {
        const result = await outcome;
        // A crash is a failure even though the run is recorded "interrupted": alerted here unless
        // the run failed and the runner did, then exit 1 if an alert went out, else 4.
        if (shutdown.crashed && result.kind !== 'failed') await running.alertCrash(shutdown.crashed);
        shutdown.exitCode = shutdown.crashed ? failureCode() : exitCodeOf(result);
      },
      pending: () => running.pending(),
      force: () => running.forceRelease(),
    })
    .add(poolStep(pool));
  if (traces) shutdown.add(traces);

  const result = await outcome;
  // On SIGTERM the sequence is already under way, and the job step sets the exit code.
  if (!shutdown.draining) await shutdown.shutdown(`the end of the run (${result.kind})`, exitCodeOf(result));
}
