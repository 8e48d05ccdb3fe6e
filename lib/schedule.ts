/**
 * EventBridge schedule expressions: parsing, the next run times, the shortest gap between
 * runs, and a description in words.
 *
 * Plain data and croner, no aws-cdk-lib: synth validates the jobs table with this module and
 * the container's `npm run jobs` describes the same table with it.
 *
 * EventBridge cron has six fields, `minutes hours day-of-month month day-of-week year`, always
 * in UTC, with day-of-week numbered 1 (SUN) to 7 (SAT) and exactly one of the two day fields
 * set to `?`. Croner reads the same grammar as a seven-part pattern (seconds first) in its
 * Quartz weekday mode, so the expression is handed to it unchanged but for a leading `0`.
 */
import { Cron } from 'croner';
import cronstrue from 'cronstrue';

export type Schedule =
  | { readonly kind: 'rate'; readonly expression: string; readonly everyMs: number }
  | { readonly kind: 'cron'; readonly expression: string; readonly fields: string };

const RATE = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/;
const CRON = /^cron\((.+)\)$/;
const UNIT_MS = { minute: 60_000, hour: 3_600_000, day: 86_400_000 } as const;

/** Parses an EventBridge `rate(...)` or `cron(...)` expression, or throws an Error saying what is wrong. */
export function parseSchedule(expression: string): Schedule {
  const rate = RATE.exec(expression);
  if (rate) {
    const value = Number(rate[1]);
    const unit = rate[2]!;
    const singular = unit.replace(/s$/, '') as keyof typeof UNIT_MS;
    if (value < 1) throw new Error(`rate value must be a positive whole number, got ${value}`);
    // EventBridge rejects `rate(1 minutes)` and `rate(5 minute)`.
    if ((value === 1) !== (unit === singular)) {
      throw new Error(`rate unit must be "${value === 1 ? singular : `${singular}s`}" for a value of ${value}`);
    }
    return { kind: 'rate', expression, everyMs: value * UNIT_MS[singular] };
  }
  const cron = CRON.exec(expression);
  if (cron) {
    const fields = cron[1]!.trim().split(/\s+/);
    if (fields.length !== 6) {
      throw new Error(`cron needs 6 fields (minutes hours day-of-month month day-of-week year), got ${fields.length}`);
    }
    const [, , dom, , dow] = fields;
    if ((dom === '?') === (dow === '?')) {
      throw new Error('cron needs "?" in exactly one of day-of-month and day-of-week');
    }
    try {
      toCron(fields.join(' '));
    } catch (err) {
      throw new Error(`cron fields are invalid: ${(err as Error).message}`);
    }
    return { kind: 'cron', expression, fields: fields.join(' ') };
  }
  throw new Error('expected "rate(N unit)" or "cron(minutes hours day-of-month month day-of-week year)"');
}

function toCron(fields: string): Cron {
  return new Cron(`0 ${fields}`, {
    utcOffset: 0,
    mode: '7-part',
    alternativeWeekdays: true,
    sloppyRanges: true,
    paused: true,
  });
}

/**
 * The next 1,000 runs after `from`, remembered: synth asks for both gaps of every job several
 * times with the same `from`, and each look-ahead costs croner tens of milliseconds.
 */
const upcomingRunsCache = new Map<string, readonly Date[]>();
const UPCOMING_RUNS_CACHE_SIZE = 512;

function upcomingRuns(fields: string, from: Date): readonly Date[] {
  const key = `${fields}@${from.getTime()}`;
  let runs = upcomingRunsCache.get(key);
  if (runs === undefined) {
    runs = toCron(fields).nextRuns(1_000, from);
    if (upcomingRunsCache.size >= UPCOMING_RUNS_CACHE_SIZE) upcomingRunsCache.delete(upcomingRunsCache.keys().next().value!);
    upcomingRunsCache.set(key, runs);
  }
  return runs;
}

/**
 * The next `count` run times strictly after `from`. A rate schedule has no fixed phase in
 * EventBridge (it counts from the rule's creation), so its times are counted from `from`.
 */
export function nextRuns(schedule: Schedule, count: number, from: Date = new Date()): Date[] {
  if (schedule.kind === 'rate') {
    return Array.from({ length: count }, (_, i) => new Date(from.getTime() + (i + 1) * schedule.everyMs));
  }
  return toCron(schedule.fields).nextRuns(count, from);
}

/**
 * The shortest gap between two consecutive runs, looked for over the next year of runs:
 * a job must finish within it or the next run overlaps. Infinity for a schedule that runs
 * at most once.
 */
export function shortestIntervalMs(schedule: Schedule, from: Date = new Date()): number {
  if (schedule.kind === 'rate') return schedule.everyMs;
  const runs = upcomingRuns(schedule.fields, from);
  let shortest = Infinity;
  for (let i = 1; i < runs.length; i++) {
    shortest = Math.min(shortest, runs[i]!.getTime() - runs[i - 1]!.getTime());
  }
  return shortest;
}

/**
 * The longest gap between two consecutive runs: the missed-run alarm waits this long (plus a
 * grace period) for a success before it fires.
 */
export function longestIntervalMs(schedule: Schedule, from: Date = new Date()): number {
  if (schedule.kind === 'rate') return schedule.everyMs;
  const runs = upcomingRuns(schedule.fields, from);
  let longest = 0;
  for (let i = 1; i < runs.length; i++) {
    longest = Math.max(longest, runs[i]!.getTime() - runs[i - 1]!.getTime());
  }
  return runs.length > 1 ? longest : Infinity;
}

/** The schedule in words, e.g. "At 00:15, every day (UTC)". */
export function describeSchedule(schedule: Schedule): string {
  if (schedule.kind === 'rate') {
    return `Every ${schedule.expression.slice('rate('.length, -1)}`;
  }
  const [minutes, hours, dom, month, dow, year] = schedule.fields.split(' ');
  const text = cronstrue.toString(`${minutes} ${hours} ${dom} ${month} ${dow} ${year}`, {
    dayOfWeekStartIndexZero: false,
    use24HourTimeFormat: true,
    verbose: false,
  });
  return `${text} (UTC)`;
}
