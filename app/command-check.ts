/**
 * What can be checked of a container command with plain code, before anything heavy loads or
 * any database is reached: the command or job's name, the jobs table, and a job's arguments.
 * The entry (app/command.ts) runs it first; so does the local launcher (app/dev/local.ts),
 * before it starts or migrates a local Postgres, so that a typo exits 2 having done nothing.
 */
import { CONTAINER_COMMANDS, InvalidJobsTableError, JOBS } from '../lib/jobs.js';
import { checkJobsTable } from './jobs-table-check.js';
import { UsageError } from './errors.js';
import { parseJobArgs, refuseFutureTime, scheduledTimeSkewMs, type JobArgs } from './jobs/args.js';

export function usage(): string {
  return [
    'Usage: node dist/app/main.js                 run the HTTP API',
    '       node dist/app/main.js <job> [--scheduled-time ISO] [--force]   run one job and exit',
    '       node dist/app/main.js migrate         apply the database migrations and exit',
    '       node dist/app/main.js jobs [--json]   print the jobs: schedule, next runs, Fargate cost',
    '       node dist/app/main.js runs [<job>] [--limit N]   print the recent job runs',
    '       node dist/app/main.js seed [--accounts N] [--days D]   migrate, then create demo data',
    '',
    `Jobs: ${JOBS.map((j) => j.name).join(', ')}`,
  ].join('\n');
}

const isContainerCommand = (name: string) => CONTAINER_COMMANDS.includes(name as (typeof CONTAINER_COMMANDS)[number]);

/** The job's arguments when `command` is a job; undefined for the API and the other commands. Throws UsageError. */
export function checkCommand(command: string | undefined, rest: string[]): JobArgs | undefined {
  if (command !== undefined && !isContainerCommand(command) && !JOBS.some((j) => j.name === command)) {
    throw new UsageError(
      `Unknown job "${command}". Known jobs: ${JOBS.map((j) => j.name).join(', ')} (or the commands: ${CONTAINER_COMMANDS.join(', ')}).\n\n${usage()}`,
      'UNKNOWN_JOB',
    );
  }
  // A job, or the table's listing, runs only from a valid table: an edit that synth would refuse
  // (a bad schedule, a duplicate name, a timeout longer than the gap) is refused here too, with
  // every problem named (the build has checked it once: app/jobs-table-check.ts). The server
  // does not read the table.
  if (command === 'jobs' || JOBS.some((j) => j.name === command)) {
    try {
      checkJobsTable(JOBS);
    } catch (err) {
      if (err instanceof InvalidJobsTableError) throw new UsageError(err.message);
      throw err;
    }
  }
  if (command === undefined || isContainerCommand(command)) return undefined;
  const jobArgs = parseJobArgs(command, rest);
  refuseFutureTime(jobArgs, scheduledTimeSkewMs());
  return jobArgs;
}
