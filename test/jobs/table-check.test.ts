/**
 * The jobs table is checked by the build, and a process skips the check only for that table
 * (app/jobs-table-check.ts); the full check of any other table is in cli.test.ts.
 */
import { readFileSync } from 'node:fs';
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
