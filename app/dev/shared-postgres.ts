/**
 * One local Postgres for every local command: the first launcher that starts it (usually
 * `npm start`) publishes it in a small state file next to its data folder, and every later
 * command (`seed`, `job`, `runs`, `migrate`, `jobs`) finds it there and uses it, with no
 * variable to set.
 *
 *   .data/postgres.running.json   { pid, url } of the Postgres host, removed when it stops
 *   .data/postgres.users/<pid>    one empty file per command using it
 *
 * A state file is believed only while its host process is alive and Postgres answers on its
 * port: a host killed with SIGKILL leaves a stale file, which is then ignored. The host stops
 * Postgres when its own launcher ends and no registered user is alive any more, so Ctrl-C on
 * `npm start` never pulls the database from under a `npm run seed` still at work.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export interface RunningPostgres {
  /** The host process (pg-host) holding Postgres. */
  readonly pid: number;
  /** URL of the cluster's `postgres` database. */
  readonly adminUrl: string;
}

function paths(dataDir: string): { state: string; users: string } {
  const base = path.resolve(dataDir);
  return { state: `${base}.running.json`, users: `${base}.users` };
}

/** The URL with its password replaced by `***`: for anything printed. */
export function maskUrl(url: string): string {
  return url.replace(/:[^:@/]*@/, ':***@');
}

/** The same cluster, another database. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but belongs to another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Written by the host once Postgres is up; atomically, so a reader never sees half a file. */
export function publish(dataDir: string, running: RunningPostgres): void {
  const { state } = paths(dataDir);
  mkdirSync(path.dirname(state), { recursive: true });
  const tmp = `${state}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(running)}\n`, { mode: 0o600 });
  renameSync(tmp, state);
}

/** Removes the state file if it is still this host's. */
export function unpublish(dataDir: string, pid: number): void {
  const { state } = paths(dataDir);
  if (readState(state)?.pid === pid) rmSync(state, { force: true });
}

function readState(file: string): RunningPostgres | undefined {
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<RunningPostgres>;
    return typeof parsed.pid === 'number' && typeof parsed.adminUrl === 'string' ? { pid: parsed.pid, adminUrl: parsed.adminUrl } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The running local Postgres for this data folder, with `database` created in it if missing;
 * undefined when none is running (no state file, its host gone, or Postgres not answering).
 */
export async function findRunning(dataDir: string, database: string): Promise<(RunningPostgres & { url: string }) | undefined> {
  const running = readState(paths(dataDir).state);
  if (!running || !alive(running.pid)) return undefined;
  // Loaded only now: `npm run jobs` with no Postgres running never pays for it.
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: running.adminUrl, connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (!rowCount) await client.query(`CREATE DATABASE "${database.replaceAll('"', '""')}"`).catch((err: { code?: string }) => {
      // Another command created it at the same moment.
      if (err.code !== '42P04' && err.code !== '23505') throw err;
    });
    return { ...running, url: withDatabase(running.adminUrl, database) };
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}

/** Marks this process as a user of the running Postgres until it exits, or until the returned function is called. */
export function register(dataDir: string): () => void {
  const { users } = paths(dataDir);
  mkdirSync(users, { recursive: true });
  const file = path.join(users, String(process.pid));
  writeFileSync(file, '');
  const unregister = () => rmSync(file, { force: true });
  process.once('exit', unregister);
  return () => {
    process.off('exit', unregister);
    unregister();
  };
}

/** The registered users still alive (the files of dead ones are removed on the way). */
export function liveUsers(dataDir: string): number[] {
  const { users } = paths(dataDir);
  if (!existsSync(users)) return [];
  const pids: number[] = [];
  for (const name of readdirSync(users)) {
    const pid = Number(name);
    if (Number.isInteger(pid) && pid !== process.pid && alive(pid)) pids.push(pid);
    else rmSync(path.join(users, name), { force: true });
  }
  return pids;
}
