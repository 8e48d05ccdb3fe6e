/**
 * A generated jobs table of any size, for `npm run bench:synth` and the scale tests. Every job
 * is a valid, distinct row (its own name and time), as a real table would be.
 */
import { JOBS, type JobDefinition } from '../lib/jobs.js';

/** The zones a zoned table cycles through: whole-hour, half-hour and 30-minute daylight saving, and none. */
export const BENCH_TIME_ZONES = ['Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kolkata', 'UTC'] as const;

/**
 * `count` jobs: the table's first row, then variations with their own names and daily times.
 * With `zoned`, every row has a time zone (so EventBridge Scheduler starts it) and the rows
 * take turns being daily, weekly and `rate()`.
 */
export function benchJobs(count: number, options: { readonly zoned?: boolean } = {}): JobDefinition[] {
  const [first] = JOBS;
  if (options.zoned) return Array.from({ length: count }, (_, i) => zonedJob(first, i));
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

function zonedJob(first: JobDefinition, i: number): JobDefinition {
  const kind = (['daily', 'weekly', 'rate'] as const)[i % 3]!;
  // A weekly run at local noon stays inside its UTC day in every zone above, grace included,
  // as the missed-run alarm's whole UTC days need (lib/constructs/missed-run.ts).
  const schedule = kind === 'daily' ? `cron(${(i * 7) % 60} ${i % 24} * * ? *)`
    : kind === 'weekly' ? `cron(${i % 30} 12 ? * MON *)`
      : 'rate(6 hours)';
  return {
    ...first,
    name: `zoned-job-${i}`,
    description: `Benchmark job ${i}, ${kind} in ${BENCH_TIME_ZONES[i % BENCH_TIME_ZONES.length]}`,
    schedule,
    timeZone: BENCH_TIME_ZONES[i % BENCH_TIME_ZONES.length],
    spot: i % 2 === 0,
    missedRunGraceMinutes: 30 + (i % 60),
  };
}
