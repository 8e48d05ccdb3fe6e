/**
 * Server mode: migrate (unless MIGRATE_ON_START=false), serve the API, run the background workers, and drain on SIGTERM.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { requireGuessResistantAdminKey } from './admin-key-strength.js';
import { createApi } from './api.js';
import type { Config } from './config.js';
import { createPool } from './db.js';
import { Health } from './health.js';
import { DrainableServer } from './http-server.js';
import { createLogger, flushLogs } from './logger.js';
import { ensureLoginRole } from './login-role.js';
import { migrate } from './migrate.js';
import { ShutdownCoordinator, poolStep } from './shutdown.js';
import { Workers, usageSummaryTask } from './workers.js';
import { SERVICE_METRICS } from '../lib/metrics.js';
import { emf } from './jobs/emf.js';
import type { Logger } from './logger.js';
import type { ShutdownStep } from './shutdown.js';
import { inSpan, KEEP_TRACE, startTracingFor } from './tracing/trace.js';

export async function runServer(config: Config): Promise<void> {
  // Before anything starts: a guessable key stops the server (exit 2) with nothing to undo.
  if (config.ADMIN_API_KEY !== undefined) await requireGuessResistantAdminKey(config.ADMIN_API_KEY);
  const logger = createLogger(config.LOG_LEVEL, { mode: 'server' });
  const shutdown = new ShutdownCoordinator({ timeoutMs: config.SHUTDOWN_TIMEOUT_MS, logger }).install();
  const pool = createPool(config.database, {
    role: 'api',
    max: config.DB_POOL_MAX,
    logger,
    waitMs: config.DB_POOL_WAIT_MS,
    statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
  });
  const workers = new Workers(pool, logger, config.ENABLE_WORKERS ? [usageSummaryTask(config.USAGE_SUMMARY_REFRESH_MS)] : [], {
    statementTimeoutMs: config.JOB_STATEMENT_TIMEOUT_MS,
    stallPeriods: config.WORKER_STALL_PERIODS,
    metricsNamespace: config.METRICS_NAMESPACE,
  });
  const isDraining = () => shutdown.draining;
  const health = new Health({
    pool,
    logger,
    isDraining,
    poolWaitMs: config.DB_POOL_WAIT_MS,
    statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
    metricsNamespace: config.METRICS_NAMESPACE,
  });
  const http = new DrainableServer(createApi({ pool, logger, config, isDraining, liveness: () => health.liveness() }), config);

  shutdown
    .add({
      name: 'readiness',
      // /readyz already answers 503 (the coordinator is draining); give the load balancer time to notice.
      run: (signal) => sleep(config.PRE_STOP_DELAY_MS, undefined, { signal }).catch(() => undefined),
      pending: () => `PRE_STOP_DELAY_MS (${config.PRE_STOP_DELAY_MS} ms) to pass`,
    })
    .add(drainStep(http, logger, config.METRICS_NAMESPACE))
    .add(workers.shutdownStep())
    .add(poolStep(pool));
  const traces = await startTracingFor(config, logger, 'ecs-saas-backend-api');
  if (traces) shutdown.add(traces);

  if (config.MIGRATE_ON_START) {
    // A SIGTERM while waiting for another replica's migration ends the wait; the sequence then exits 0.
    await migrate(pool, logger, { lockTimeoutMs: config.MIGRATION_LOCK_TIMEOUT_MS, signal: shutdown.signal });
    if (shutdown.draining) return;
  } else {
    logger.info('MIGRATE_ON_START=false: not migrating; the deploy\'s migrations task applied them before this task started');
  }
  if (config.ADMIN_API_KEY === undefined) logger.warn('ADMIN_API_KEY is not set: only account API keys are accepted, and no one can create accounts');
  const address = await http.listen(config.PORT);
  workers.start();
  health.start();
  logger.info(
    { port: address.port, keepAliveTimeoutMs: config.KEEP_ALIVE_TIMEOUT_MS, shutdownTimeoutMs: config.SHUTDOWN_TIMEOUT_MS },
    `listening on port ${address.port}`,
  );
}

/**
 * `main.js migrate`: applies the migrations, then creates or updates the login role of the API
 * and the jobs when DB_LOGIN_ROLE is set (its rights come from a migration), closes the pool, exits.
 */
export async function runMigrate(config: Config): Promise<void> {
  const logger = createLogger(config.LOG_LEVEL, { mode: 'migrate' });
  // No statement limit: a migration may rewrite a big table.
  const pool = createPool(config.database, { role: 'migrate', max: 1, logger, waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: 0 });
  try {
    await migrate(pool, logger, { lockTimeoutMs: config.MIGRATION_LOCK_TIMEOUT_MS });
    if (config.loginRole) {
      const client = await pool.connect();
      try {
        await ensureLoginRole(client, config.loginRole, logger);
      } finally {
        client.release();
      }
    }
  } finally {
    await pool.end();
    flushLogs();
  }
}


/**
 * The "http" step, in a span of its own (its events: the listener closed, the idle sockets
 * closed, the last request answered), and its duration as the DrainDuration metric.
 */
function drainStep(http: DrainableServer, logger: Logger, namespace: string): ShutdownStep {
  const step = http.shutdownStep();
  const metrics = logger.child({}, { level: 'info' });
  return {
    ...step,
    run: (signal) =>
      inSpan('drain', { [KEEP_TRACE]: true }, async () => {
        const t0 = performance.now();
        await step.run(signal);
        const ms = Math.round(performance.now() - t0);
        metrics.info(emf(namespace, {}, { [SERVICE_METRICS.drainDuration]: { value: ms, unit: 'Milliseconds' } }), `metrics: drained in ${ms} ms`);
      }),
  };
}
