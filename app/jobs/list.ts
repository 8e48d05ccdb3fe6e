/**
 * `npm run jobs [-- --json]`: the jobs table as an operator reads it. For each job: its
 * schedule in words and its time zone, its next three runs (in its zone, and in UTC when that
 * differs, so a run across a daylight saving change shows its new UTC time); cpu, memory, timeout and task retries; what
 * a run and a month of runs cost on Fargate, x86 and ARM, on-demand and Spot; and what the
 * run's Step Functions execution costs (its state transitions, lib/job-flow.ts).
 *
 * A run's length is the median of its last succeeded runs in job_runs when a database is
 * configured (DATABASE_URL or DB_*) and has some; otherwise the stated assumption.
 */
import { RETRY_PATH, stateTransitions } from '../../lib/job-flow.js';
import { JOBS, scheduleOf, taskRetriesOf, type JobDefinition } from '../../lib/jobs.js';
import { nextRuns, UTC, wallClock, type Schedule } from '../../lib/schedule.js';
import { DAY_MS } from '../../lib/time-zones.js';
import { describeSchedule } from '../../lib/schedule-words.js';
import { loadConfig } from '../config.js';
import { createPool } from '../db.js';
import { UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import { errorText } from '../shutdown.js';
import { COST_VARIANTS, FARGATE_PRICING, SPOT_DISCOUNT, STEP_FUNCTIONS_PRICING, costs } from './pricing.js';
import { formatDuration } from './progress.js';
import { fitTable, wrap } from './text-table.js';

/** How many recent succeeded runs the median is taken over. */
export const MEDIAN_OF_RUNS = 20;

export interface RunLength {
  readonly seconds: number;
  /** "median of 12 runs" or "assumed". */
  readonly source: string;
}

export interface JobListing {
  readonly name: string;
  readonly enabled: boolean;
  readonly description: string;
  readonly schedule: string;
  readonly scheduleText: string;
  /** The IANA zone the schedule and the job's periods are in; "UTC" for a job without one. */
  readonly timeZone: string;
  /** The next runs, ISO-8601 UTC instants. */
  readonly nextRuns: string[];
  /** The same runs on the zone's wall clock, "YYYY-MM-DD hh:mm". */
  readonly nextRunsLocal: string[];
  readonly cpu: number;
  readonly vcpu: number;
  readonly memoryMiB: number;
  readonly timeoutSeconds: number;
  readonly retries: number;
  /** New tasks the job's execution starts after a task that died. */
  readonly taskRetries: number;
  readonly overlap: string;
  readonly spot: boolean;
  readonly runLengthSeconds: number;
  readonly runLengthSource: string;
  readonly runsPerMonth: number;
  readonly costUsd: ReturnType<typeof costs>;
  /** The job's Step Functions execution: billed state transitions of a run that succeeds at once, and what a task retry adds. */
  readonly stepFunctions: { readonly transitionsPerRun: number; readonly transitionsPerTaskRetry: number; readonly perRunUsd: number; readonly perMonthUsd: number };
  readonly pricing: { region: string; perVcpuHour: Record<string, number>; perGbHour: Record<string, number>; assumptions: string[] };
}

/** Runs in an average month: the runs of the next 365 days, over 12, as the schedule runs in its zone. */
export function runsPerMonth(schedule: Schedule, from: Date = new Date()): number {
  const yearMs = 365 * DAY_MS;
  if (schedule.kind === 'rate') return yearMs / schedule.everyMs / 12;
  const end = from.getTime() + yearMs;
  let count = 0;
  let cursor = from;
  for (;;) {
    const batch = nextRuns(schedule, 1_000, cursor).filter((d) => d.getTime() <= end);
    count += batch.length;
    if (batch.length < 1_000) break;
    cursor = batch[batch.length - 1]!;
  }
  return count / 12;
}

const ASSUMPTIONS = [
  `prices: Linux on Fargate in ${FARGATE_PRICING.region}, ${FARGATE_PRICING.regionName} (${FARGATE_PRICING.source})`,
  `Spot: on-demand less ${Math.round(SPOT_DISCOUNT * 100)}% (AWS's "up to 70%"; the live Spot price moves)`,
  `billed: the run plus ${FARGATE_PRICING.taskStartSeconds} s of task start (an assumption), at least ${FARGATE_PRICING.minimumBilledSeconds} s`,
  `run length: median of the last ${MEDIAN_OF_RUNS} succeeded runs in job_runs; ${FARGATE_PRICING.assumedRunSeconds / 60} min assumed when there are none`,
  `Step Functions (standard): $${STEP_FUNCTIONS_PRICING.perStateTransition * 1_000} per 1,000 state transitions (${STEP_FUNCTIONS_PRICING.source}); a run that succeeds at once takes ${stateTransitions(0)}, each task retry ${RETRY_PATH.length} more; ${STEP_FUNCTIONS_PRICING.freeTransitionsPerMonth.toLocaleString('en-US')} free a month per account, not counted here`,
];

export function listJob(job: JobDefinition, length: RunLength | undefined, now: Date = new Date()): JobListing {
  const schedule = scheduleOf(job);
  const timeZone = job.timeZone ?? UTC;
  const upcoming = job.enabled ? nextRuns(schedule, 3, now) : [];
  const runLength = length ?? { seconds: FARGATE_PRICING.assumedRunSeconds, source: 'assumed' };
  const perMonth = runsPerMonth(schedule, now);
  const { prices } = FARGATE_PRICING;
  return {
    name: job.name,
    enabled: job.enabled,
    description: job.description,
    schedule: job.schedule,
    scheduleText: describeSchedule(schedule),
    timeZone,
    nextRuns: upcoming.map((d) => d.toISOString()),
    nextRunsLocal: upcoming.map((d) => wallClock(d, timeZone)),
    cpu: job.cpu,
    vcpu: job.cpu / 1_024,
    memoryMiB: job.memoryMiB,
    timeoutSeconds: job.timeoutSeconds,
    retries: job.retries,
    taskRetries: taskRetriesOf(job),
    overlap: job.overlap,
    spot: job.spot,
    runLengthSeconds: runLength.seconds,
    runLengthSource: runLength.source,
    runsPerMonth: Math.round(perMonth * 100) / 100,
    costUsd: costs(job.cpu, job.memoryMiB, runLength.seconds, job.enabled ? perMonth : 0),
    stepFunctions: {
      transitionsPerRun: stateTransitions(0),
      transitionsPerTaskRetry: RETRY_PATH.length,
      perRunUsd: stateTransitions(0) * STEP_FUNCTIONS_PRICING.perStateTransition,
      perMonthUsd: stateTransitions(0) * STEP_FUNCTIONS_PRICING.perStateTransition * (job.enabled ? perMonth : 0),
    },
    pricing: {
      region: FARGATE_PRICING.region,
      perVcpuHour: Object.fromEntries(COST_VARIANTS.map((v) => [v.key, round(prices[v.architecture][v.capacity].vcpuHour, 6)])),
      perGbHour: Object.fromEntries(COST_VARIANTS.map((v) => [v.key, round(prices[v.architecture][v.capacity].gbHour, 7)])),
      assumptions: ASSUMPTIONS,
    },
  };
}

function round(n: number, digits: number): number {
  return Number(n.toFixed(digits));
}

const usd = (n: number) => (n === 0 ? '$0' : n < 0.001 ? `$${n.toFixed(6)}` : n < 0.01 ? `$${n.toFixed(4)}` : `$${n.toFixed(2)}`);
const utc = (iso: string) => iso.slice(5, 16).replace('T', ' ');

/**
 * A run as the table shows it: "03-30 06:00" on its zone's clock, then for a zone other than
 * UTC its UTC time, "(04:00Z)", with the date when the UTC date differs: "(03-31 01:00Z)".
 */
function runText(l: JobListing, i: number): string {
  const local = l.nextRunsLocal[i]!.slice(5);
  if (l.timeZone === UTC) return local;
  const inUtc = utc(l.nextRuns[i]!);
  return `${local} (${inUtc.slice(0, 5) === local.slice(0, 5) ? inUtc.slice(6) : inUtc}Z)`;
}

/** The width of the listing when stdout is no terminal and COLUMNS is unset: a file, a pager, a CI log. */
export const PIPED_WIDTH = 100;

/** On a terminal, its own width; else COLUMNS when set (as shells and CI runners export it), else PIPED_WIDTH. */
export function listingWidth(stdout: { isTTY?: boolean; columns?: number } = process.stdout, env: NodeJS.ProcessEnv = process.env): number {
  if (stdout.isTTY && stdout.columns) return stdout.columns;
  const columns = Number(env.COLUMNS);
  return Number.isInteger(columns) && columns >= 40 ? columns : PIPED_WIDTH;
}

/** The listing for a terminal `width` columns wide: a table when it fits, else a block per job. */
export function formatListing(listings: readonly JobListing[], width = Infinity): string {
  const headers = ['JOB', 'ON', 'SCHEDULE', 'TIME ZONE', 'NEXT 3 RUNS (IN ITS ZONE, MM-DD hh:mm)', 'CPU', 'MEMORY', 'TIMEOUT', 'TASK RETRIES', 'RUN LENGTH', 'RUNS/MO', ...COST_VARIANTS.map((v) => `${v.label} RUN / MONTH`), 'STEP FUNCTIONS RUN / MONTH'];
  const rows = listings.map((l) => [
    l.name,
    l.enabled ? 'yes' : 'no',
    l.scheduleText.replace(/ \([^()]+\)$/, ''),
    l.timeZone,
    l.nextRuns.map((_, i) => runText(l, i)).join(', ') || '(disabled)',
    `${l.vcpu} vCPU`,
    `${l.memoryMiB} MiB`,
    formatDuration(l.timeoutSeconds),
    String(l.taskRetries),
    `${formatDuration(l.runLengthSeconds)} ${l.runLengthSource === 'assumed' ? '(assumed)' : `(${l.runLengthSource})`}`,
    l.runsPerMonth.toFixed(1),
    ...COST_VARIANTS.map((v) => `${usd(l.costUsd.perRun[v.key])} / ${usd(l.costUsd.perMonth[v.key])}`),
    `${usd(l.stepFunctions.perRunUsd)} / ${usd(l.stepFunctions.perMonthUsd)}`,
  ]);
  const { prices } = FARGATE_PRICING;
  const priceLines = COST_VARIANTS.map(
    (v) => `  ${v.label.padEnd(9)} $${round(prices[v.architecture][v.capacity].vcpuHour, 6)} per vCPU-hour, $${round(prices[v.architecture][v.capacity].gbHour, 7)} per GB-hour`,
  );
  const notes = [
    `Fargate prices, Linux, ${FARGATE_PRICING.region}, ${FARGATE_PRICING.regionName} (${FARGATE_PRICING.source}):`,
    ...priceLines,
    ...ASSUMPTIONS.slice(1).map((a) => `  ${a}`),
    '  which one applies: the stack\'s CPU architecture, and spot: true in lib/jobs.ts for Fargate Spot',
  ];
  // Notes wrap at the width too, continued under their own indent.
  const wrapped = notes.flatMap((n) => {
    const indent = ' '.repeat(n.length - n.trimStart().length + 2);
    return Number.isFinite(width) ? wrap(n, width - indent.length).map((part, i) => (i === 0 ? part : `${indent}${part}`)) : [n];
  });
  return [fitTable(headers, rows, new Set([5, 6, 7, 8, 10]), width), '', ...wrapped].join('\n');
}

/** Median run lengths from job_runs, when a database is configured and reachable. */
async function medianRunLengths(env: NodeJS.ProcessEnv): Promise<{ lengths: Map<string, RunLength>; note?: string }> {
  if (!env.DATABASE_URL && !env.DB_HOST) return { lengths: new Map(), note: 'no DATABASE_URL: run lengths are the assumption' };
  const config = loadConfig(env);
  const logger = createLogger('silent');
  const pool = createPool(config.database, { role: 'jobs', max: 1, logger, waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
  try {
    const { rows } = await pool.query<{ job: string; median_s: number; n: number }>(
      `SELECT job, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))::float8 AS median_s, count(*)::int AS n
       FROM (SELECT job, started_at, finished_at, row_number() OVER (PARTITION BY job ORDER BY finished_at DESC) AS recent
             FROM job_runs WHERE status = 'succeeded') r
       WHERE recent <= $1
       GROUP BY job`,
      [MEDIAN_OF_RUNS],
    );
    return { lengths: new Map(rows.map((r) => [r.job, { seconds: Math.round(Math.max(0, r.median_s) * 1_000) / 1_000, source: `median of ${r.n} run${r.n === 1 ? '' : 's'}` }])) };
  } catch (err) {
    return { lengths: new Map(), note: `could not read job_runs (${errorText(err)}): run lengths are the assumption` };
  } finally {
    await pool.end();
  }
}

export async function runJobsCommand(args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const unknown = args.filter((a) => a !== '--json');
  if (unknown.length > 0) throw new UsageError(`Unknown argument "${unknown[0]}" for jobs. Valid flags: --json.`);
  const { lengths, note } = await medianRunLengths(env);
  const now = new Date();
  const listings = JOBS.map((job) => listJob(job, lengths.get(job.name), now));
  if (args.includes('--json')) {
    process.stdout.write(`${JSON.stringify(listings, null, 2)}\n`);
    return;
  }
  process.stdout.write(`${formatListing(listings, listingWidth())}\n${note ? `  ${note}\n` : ''}`);
}
