/**
 * Applies the SQL migrations in app/migrations with node-pg-migrate.
 *
 * node-pg-migrate takes a Postgres advisory lock (its own well-known key) around the whole
 * run. Its "wait" mode blocks in pg_advisory_lock: silent, unbounded, deaf to SIGTERM. So
 * this takes the lock in its "fail" mode and does the waiting itself: the first wait is
 * logged with who holds the lock (pid, application, since when), every LOG_EVERY_MS again,
 * a shutdown stops it at once, and at MIGRATION_LOCK_TIMEOUT_MS it gives up with an error
 * that says so. N replicas starting together: the first migrates, the others wait a moment
 * and find nothing left to do.
 */
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { PG_MIGRATE_LOCK_ID, runner } from 'node-pg-migrate';
import type { Pool, PoolClient } from './db.js';
import type { Logger } from './logger.js';
import { requireSupportedServer } from './pg-version.js';
import { partitionUsage } from './usage-partitions.js';

/** The migrations folder; the build copies it next to the compiled code. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('./migrations', import.meta.url));

const LOCK_BUSY = /Another migration is already running/;
const POLL_MS = 250;
const LOG_EVERY_MS = 10_000;

export class MigrationLockTimeout extends Error {}

export interface MigrateOptions {
  /** Gives up waiting for the migration lock after this long (MIGRATION_LOCK_TIMEOUT_MS). */
  readonly lockTimeoutMs?: number;
  /** Aborts the wait (a shutdown); migrate() then resolves undefined without migrating. */
  readonly signal?: AbortSignal;
}

/**
 * Applies what is pending; the names applied, or undefined when `signal` aborted the wait. A
 * server older than the migrations support is refused first (app/pg-version.ts).
 */
export async function migrate(pool: Pool, logger: Logger, { lockTimeoutMs = Infinity, signal }: MigrateOptions = {}): Promise<string[] | undefined> {
  try {
    await requireSupportedServer(pool);
  } catch (err) {
    // A shutdown ends the pool under the check: that is the shutdown, not a failure.
    if (signal?.aborted) return undefined;
    throw err;
  }
  const t0 = performance.now();
  let loggedAt = -Infinity;
  for (;;) {
    // A shutdown that came during the check (or a wait) ends the pool: migrate nothing.
    if (signal?.aborted) return undefined;
    const applied = await migrateOnce(pool, logger);
    if (applied) {
      const names = applied.map((m) => m.name);
      logger.info({ applied: names }, names.length ? `applied ${names.length} migration(s)` : 'database schema is up to date');
      await partitionUsage(pool, logger);
      return names;
    }
    const waited = Math.round(performance.now() - t0);
    const holder = await describeHolder(pool);
    if (waited >= lockTimeoutMs) {
      throw new MigrationLockTimeout(
        `gave up waiting for the migration lock after ${waited} ms (MIGRATION_LOCK_TIMEOUT_MS=${lockTimeoutMs}); it is held by ${holder}. If that migration is stuck, end its session (SELECT pg_terminate_backend(<pid>)) and start again`,
      );
    }
    if (performance.now() - loggedAt >= LOG_EVERY_MS) {
      loggedAt = performance.now();
      logger.warn({ waitedMs: waited, holder, lockTimeoutMs }, `waiting for the migration lock, held by ${holder}; waited ${waited} ms of at most ${lockTimeoutMs} ms (MIGRATION_LOCK_TIMEOUT_MS)`);
    }
    if (signal?.aborted) return undefined;
    await sleep(POLL_MS, undefined, { signal }).catch(() => undefined);
    if (signal?.aborted) return undefined;
  }
}

/** One try: the migrations applied, or undefined when another session holds the lock. */
async function migrateOnce(pool: Pool, logger: Logger): Promise<{ name: string }[] | undefined> {
  const client = await pool.connect();
  let failure: Error | undefined;
  try {
    return await runner({
      dbClient: client,
      dir: MIGRATIONS_DIR,
      direction: 'up',
      migrationsTable: 'pgmigrations',
      advisoryLockMode: 'fail',
      checkOrder: true,
      log: () => {},
      logger: { debug: () => {}, info: () => {}, warn: (m: string) => logger.warn(m), error: (m: string) => logger.error(m) },
    });
  } catch (err) {
    if (LOCK_BUSY.test((err as Error).message)) return undefined;
    failure = err as Error;
    throw err;
  } finally {
    // A failed migration may leave the session in an unknown state: drop that connection.
    client.release(failure);
  }
}

/** "pid 4711 (ecs-saas-backend:api from 10.0.1.5, in its current state for 42 s)", or "a session that just ended". */
async function describeHolder(pool: Pool | PoolClient): Promise<string> {
  const { rows } = await pool.query<{ pid: number; app: string; addr: string | null; for_s: number | null }>(
    `SELECT a.pid, coalesce(nullif(a.application_name, ''), a.usename::text, '?') AS app, host(a.client_addr) AS addr,
            extract(epoch FROM now() - coalesce(a.xact_start, a.state_change, a.backend_start))::float8 AS for_s
     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND ((l.classid::bigint << 32) | l.objid::bigint) = $1::bigint AND l.objsubid = 1`,
    [String(PG_MIGRATE_LOCK_ID)],
  );
  const r = rows[0];
  if (!r) return 'a session that just ended';
  return `pid ${r.pid} (${r.app}${r.addr ? ` from ${r.addr}` : ''}${r.for_s === null ? '' : `, in its current transaction or state for ${Math.round(r.for_s)} s`})`;
}
