/**
 * The jobs table is checked by the build, and a process skips the check only for that table
 * (app/jobs-table-check.ts); the full check of any other table is in cli.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tableDigest } from '../../app/jobs-table-check.js';
import { JOBS } from '../../lib/jobs.js';

describe('the build-time check of the jobs table', () => {
  it('stamps the build with the digest of the table it checked', () => {
    expect(readFileSync('dist/jobs-table.checked', 'utf8').trim()).toBe(tableDigest(JOBS));
  });

  it('gives any edit of the table another digest, so the process checks it in full', () => {
    const edited = JOBS.map((j, i) => (i === 0 ? { ...j, timeoutSeconds: j.timeoutSeconds + 1 } : j));
    expect(tableDigest(edited)).not.toBe(tableDigest(JOBS));
  });
});

describe('the build step on a bad table', () => {
  it('names the file, the job and the field in one message, with no stack trace, and exits 2', () => {
    // A copy of the build whose table has a cron typo: what `npm run build` runs after an edit.
    // Inside the checkout, so that its imports resolve to node_modules as the real build's do.
    mkdirSync('.data', { recursive: true });
    const dist = mkdtempSync(path.join('.data', 'dist-'));
    try {
      cpSync('dist', dist, { recursive: true });
      const table = path.join(dist, 'lib', 'jobs.js');
      writeFileSync(table, readFileSync(table, 'utf8').replace(/schedule: 'cron\(([^)]*) \*\)'/, "schedule: 'cron($1)'"));
      const run = spawnSync(process.execPath, [path.join(dist, 'app', 'jobs-table-check.js')], { encoding: 'utf8', timeout: 60_000 });
      expect(run.status).toBe(2);
      expect(run.stderr).toMatch(/^The jobs table \(lib\/jobs\.ts\) has 1 problem:\n {2}- job "[a-z-]+": schedule "cron\([^)]*\)" is invalid: cron needs 6 fields/);
      expect(run.stderr).not.toMatch(/\n\s+at /);
    } finally {
      rmSync(dist, { recursive: true, force: true });
    }
  });
});
