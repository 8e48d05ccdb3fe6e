/**
 * Holds the local embedded Postgres for `npm start` and the operator scripts.
 *
 * Started by `spawnPostgresHost` in its own process group, so the terminal's Ctrl-C reaches
 * the API (which drains) but not Postgres; the launcher stops Postgres after the API has
 * exited. If the parent dies, the IPC channel closes and Postgres is stopped all the same.
 *
 * A persistent cluster (the launcher's) is published for the other local commands
 * (shared-postgres.ts); asked to stop while one of them still uses it, the host lets its
 * launcher go and stops Postgres once the last user has exited.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { DEFAULT_LOCAL_PG_PORT, startEmbeddedPostgres } from './embedded-postgres.js';
import { lockLocalPostgres } from './local-lock.js';
import { liveUsers, publish, unpublish } from './shared-postgres.js';

const dataDir = process.env.LOCAL_PG_DATA_DIR ?? '.data/postgres';
const port = Number(process.env.LOCAL_PG_PORT ?? DEFAULT_LOCAL_PG_PORT);
const database = process.env.LOCAL_PG_DATABASE ?? 'app';
const persistent = process.env.LOCAL_PG_PERSISTENT !== 'false';

async function main(): Promise<void> {
  // DEBUG shows Postgres's own log, for a start that fails with no clear reason.
  const onLog = process.env.DEBUG ? (line: string) => process.stderr.write(`postgres: ${line}\n`) : undefined;
  const handle = await startEmbeddedPostgres({ dataDir, port, persistent, onLog });
  const admin = new pg.Client(handle.url());
  await admin.connect();
  const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
  if (!rowCount) await admin.query(`CREATE DATABASE "${database}"`);
  await admin.end();

  let stopping = false;
  const stopNow = async () => {
    if (stopping) return;
    stopping = true;
    if (persistent) unpublish(dataDir, process.pid);
    await handle.stop();
    process.exit(0);
  };
  let handedOver = false;
  const stopWhenUnused = async () => {
    if (handedOver) return;
    handedOver = true;
    if (!persistent) return stopNow();
    let kept = false;
    for (;;) {
      let users = liveUsers(dataDir);
      if (users.length > 0 && !kept) {
        kept = true;
        process.stderr.write(`local Postgres stays up while ${users.length === 1 ? 'process' : 'processes'} ${users.join(', ')} ${users.length === 1 ? 'uses' : 'use'} it; it stops when they end\n`);
        // The launcher may exit now: it waits for 'kept' or for this process's exit.
        if (process.connected) process.send?.('kept', () => process.disconnect());
      }
      while (users.length > 0) {
        await sleep(500);
        users = liveUsers(dataDir);
      }
      // Decided under the data folder's lock: a command that looks for this Postgres meanwhile
      // either registers before this second look (and it stays up), or finds it gone and starts its own.
      const release = await lockLocalPostgres(dataDir);
      if (liveUsers(dataDir).length === 0) {
        unpublish(dataDir, process.pid);
        await handle.stop();
        await release();
        process.exit(0);
      }
      await release();
    }
  };
  process.on('message', (m) => m === 'stop' && void stopWhenUnused());
  process.on('disconnect', () => void stopWhenUnused());
  process.on('SIGTERM', () => void stopNow());
  if (persistent) publish(dataDir, { pid: process.pid, adminUrl: handle.url() });
  process.send?.({ url: handle.url(database), dataDir: handle.dataDir, port });
}

/** Tells the parent why, in one line (it prints it without a stack), and exits. */
function fail(err: unknown): never {
  const message = err instanceof Error ? err.message : String(err ?? 'Postgres failed to start');
  const denied = /\bEACCES\b/.test(message) ? ' (the postgres user, which Postgres runs as under root, cannot reach a file it needs)' : '';
  process.send?.({ error: `${message.split('\n')[0]}${denied}` });
  process.exit(1);
}

// embedded-postgres emits a failed spawn (EACCES, ENOENT) as an 'error' event nobody handles.
process.on('uncaughtException', fail);
main().catch(fail);
