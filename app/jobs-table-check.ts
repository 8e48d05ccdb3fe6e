/**
 * The jobs table is checked once per build, not on every process start.
 *
 * The table is code: it changes only with a new build. Checking it in full (as synth does)
 * asks croner for the next 1,000 runs of every cron, about 0.2 s of CPU, which every job task,
 * every takeover after a crash and `npm run jobs` would pay before doing anything. So
 * `npm run build` checks it (a bad table fails the build) and writes its SHA-256 next to the
 * build; a process whose table has that digest skips the check, and any other table (a build
 * copy edited by hand, a stale stamp) is checked in full and refused with every problem named.
 *
 *   node dist/app/jobs-table-check.js     the build's step: check the table, write the stamp
 */
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { assertValidJobs, InvalidJobsTableError, JOBS, type JobDefinition } from '../lib/jobs.js';
import { EXIT } from './errors.js';

/** dist/jobs-table.checked, beside dist/app/ and dist/lib/. */
const STAMP = new URL('../jobs-table.checked', import.meta.url);

export function tableDigest(jobs: readonly JobDefinition[]): string {
  return createHash('sha256').update(JSON.stringify(jobs)).digest('hex');
}

/** Throws InvalidJobsTableError unless `jobs` is the table the build checked, or passes the check now. */
export function checkJobsTable(jobs: readonly JobDefinition[]): void {
  try {
    if (readFileSync(STAMP, 'utf8').trim() === tableDigest(jobs)) return;
  } catch {
    // No stamp (run from the sources, or a build without the step): check in full.
  }
  assertValidJobs(jobs);
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    assertValidJobs(JOBS);
    writeFileSync(STAMP, `${tableDigest(JOBS)}\n`);
  } catch (err) {
    if (!(err instanceof InvalidJobsTableError)) throw err;
    // The user's edit to fix: every problem, naming the file, the job and the field; no stack.
    process.stderr.write(`${err.message}\n`);
    process.exitCode = EXIT.usage;
  }
}
