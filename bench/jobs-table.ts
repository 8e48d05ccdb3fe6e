/**
 * A generated jobs table of any size, for `npm run bench:synth` and the scale tests. Every job
 * is a valid, distinct row (its own name and daily time), as a real table would be.
 */
import { JOBS, type JobDefinition } from '../lib/jobs.js';

/** `count` jobs: the table's first row, then variations with their own names and daily times. */
export function benchJobs(count: number): JobDefinition[] {
  const [first] = JOBS;
  return Array.from({ length: count }, (_, i) => i === 0
    ? { ...first }
    : {
      ...first,
      name: `bench-job-${i}`,
      description: `Benchmark job ${i}`,
      schedule: `cron(${(i * 7) % 60} ${i % 24} * * ? *)`,
      spot: i % 2 === 0,
      missedRunGraceMinutes: 30 + i,
    });
}
