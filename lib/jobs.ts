/**
 * The jobs table: the one place where a scheduled job is declared.
 *
 * Add a row here and a handler in `app/jobs/registry.ts`; `cdk deploy` then creates the
 * job's nested stack (task definition, state machine, EventBridge rule, alarms), and
 * `node dist/app/main.js <name>` runs it. The table is plain data with no aws-cdk-lib import,
 * so that the container and synth read (and validate) the very same rows.
 */
import { CONTAINER_COMMANDS } from './commands.js';
import { isTimeZone, longestIntervalMs, parseSchedule, shortestIntervalMs, skippedRuns, type Schedule } from './schedule.js';

export { CONTAINER_COMMANDS };

/** What a run does when the previous run of the same job (another scheduled time) is still going. */
export type OverlapPolicy = 'skip' | 'wait';

export interface JobDefinition {
  /** The job's name, kebab-case; the container's CLI argument and the AWS resources' suffix. */
  readonly name: string;
  /** One line for `npm run jobs`, the rule's description and the alerts. */
  readonly description: string;
  /** An EventBridge `cron(...)` or `rate(...)` expression, read in `timeZone`. */
  readonly schedule: string;
  /**
   * The IANA time zone the schedule's times are in ("Europe/Berlin"), and the zone of the
   * days and weeks the job works on (app/jobs/periods.ts). A job with one is started by an
   * EventBridge Scheduler schedule, which follows the zone's daylight saving changes; a job
   * without one by an EventBridge rule, in UTC. @default - UTC, through an EventBridge rule
   */
  readonly timeZone?: string;
  /** Fargate CPU units (256 = 0.25 vCPU). With `memoryMiB` it must be a valid Fargate size. */
  readonly cpu: number;
  /** Fargate memory, MiB. */
  readonly memoryMiB: number;
  /** The run is aborted, recorded `failed` with reason "timeout" and alerted after this long. */
  readonly timeoutSeconds: number;
  /** In-process retries after a failed attempt, with exponential backoff and jitter. */
  readonly retries: number;
  /**
   * New tasks the job's Step Functions execution starts after a task that died (exit 3, killed,
   * Spot interruption, failed to start), each resuming from the checkpoint. @default 2
   */
  readonly taskRetries?: number;
  /** What a run does while another run of this job is in progress. */
  readonly overlap: OverlapPolicy;
  /** A disabled job keeps its row and its handler but gets no rule, task definition or alarms. */
  readonly enabled: boolean;
  /** Run on Fargate Spot: about 70% cheaper, may be interrupted; only for jobs that resume from a checkpoint. */
  readonly spot: boolean;
  /** The job writes to the export bucket; only such jobs' task role may. */
  readonly usesExportBucket: boolean;
  /** How late a success may be, past the longest gap of the schedule, before the missed-run alarm fires. */
  readonly missedRunGraceMinutes: number;
}

export const JOBS = [
  {
    name: 'billing-run',
    description: 'Writes one invoice per active account for the previous UTC day',
    schedule: 'cron(15 0 * * ? *)',
    cpu: 512,
    memoryMiB: 1024,
    timeoutSeconds: 45 * 60,
    retries: 2,
    overlap: 'wait',
    enabled: true,
    spot: false,
    usesExportBucket: false,
    missedRunGraceMinutes: 60,
  },
  {
    name: 'report-aggregation',
    description: 'Upserts the daily usage rollups for the previous UTC day',
    schedule: 'cron(30 1 * * ? *)',
    cpu: 256,
    memoryMiB: 512,
    timeoutSeconds: 30 * 60,
    retries: 2,
    overlap: 'skip',
    enabled: true,
    spot: true,
    // Spot tasks get interrupted now and then; each new task resumes from the checkpoint.
    taskRetries: 3,
    usesExportBucket: false,
    missedRunGraceMinutes: 60,
  },
  {
    name: 'data-cleanup',
    description: 'Deletes expired rows in small batches',
    schedule: 'rate(6 hours)',
    cpu: 256,
    memoryMiB: 512,
    timeoutSeconds: 20 * 60,
    retries: 1,
    overlap: 'skip',
    enabled: true,
    spot: true,
    // Spot tasks get interrupted now and then; each new task resumes from the checkpoint.
    taskRetries: 3,
    usesExportBucket: false,
    missedRunGraceMinutes: 60,
  },
  {
    name: 'weekly-export',
    description: 'Writes last week\'s invoices (Monday to Sunday, Berlin time) as CSV to the export bucket',
    // The finance team that reads the export works in Berlin: the file is there at 06:00 on
    // their Monday, summer and winter, and its week is their week.
    schedule: 'cron(0 6 ? * MON *)',
    timeZone: 'Europe/Berlin',
    cpu: 512,
    memoryMiB: 1024,
    timeoutSeconds: 60 * 60,
    retries: 2,
    overlap: 'skip',
    enabled: true,
    spot: false,
    usesExportBucket: true,
    missedRunGraceMinutes: 120,
  },
] as const satisfies readonly JobDefinition[];

