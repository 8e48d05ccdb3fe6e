/**
 * Every local command shares the local Postgres that `npm start` runs, with no variable to
 * set: real launchers (dist/app/dev/local.js) on one data folder, each told a different
 * LOCAL_PG_PORT, so that one which started a Postgres of its own instead would fail on the
 * data folder's lock or show a port that is not the first one's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../app/dev/embedded-postgres.js';
import { start, type Proc } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const SHARED_ADMIN_KEY = randomAdminKey();

const LAUNCHER = [process.execPath, path.resolve('dist/app/dev/local.js')];
const dataDir = mkdtempSync(path.resolve('.data/shared-'));
const started: Proc[] = [];
afterAll(() => {
  for (const p of started) if (p.child.exitCode === null) p.kill('SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(`${dataDir}.users`, { recursive: true, force: true });
  rmSync(`${dataDir}.running.json`, { force: true });
});

async function launch(args: string[], env: Record<string, string> = {}): Promise<Proc> {
  const proc = start(args, { LOCAL_PG_DATA_DIR: dataDir, LOCAL_PG_PORT: String(await freePort()), ADMIN_API_KEY: SHARED_ADMIN_KEY, ...env }, LAUNCHER);
  started.push(proc);
  return proc;
}

async function finish(proc: Proc): Promise<number> {
  const timer = setTimeout(() => proc.kill('SIGKILL'), 90_000);
  const { code } = await proc.exited;
  clearTimeout(timer);
  return code;
}

const refuses = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => (s.destroy(), resolve(false)));
    s.once('error', () => resolve(true));
  });

describe('local commands beside npm start', () => {
  it('seed, runs, migrate and jobs use its Postgres; a second API too; Postgres stops when the last of them ends', async () => {
    const first = await launch([], { PORT: '0' });
    const listening = await first.waitForLog((l) => l.msg.startsWith('listening on port'), 120_000);
    const pgPort = Number(/local Postgres ready at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:(\d+)\//.exec(first.stderr())?.[1]);
    expect(pgPort, first.stderr()).toBeGreaterThan(0);

    for (const args of [['seed', '--accounts', '2'], ['runs'], ['migrate'], ['jobs']]) {
      const cmd = await launch(args);
      const code = await finish(cmd);
      expect(code, `${args[0]}: ${cmd.stderr()}`).toBe(0);
      expect(cmd.stderr()).toMatch(new RegExp(`^using the local Postgres already running at postgres://postgres:\\*\\*\\*@127\\.0\\.0\\.1:${pgPort}/app \\(pid \\d+\\)$`, 'm'));
      expect(cmd.stderr()).not.toContain(':postgres@');
      // With a database the run lengths come from job_runs, not from the stated assumption.
      if (args[0] === 'jobs') expect(cmd.stdout()).not.toContain('no DATABASE_URL');
    }
    // The seeded accounts are in the first API's database.
    const accounts = await fetch(`http://127.0.0.1:${listening.port as number}/accounts`, { headers: { authorization: `Bearer ${SHARED_ADMIN_KEY}` } });
    expect(accounts.status).toBe(200);
    expect(((await accounts.json()) as { items: unknown[] }).items.length).toBeGreaterThanOrEqual(2);

    // A second API on the same Postgres; stopping the first leaves it its database.
    const second = await launch([], { PORT: '0' });
    const secondListening = await second.waitForLog((l) => l.msg.startsWith('listening on port'), 120_000);
    first.kill('SIGTERM');
    expect(await finish(first)).toBe(0);
    expect(first.stderr()).toMatch(/local Postgres stays up while process \d+ uses it/);
    expect((await fetch(`http://127.0.0.1:${secondListening.port as number}/readyz`)).status).toBe(200);
    expect(await refuses(pgPort)).toBe(false);

    second.kill('SIGTERM');
    expect(await finish(second)).toBe(0);
    // The host stops Postgres within a poll of its last user's exit.
    for (let i = 0; i < 200 && !(await refuses(pgPort)); i++) await new Promise((r) => setTimeout(r, 100));
    expect(await refuses(pgPort)).toBe(true);
  }, 300_000);

  it('jobs starts no Postgres of its own when none is running', async () => {
    const jobs = await launch(['jobs']);
    expect(await finish(jobs), jobs.stderr()).toBe(0);
    expect(jobs.stderr()).not.toContain('local Postgres');
    expect(jobs.stdout()).toContain('no DATABASE_URL: run lengths are the assumption');
  }, 120_000);
});
