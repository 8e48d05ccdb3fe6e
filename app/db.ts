/**
 * The process's one Postgres pool. Every connection it opens carries `application_name`,
 * so `pg_stat_activity` can count (and tests can prove the absence of) our connections.
 *
 * Two bounds keep a slow or stuck database from holding a caller for ever: a connection is
 * waited for at most `waitMs` (then pg-pool throws "timeout exceeded when trying to
 * connect", which the API answers 503), and every statement is cancelled by Postgres after
 * `statementTimeoutMs` (SQLSTATE 57014). The API and the jobs set different limits.
 */
import pg from 'pg';
import type { DatabaseSettings } from './config.js';
import type { Logger } from './logger.js';
import { outsideTraces } from './tracing/trace.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export const APPLICATION_NAME_PREFIX = 'ecs-saas-backend';
/**
 * The schema this release needs, said in every session's `application_name`: a migration
 * step that an older release could not run under (usage's move to daily partitions,
 * app/usage-partitions.ts) waits while a session without it is connected.
 */
export const SCHEMA_GENERATION = 2;

/** ` schema-2`: the end of a session's application_name. */
export function schemaGenerationTag(generation: number): string {
  return ` schema-${generation}`;
}

/** `ecs-saas-backend:api schema-2`: what pg_stat_activity shows for a session of `role`. */
export function applicationName(role: string): string {
  return `${APPLICATION_NAME_PREFIX}:${role}${schemaGenerationTag(SCHEMA_GENERATION)}`;
}

export interface PoolOptions {
  /** Appears in pg_stat_activity.application_name as `ecs-saas-backend:<role> schema-<n>` (applicationName). */
  readonly role: string;
  readonly max: number;
  readonly logger: Logger;
  /** Longest wait for a free connection (DB_POOL_WAIT_MS). */
  readonly waitMs: number;
  /** Postgres cancels a statement that runs longer (DB_STATEMENT_TIMEOUT_MS, JOB_STATEMENT_TIMEOUT_MS); 0 means none. */
  readonly statementTimeoutMs: number;
}

export function createPool(settings: DatabaseSettings, { role, max, logger, waitMs, statementTimeoutMs }: PoolOptions): Pool {
  const pool = new pg.Pool({
    ...settings,
    application_name: applicationName(role),
    max,
    connectionTimeoutMillis: waitMs,
    idleTimeoutMillis: 30_000,
    statement_timeout: statementTimeoutMs,
  });
  // An idle connection the server dropped is reported here instead of crashing the process.
  // Both events run in the context of the request that opened the connection: their lines are
  // written outside it, with no trace ids of a request long answered.
  pool.on('error', (err) => outsideTraces(() => logger.warn({ err: err.message }, 'idle database connection failed; the pool replaces it')));
  // A checked-out connection has no listener of the pool's: when it dies between two queries of
  // a transaction (a restart, pg_terminate_backend), its 'error' event would be an uncaught
  // exception. The query that meets the dead connection fails all the same, and the caller
  // handles that (a 503, a job's reconnect), so the event itself is only logged.
  pool.on('connect', (client) => {
    client.on('error', (err) => outsideTraces(() => logger.warn({ err: err.message }, 'a database connection in use failed; the query on it fails and the pool drops it')));
  });
  return pool;
}

/**
 * Opens `n` connections at once and leaves them idle in the pool, so that the first statements
 * find them open; `ready`, a statement each runs first (a new backend's first statements load
 * its caches: tens of milliseconds). Never rejects: a connection that fails to open fails again,
 * and is handled, where it is first used.
 */
export async function openConnections(pool: Pool, n: number, ready?: string): Promise<void> {
  const open = async () => {
    const client = await pool.connect();
    try {
      if (ready !== undefined) await client.query(ready);
    } catch (err) {
      client.release(err as Error);
      return;
    }
    client.release();
  };
  await Promise.allSettled(Array.from({ length: n }, open));
}
