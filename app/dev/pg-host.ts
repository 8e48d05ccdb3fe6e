/**
 * Holds the local embedded Postgres for `npm start` and the operator scripts.
 *
 * Started by `spawnPostgresHost` in its own process group, so the terminal's Ctrl-C reaches
 * the API (which drains) but not Postgres; the launcher stops Postgres after the API has
 * exited. If the parent dies, the IPC channel closes and Postgres is stopped all the same.
 */
import pg from 'pg';
import { startEmbeddedPostgres } from './embedded-postgres.js';

const dataDir = process.env.LOCAL_PG_DATA_DIR ?? '.data/postgres';
const port = Number(process.env.LOCAL_PG_PORT ?? 54329);
const database = process.env.LOCAL_PG_DATABASE ?? 'app';
const persistent = process.env.LOCAL_PG_PERSISTENT !== 'false';

async function main(): Promise<void> {
  const handle = await startEmbeddedPostgres({ dataDir, port, persistent });
  const admin = new pg.Client(handle.url());
  await admin.connect();
  const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
  if (!rowCount) await admin.query(`CREATE DATABASE "${database}"`);
  await admin.end();

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await handle.stop();
    process.exit(0);
  };
  process.on('message', (m) => m === 'stop' && void stop());
  process.on('disconnect', () => void stop());
  process.on('SIGTERM', () => void stop());
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
