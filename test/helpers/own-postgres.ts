/**
 * A Postgres cluster of one test file's own, on a fixed port, that the test may stop and
 * start again (a restart, a failover): the run's shared cluster serves every other file and
 * must never be touched.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort, spawnPostgresHost, type PostgresHost } from '../../app/dev/embedded-postgres.js';
import { createLogger } from '../../app/logger.js';
import { migrate } from '../../app/migrate.js';
import { clientOf } from './db.js';
import type { Database } from './jobs.js';

export interface OwnPostgres extends Database {
  /** URL of the cluster's `app` database, migrated. */
  readonly url: string;
  /** Stops Postgres (a fast shutdown: sessions end with 57P01), waits `downMs`, starts it again on the same port and data. */
  restart(downMs?: number): Promise<void>;
  /** Stops Postgres and deletes its data. */
  destroy(): Promise<void>;
}

export async function startOwnPostgres(): Promise<OwnPostgres> {
  const port = await freePort();
  const dataDir = `.data/fault-postgres-${randomBytes(4).toString('hex')}`;
  const options = { dataDir, port, persistent: true, database: 'app' };
  let host: PostgresHost = await spawnPostgresHost(options);
  const url = host.url;
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  await migrate(pool, createLogger('warn'));
  await pool.end();
  const withClient = clientOf(url);
  return {
    url,
    withClient,
    query: (sql, params) => withClient(async (c) => (await c.query(sql, params)).rows),
    async restart(downMs = 0) {
      await host.stop();
      await sleep(downMs);
      host = await spawnPostgresHost(options);
    },
    async destroy() {
      await host.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
