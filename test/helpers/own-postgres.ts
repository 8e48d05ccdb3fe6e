/**
 * A Postgres cluster of one test file's own, on a fixed port, that the test may stop and
 * start again (a restart, a failover): the run's shared cluster serves every other file and
 * must never be touched.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
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
  /**
   * Crashes Postgres: an immediate shutdown (SIGQUIT to the postmaster), which writes nothing
   * more, so WAL not yet flushed is lost as in a power cut; then starts it again, which
   * recovers from the WAL on disk.
   */
  crash(): Promise<void>;
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
    async crash() {
      const postmaster = Number(readFileSync(path.join(host.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      // The host holding Postgres (app/dev/pg-host.ts) is the postmaster's parent; it would wait for a clean stop forever.
      const holder = Number(readFileSync(`/proc/${postmaster}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
      process.kill(postmaster, 'SIGQUIT');
      while (alive(postmaster)) await sleep(20);
      process.kill(holder, 'SIGKILL');
      while (alive(holder)) await sleep(20);
      host = await spawnPostgresHost(options);
    },
    async destroy() {
      await host.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
