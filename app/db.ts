/**
 * The process's one Postgres pool. Every connection it opens carries `application_name`,
 * so `pg_stat_activity` can count (and tests can prove the absence of) our connections.
 */
import pg from 'pg';
import type { DatabaseSettings } from './config.js';
import type { Logger } from './logger.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export const APPLICATION_NAME_PREFIX = 'ecs-saas-backend';

export interface PoolOptions {
  /** Appears in pg_stat_activity.application_name as `ecs-saas-backend:<role>`. */
  readonly role: string;
  readonly max: number;
  readonly logger: Logger;
}

export function createPool(settings: DatabaseSettings, { role, max, logger }: PoolOptions): Pool {
  const pool = new pg.Pool({
    ...settings,
    application_name: `${APPLICATION_NAME_PREFIX}:${role}`,
    max,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
  });
  // An idle connection the server dropped is reported here instead of crashing the process.
  pool.on('error', (err) => logger.warn({ err: err.message }, 'idle database connection failed; the pool replaces it'));
  return pool;
}
