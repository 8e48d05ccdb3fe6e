/**
 * The oldest PostgreSQL the migrations run on. They use what Postgres 17 brought (the MAINTAIN
 * right, app/migrations/*_runtime-role.sql) and 16 (`GRANT ... WITH INHERIT FALSE, SET TRUE`):
 * on an older server they would stop midway on a syntax error, so the migrate command asks
 * first and stops, before it changes anything, with one line that names both versions.
 */
import { UsageError } from './errors.js';

/** The oldest major version the migrations support. */
export const SUPPORTED_MAJOR = 17;

type Queryable = { query: (sql: string) => Promise<{ rows: unknown[] }> };

/** Throws a UsageError (exit 2) when the server is older than SUPPORTED_MAJOR. */
export async function requireSupportedServer(db: Queryable): Promise<void> {
  const { rows } = await db.query(`SELECT current_setting('server_version_num') AS num, current_setting('server_version') AS version`);
  const { num, version } = rows[0] as { num: string; version: string };
  const major = Math.floor(Number(num) / 10_000);
  if (!(major >= SUPPORTED_MAJOR)) {
    throw new UsageError(`PostgreSQL ${version} found (server_version_num ${num}); this needs PostgreSQL ${SUPPORTED_MAJOR} or later. Nothing was changed: upgrade the server, then migrate again`);
  }
}
