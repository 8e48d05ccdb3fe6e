/**
 * The local launcher's logs: short lines on a terminal, JSON lines when piped, as the
 * container always writes them. The terminal is a real pseudo-terminal from `script`.
 */
import { spawn, spawnSync } from 'node:child_process';
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
    const run = spawnSync('script', ['-qec', `${process.execPath} dist/app/dev/local.js migrate`, '/dev/null'], { cwd: REPO_ROOT, env: env(), encoding: 'utf8', timeout: 170_000 });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const text = run.stdout.replace(/\x1b\[[0-9;]*m/g, '');
    expect(text).toMatch(new RegExp(`^\\[\\d\\d:\\d\\d:\\d\\d\\.\\d{3}\\] INFO.*: applied ${MIGRATIONS} migration\\(s\\)`, 'm'));
    expect(run.stdout).not.toContain('{"level"');
  });

  it.each([
    ['without DEBUG: one line, no stack trace', {}, false],
    ['with DEBUG=1: the stack trace too', { DEBUG: '1' }, true],
  ])('a failure on a terminal, %s', (_name, extra, stack) => {
    // A database nobody listens on: `runs` fails at its first query.
    const run = spawnSync('script', ['-qec', `${process.execPath} dist/app/dev/local.js runs`, '/dev/null'], {
      cwd: REPO_ROOT,
      env: { ...env(), DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', ...extra },
      encoding: 'utf8',
      timeout: 170_000,
    });
    const text = run.stdout.replace(/\x1b\[[0-9;]*m/g, '').replace(/\r/g, '');
    expect(run.status, text).not.toBe(0);
    expect(text).toMatch(/FATAL.*start-up failed: .*ECONNREFUSED/);
    // A frame of the trace, on a line of its own or inside pino-pretty's quoted stack field.
    expect(/ {4}at \S/.test(text), text).toBe(stack);
  });

  it('stay JSON when piped', () => {
    const run = spawnSync(process.execPath, ['dist/app/dev/local.js', 'migrate'], { cwd: REPO_ROOT, env: env(), encoding: 'utf8', timeout: 170_000 });
    expect(run.status, run.stderr).toBe(0);
    const line = JSON.parse(run.stdout.trim().split('\n').at(-1)!);
    // The first test migrated this database already.
    expect(line).toMatchObject({ level: 'info', service: 'ecs-saas-backend', msg: 'database schema is up to date' });
  });

  /** `npm start` on a terminal of its own: its pid (the shell execs into it) and everything the terminal shows. */
  function startOnTerminal(extra: Record<string, string>) {
    const child = spawn('script', ['-qfec', `echo "pid $$"; exec ${process.execPath} dist/app/dev/local.js`, '/dev/null'], {
      cwd: REPO_ROOT,
      env: { ...env(), PORT: '0', ...extra },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let raw = '';
    child.stdout.on('data', (c) => (raw += c));
    const text = () => raw.replace(/\x1b\[[0-9;]*m/g, '').replace(/\r/g, '');
    const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    const waitFor = async (pattern: RegExp, ms = 60_000) => {
      for (const until = Date.now() + ms; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
        const m = pattern.exec(text());
        if (m) return m;
      }
      throw new Error(`no ${pattern} within ${ms} ms in:\n${text()}`);
    };
    return { child, text, exited, waitFor };
  }

  it('on a terminal, npm start ends its start-up with the URL and a working curl, prints one line per request, and hides the metrics unless asked', async () => {
    const quiet = startOnTerminal({});
    const loud = startOnTerminal({ LOCAL_LOG_METRICS: '1' });
    try {
      for (const t of [quiet, loud]) {
        const [, url, curl] = await t.waitFor(/^API ready at (http:\/\/localhost:\d+); try it.*\n\s+(curl .*\/accounts)$/m);
        // The curl as printed, run by a shell in the project folder, as a reader would paste it.
        const pasted = spawnSync('sh', ['-c', `${curl} -s -w ' %{http_code}' -H 'X-Request-Id: pty-${url!.split(':')[2]}'`], { cwd: REPO_ROOT, encoding: 'utf8', timeout: 30_000 });
        expect(pasted.stdout, pasted.stderr).toMatch(/^\{"items":\[.*\} 200$/);
        await t.waitFor(new RegExp(`^\\[\\d\\d:\\d\\d:\\d\\d\\.\\d{3}\\] GET /accounts 200 \\d+ ms pty-${url!.split(':')[2]}$`, 'm'));
      }
      // The database probe logs its metrics every 10 s: shown when asked, as one line.
      await loud.waitFor(/^\[[\d:.]+\] INFO: metrics: database probe ok \{.*"DatabaseUnavailable":0.*\}$/m, 60_000);
      await new Promise((r) => setTimeout(r, 2_000));
      expect(quiet.text()).not.toContain('metrics');
      for (const t of [quiet, loud]) {
        expect(t.text()).not.toContain('{"level"');
        expect(t.text()).not.toContain('_aws');
      }
      for (const t of [quiet, loud]) process.kill(Number((await t.waitFor(/^pid (\d+)$/m))[1]), 'SIGTERM');
      expect(await quiet.exited).toBe(0);
      expect(await loud.exited).toBe(0);
    } finally {
      for (const t of [quiet, loud]) if (t.child.exitCode === null) t.child.kill('SIGKILL');
    }
  }, 180_000);
});
