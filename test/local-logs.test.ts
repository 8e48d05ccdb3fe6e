/**
 * The local launcher's logs: readable (pino-pretty) on a terminal, JSON lines when piped, as
 * the container always writes them. The terminal is a real pseudo-terminal from `script`.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../lib/constructs/stack.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';

/** Every migration the project has: a new database applies them all. */
const MIGRATIONS = readdirSync(new URL('../app/migrations', import.meta.url)).filter((f) => f.endsWith('.sql')).length;

describe('the local launcher\'s logs', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
  });
  afterAll(async () => {
    await db?.drop();
  });

  const env = () => ({ PATH: process.env.PATH, DATABASE_URL: db.url, DB_SSL: 'off', LOG_LEVEL: 'info' });

  it('are readable lines on a terminal', () => {
    const run = spawnSync('script', ['-qec', `${process.execPath} dist/app/dev/local.js migrate`, '/dev/null'], { cwd: REPO_ROOT, env: env(), encoding: 'utf8', timeout: 60_000 });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const text = run.stdout.replace(/\x1b\[[0-9;]*m/g, '');
    expect(text).toMatch(new RegExp(`^\\[\\d\\d:\\d\\d:\\d\\d\\.\\d{3}\\] INFO.*: applied ${MIGRATIONS} migration\\(s\\)`, 'm'));
    expect(run.stdout).not.toContain('{"level"');
  });

  it('stay JSON when piped', () => {
    const run = spawnSync(process.execPath, ['dist/app/dev/local.js', 'migrate'], { cwd: REPO_ROOT, env: env(), encoding: 'utf8', timeout: 60_000 });
    expect(run.status, run.stderr).toBe(0);
    const line = JSON.parse(run.stdout.trim().split('\n').at(-1)!);
    // The first test migrated this database already.
    expect(line).toMatchObject({ level: 'info', service: 'ecs-saas-backend', msg: 'database schema is up to date' });
  });
});