/** The name of a job in the table; the handler registry is keyed by exactly these. */
export type JobName = (typeof JOBS)[number]['name'];

/** Fargate's CPU units and the memory sizes (MiB) each one accepts. */
export const FARGATE_SIZES: Readonly<Record<number, { readonly min: number; readonly max: number; readonly step: number } | readonly number[]>> = {
  256: [512, 1024, 2048],
  512: { min: 1024, max: 4096, step: 1024 },
  1024: { min: 2048, max: 8192, step: 1024 },
  2048: { min: 4096, max: 16384, step: 1024 },
  4096: { min: 8192, max: 30720, step: 1024 },
  8192: { min: 16384, max: 61440, step: 4096 },
  16384: { min: 32768, max: 122880, step: 8192 },
};

export function fargateMemoryChoices(cpu: number): number[] | undefined {
  const sizes = FARGATE_SIZES[cpu];
  if (sizes === undefined) return undefined;
  if (Array.isArray(sizes)) return [...sizes];
  const { min, max, step } = sizes as { min: number; max: number; step: number };
  const out: number[] = [];
  for (let m = min; m <= max; m += step) out.push(m);
  return out;
}


const KEBAB = /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/;
/** EventBridge rule names and ECS family names share a 64-character budget with the stack's prefix. */
const MAX_NAME_LENGTH = 40;
const MAX_RETRIES = 10;
/** Each task retry waits longer (lib/job-flow.ts); more than this would hold an execution for hours. */
export const MAX_TASK_RETRIES = 5;
/**
 * Jobs whose periods are the UTC days the data is stored by; a time zone would give them days
 * that the rest of the data does not share, so the table refuses one (UTC aside).
 */
export const UTC_DAY_JOBS: Readonly<Record<string, string>> = {
  'billing-run': 'its invoices are UTC days (app/billing.ts), which the API also bills and checks usage against',
  'report-aggregation': 'its rollups are UTC days, and data-cleanup deletes usage once its UTC day is rolled up',
};

/** The job's schedule, read in its time zone. Throws like parseSchedule. */
export function scheduleOf(job: Pick<JobDefinition, 'schedule' | 'timeZone'>): Schedule {
  return parseSchedule(job.schedule, job.timeZone);
}

/** `taskRetries` of a row that does not set it. */
export const DEFAULT_TASK_RETRIES = 2;

/** The row's `taskRetries`, or the default. */
export function taskRetriesOf(job: JobDefinition): number {
  return job.taskRetries ?? DEFAULT_TASK_RETRIES;
}

/**
 * Every problem in the table, each naming the job and the field. Empty when the table is valid.
 * Synth throws all of them at once; the container refuses to start with any of them.
 */
