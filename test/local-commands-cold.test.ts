/**
 * Local commands on a fresh clone, in any order and at once: real launchers
 * (dist/app/dev/local.js) on a fresh data folder, with no `npm start` and nothing migrated.
 * Whichever starts the local Postgres, the others share it; each command that needs the
 * schema migrates first. And every local failure of the machine (a port taken) is one line
 * naming its fix.
 *
 * LOCAL_RACE_ROUNDS sets how many random rounds the race runs (a short pass by default);
 * LOCAL_RACE_SEED replays one.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../app/dev/embedded-postgres.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { run, start, startServer, type Proc } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const LAUNCHER = [process.execPath, path.resolve('dist/app/dev/local.js')];
const ROUNDS = Number(process.env.LOCAL_RACE_ROUNDS ?? 2);
const SEED = Number(process.env.LOCAL_RACE_SEED ?? Date.now() % 1_000_000);
/** What a newcomer types beside (or instead of) `npm start`. */
const COMMANDS = [['runs'], ['report-aggregation'], ['data-cleanup'], ['migrate'], ['seed', '--accounts', '1', '--days', '1'], ['jobs']];

const folders: string[] = [];
const started: Proc[] = [];
afterEach(() => {
  for (const p of started.splice(0)) if (p.child.exitCode === null) p.kill('SIGKILL');
});
afterAll(() => {
  for (const dir of folders) for (const f of [dir, `${dir}.users`, `${dir}.running.json`, `${dir}.lock`]) rmSync(f, { recursive: true, force: true });
});

function freshDataFolder(): string {
  mkdirSync('.data', { recursive: true });
  const dir = mkdtempSync(path.resolve('.data/cold-'));
  rmSync(dir, { recursive: true });
  folders.push(dir);
  return dir;
}

function launch(args: string[], env: Record<string, string>): Proc {
  const proc = start(args, { DATABASE_URL: undefined, ...env }, LAUNCHER);
  started.push(proc);
  return proc;
}

async function finish(proc: Proc, timeoutMs = 170_000): Promise<number> {
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const { code } = await proc.exited;
  clearTimeout(timer);
  return code;
}

/** A small seeded generator (mulberry32), so that a failing round can be replayed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

describe('local commands on a fresh clone', () => {
  it('runs and a job, started together before anything was migrated, both succeed', async () => {
    const env = { LOCAL_PG_DATA_DIR: freshDataFolder(), LOCAL_PG_PORT: String(await freePort()) };
    const procs = [launch(['runs'], env), launch(['report-aggregation'], env)];
    const codes = await Promise.all(procs.map((p) => finish(p)));
    for (const [i, p] of procs.entries()) {
      expect(codes[i], p.stderr() + p.stdout()).toBe(0);
      expect(p.stdout() + p.stderr()).not.toContain('does not exist');
    }
    // The job's run is in the one database both used.
    const runs = launch(['runs'], env);
    expect(await finish(runs)).toBe(0);
    expect(runs.stdout()).toContain('report-aggregation');
  });

  it(`${ROUNDS} rounds of 2 to 6 commands at random offsets on a fresh data folder: every one succeeds (seed ${SEED})`, async () => {
    const next = random(SEED);
    for (let round = 0; round < ROUNDS; round++) {
      const env = { LOCAL_PG_DATA_DIR: freshDataFolder(), LOCAL_PG_PORT: String(await freePort()) };
      const count = 2 + Math.floor(next() * 5);
      const plan = Array.from({ length: count }, () => ({ args: COMMANDS[Math.floor(next() * COMMANDS.length)]!, at: Math.floor(next() * 1_500) }));
      const procs = await Promise.all(plan.map(async ({ args, at }) => (await sleep(at), launch(args, env))));
      const codes = await Promise.all(procs.map((p) => finish(p)));
      for (const [i, p] of procs.entries()) {
        expect(codes[i], `round ${round} (seed ${SEED}), ${plan[i]!.args.join(' ')} at +${plan[i]!.at} ms:\n${p.stderr()}${p.stdout()}`).toBe(0);
      }
    }
  });
});

describe('a port that is taken: one line that names it, what holds it and the variable to set', () => {
  let db: TestDatabase | undefined;
  afterAll(async () => db?.drop());

  it('the local Postgres port, held by another program', async () => {
    const foreign = net.createServer();
    const port = await new Promise<number>((resolve) => foreign.listen(0, '127.0.0.1', () => resolve((foreign.address() as net.AddressInfo).port)));
    try {
      const proc = launch(['runs'], { LOCAL_PG_DATA_DIR: freshDataFolder(), LOCAL_PG_PORT: String(port) });
      expect(await finish(proc)).toBe(1);
      // This test's process holds the port: the message says so, by pid.
      expect(proc.stderr().trim()).toMatch(new RegExp(`^Port ${port} is taken by node \\(pid ${process.pid}\\), so the local Postgres cannot listen on it\\. Set LOCAL_PG_PORT to a free port \\(for example LOCAL_PG_PORT=${port + 1}\\)\\. Or set DATABASE_URL to use another database\\.$`));
    } finally {
      foreign.close();
    }
  });

  it("the API's port, held by another API (a second npm start)", async () => {
    db = await createTestDatabase();
    const env = { DATABASE_URL: db.url, ADMIN_API_KEY: randomAdminKey() };
    const first = await startServer(env);
    started.push(first);
    const second = await run([], { ...env, PORT: String(first.port) });
    expect(second.code).toBe(1);
    const fatal = second.logs.find((l) => l.level === 'fatal');
    expect(fatal?.msg).toMatch(new RegExp(`^start-up failed: Port ${first.port} is taken by node \\(pid ${first.child.pid}\\), so the API cannot listen on it\\. Set PORT to a free port`));
    expect(fatal).not.toHaveProperty('stack');
  });
});
