/**
 * Applies the SQL migrations in app/migrations with node-pg-migrate.
 *
 * node-pg-migrate takes a Postgres advisory lock (its own well-known key) around the whole
 * run; in "wait" mode N replicas starting together queue on it, the first migrates and the
 * others find nothing left to do.
 */
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import type { Pool } from './db.js';
import type { Logger } from './logger.js';

/** The migrations folder; the build copies it next to the compiled code. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('./migrations', import.meta.url));

export async function migrate(pool: Pool, logger: Logger): Promise<string[]> {
  const client = await pool.connect();
  let failure: Error | undefined;
  try {
    const applied = await runner({
      dbClient: client,
      dir: MIGRATIONS_DIR,
      direction: 'up',
      migrationsTable: 'pgmigrations',
      advisoryLockMode: 'wait',
      checkOrder: true,
      log: () => {},
      logger: { debug: () => {}, info: () => {}, warn: (m: string) => logger.warn(m), error: (m: string) => logger.error(m) },
    });
    const names = applied.map((m) => m.name);
    logger.info({ applied: names }, names.length ? `applied ${names.length} migration(s)` : 'database schema is up to date');
    return names;
  } catch (err) {
    failure = err as Error;
    throw err;
  } finally {
    // A failed migration may leave the session in an unknown state: drop that connection.
    client.release(failure);
  }
}