export function validateJobs(jobs: readonly JobDefinition[], now: Date = new Date()): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  jobs.forEach((job, index) => {
    const where = `job ${JSON.stringify(job.name ?? `#${index}`)}`;
    const bad = (field: string, message: string) => problems.push(`${where}: ${field} ${message}`);

    if (typeof job.name !== 'string' || !KEBAB.test(job.name) || job.name.length > MAX_NAME_LENGTH) {
      bad('name', `must be kebab-case, at most ${MAX_NAME_LENGTH} characters (e.g. "billing-run"), got ${JSON.stringify(job.name)}`);
    } else if (seen.has(job.name)) {
      bad('name', 'is a duplicate: every job needs its own name');
    } else if ((CONTAINER_COMMANDS as readonly string[]).includes(job.name)) {
      bad('name', `is reserved: the container's commands are ${CONTAINER_COMMANDS.join(', ')}`);
    }
    seen.add(job.name);

    if (typeof job.description !== 'string' || job.description.trim() === '') {
      bad('description', 'must be a non-empty string');
    }

    const zoneValid = job.timeZone === undefined || isTimeZone(job.timeZone);
    if (!zoneValid) {
      bad('timeZone', `${JSON.stringify(job.timeZone)} is not an IANA time zone name; use one like "Europe/Berlin", "America/New_York" or "UTC"`);
    } else if (job.timeZone !== undefined && job.timeZone !== 'UTC' && Object.hasOwn(UTC_DAY_JOBS, job.name)) {
      bad('timeZone', `cannot be ${JSON.stringify(job.timeZone)}: ${UTC_DAY_JOBS[job.name]}`);
    }

    let schedule: Schedule | undefined;
    try {
      schedule = parseSchedule(job.schedule, zoneValid ? job.timeZone : undefined);
    } catch (err) {
      bad('schedule', `${JSON.stringify(job.schedule)} is invalid: ${(err as Error).message}`);
    }
    const skipped = schedule ? skippedRuns(schedule, now) : [];
    if (skipped.length > 0) {
      const more = skipped.length > 1 ? ` (and ${skipped.length - 1} more, the last ${skipped.at(-1)})` : '';
      bad('schedule', `${job.schedule} in ${job.timeZone} names a time the clocks skip: ${skipped[0]}${more} does not exist there, and EventBridge Scheduler skips that run, ` +
        'so its period would never be worked on; pick a time outside the hour the clocks skip (for a job that runs hourly or more often, use rate())');
    }

    const memoryChoices = fargateMemoryChoices(job.cpu);
    if (memoryChoices === undefined) {
      bad('cpu', `must be one of ${Object.keys(FARGATE_SIZES).join(', ')} (Fargate CPU units), got ${job.cpu}`);
    } else if (!memoryChoices.includes(job.memoryMiB)) {
      const sizes = FARGATE_SIZES[job.cpu]!;
      const accepted = Array.isArray(sizes)
        ? sizes.join(', ')
        : `${(sizes as { min: number }).min} to ${(sizes as { max: number }).max} in steps of ${(sizes as { step: number }).step}`;
      bad('memoryMiB', `${job.memoryMiB} is not a valid Fargate size for cpu ${job.cpu}; it accepts ${accepted}`);
    }

    if (!Number.isInteger(job.timeoutSeconds) || job.timeoutSeconds < 1) {
      bad('timeoutSeconds', `must be a positive whole number of seconds, got ${job.timeoutSeconds}`);
    } else if (schedule) {
      const gapSeconds = shortestIntervalMs(schedule, now) / 1_000;
      if (job.timeoutSeconds >= gapSeconds) {
        bad('timeoutSeconds', `${job.timeoutSeconds} does not fit the schedule ${job.schedule}: runs can be ${gapSeconds} s apart, so the timeout must be shorter`);
      }
    }

    if (!Number.isInteger(job.retries) || job.retries < 0 || job.retries > MAX_RETRIES) {
      bad('retries', `must be a whole number from 0 to ${MAX_RETRIES}, got ${job.retries}`);
    }
    if (job.taskRetries !== undefined && (!Number.isInteger(job.taskRetries) || job.taskRetries < 0 || job.taskRetries > MAX_TASK_RETRIES)) {
      bad('taskRetries', `must be a whole number from 0 to ${MAX_TASK_RETRIES}, got ${job.taskRetries}`);
    }
    if (job.overlap !== 'skip' && job.overlap !== 'wait') {
      bad('overlap', `must be "skip" or "wait", got ${JSON.stringify(job.overlap)}`);
    }
    for (const flag of ['enabled', 'spot', 'usesExportBucket'] as const) {
      if (typeof job[flag] !== 'boolean') bad(flag, `must be true or false, got ${JSON.stringify(job[flag])}`);
    }
    if (!Number.isInteger(job.missedRunGraceMinutes) || job.missedRunGraceMinutes < 1) {
      bad('missedRunGraceMinutes', `must be a positive whole number of minutes, got ${job.missedRunGraceMinutes}`);
    } else if (schedule && !Number.isFinite(longestIntervalMs(schedule, now))) {
      bad('schedule', `${job.schedule} runs at most once more, so no missed-run alarm can watch it`);
    }
  });
  return problems;
}

/** Thrown by `assertValidJobs`; its message lists every problem, one per line. */
export class InvalidJobsTableError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`The jobs table (lib/jobs.ts) has ${problems.length} problem${problems.length === 1 ? '' : 's'}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'InvalidJobsTableError';
  }
}

export function assertValidJobs(jobs: readonly JobDefinition[], now?: Date): void {
  const problems = validateJobs(jobs, now);
  if (problems.length > 0) throw new InvalidJobsTableError(problems);
}

export function findJob(name: string, jobs: readonly JobDefinition[] = JOBS): JobDefinition | undefined {
  return jobs.find((job) => job.name === name);
}
