/**
 * EventBridge schedule expressions: parsing, the next run times and the shortest gap between
 * runs, in UTC or in a job's time zone (the description in words: lib/schedule-words.ts).
 *
 * Plain data and croner, no aws-cdk-lib: synth validates the jobs table with this module and
 * the container's `npm run jobs` lists the same table's next runs with it.
 *
 * EventBridge cron has six fields, `minutes hours day-of-month month day-of-week year`, always
 * in UTC, with day-of-week numbered 1 (SUN) to 7 (SAT) and exactly one of the two day fields
 * set to `?`. Croner reads the same grammar as a seven-part pattern (seconds first) in its
 * Quartz weekday mode, so the expression is handed to it unchanged but for a leading `0`.
 *
 * A job with a time zone is run by EventBridge Scheduler, which reads the same expression in
 * that zone. Its guide ("Daylight savings time on EventBridge Scheduler",
 * https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#daylist-savings-time)
 * states two rules, which `zonedRuns` applies:
 * - spring: a time that does not exist that day (it falls in the skipped hour) is skipped,
 *   not moved (croner's own time zone mode would move it to the first minute after the gap);
 * - autumn: a time that occurs twice (it falls in the repeated hour) runs only once; the guide
 *   does not say which of the two instants, so the first is taken. Both are the same local day,
 *   so a job's period (app/jobs/periods.ts) is the same either way.
 * A `rate()` is a fixed duration after the previous invocation, whatever the zone.
 */
import { Cron } from 'croner';
import { DAY_MS, GUARD_YEARS, LAST_CRON_YEAR, MINUTE_MS, SPRING_LOOKAHEAD_MS, isTimeZone, offsetMs, springChanges, wallClock } from './time-zones.js';

export { isTimeZone, wallClock };

export type Schedule =
  | { readonly kind: 'rate'; readonly expression: string; readonly everyMs: number; readonly timeZone?: string }
  | { readonly kind: 'cron'; readonly expression: string; readonly fields: string; readonly timeZone?: string };

/** The zone of a schedule without one: EventBridge rules run in UTC. */
export const UTC = 'UTC';


const RATE = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/;
const CRON = /^cron\((.+)\)$/;
const UNIT_MS = { minute: 60_000, hour: 3_600_000, day: DAY_MS } as const;

/**
 * Parses an EventBridge `rate(...)` or `cron(...)` expression, read in `timeZone` (an IANA
 * name; UTC without one), or throws an Error saying what is wrong.
 */
export function parseSchedule(expression: string, timeZone?: string): Schedule {
  if (timeZone !== undefined && !isTimeZone(timeZone)) {
    throw new Error(`time zone ${JSON.stringify(timeZone)} is not an IANA time zone name (e.g. "Europe/Berlin")`);
  }
  const zone = timeZone === undefined ? {} : { timeZone };
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
    return { kind: 'rate', expression, everyMs: value * UNIT_MS[singular], ...zone };
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
    return { kind: 'cron', expression, fields: fields.join(' '), ...zone };
  }
  throw new Error('expected "rate(N unit)" or "cron(minutes hours day-of-month month day-of-week year)"');
}

function toCron(fields: string, timeZone: string = UTC): Cron {
  return new Cron(`0 ${fields}`, {
    ...(timeZone === UTC ? { utcOffset: 0 } : { timezone: timeZone }),
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

function upcomingRuns(schedule: Schedule & { kind: 'cron' }, from: Date): readonly Date[] {
  const key = `${schedule.fields}@${schedule.timeZone ?? UTC}@${from.getTime()}`;
  let runs = upcomingRunsCache.get(key);
  if (runs === undefined) {
    // A zoned cron's instants cost a few Intl look-ups each, so it looks a year ahead (its
    // daylight saving changes included) rather than 1,000 runs, which are years for a daily job.
    runs = schedule.timeZone === undefined || schedule.timeZone === UTC
      ? cronRuns(schedule, 1_000, from)
      : zonedRuns(schedule.fields, schedule.timeZone, 1_000, from, new Date(from.getTime() + YEAR_AHEAD_MS));
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
  return cronRuns(schedule, count, from);
}

function cronRuns(schedule: Schedule & { kind: 'cron' }, count: number, from: Date): Date[] {
  const zone = schedule.timeZone ?? UTC;
  return zone === UTC ? toCron(schedule.fields).nextRuns(count, from) : zonedRuns(schedule.fields, zone, count, from);
}


/** A year and two days: a year of runs, and the first after it. */
const YEAR_AHEAD_MS = 368 * DAY_MS;

/** Offsets lie within UTC−12 and UTC+14: a wall time's instants are within this far of it read as UTC. */
const OFFSET_BOUND_MS = 15 * 3_600_000;

/**
 * The instant Scheduler runs the wall time `wall` (ms, the local time read as if UTC) in
 * `zone`: of the offsets around it, the earliest instant whose wall clock is `wall`. None
 * when the clocks skip it (spring); the first of two when they repeat it (autumn).
 */
function instantOf(wall: number, zone: string): number | undefined {
  const offsets = new Set([offsetMs(wall - OFFSET_BOUND_MS, zone), offsetMs(wall + OFFSET_BOUND_MS, zone)]);
  let first: number | undefined;
  for (const offset of offsets) {
    const t = wall - offset;
    if (offsetMs(t, zone) === offset && (first === undefined || t < first)) first = t;
  }
  return first;
}

/**
 * Scheduler's runs of a cron in `zone`: the expression's wall times (croner in UTC, which is
 * several times faster than its zoned mode), each at the instant `instantOf` gives it, so a
 * time in the spring gap is skipped and a repeated one runs once.
 */
function zonedRuns(fields: string, zone: string, count: number, from: Date, until?: Date): Date[] {
  const cron = toCron(fields);
  const runs: Date[] = [];
  // Walls from before `from`'s own: the zone's wall clock may run up to a day behind UTC.
  let wall: Date | null = new Date(from.getTime() + offsetMs(from.getTime(), zone) - 3 * 3_600_000);
  while (runs.length < count) {
    // Small batches: each wall time costs Intl look-ups, and `until` may end the walk early.
    const batch = cron.nextRuns(Math.min(count - runs.length, 64) + 8, wall);
    if (batch.length === 0) break;
    for (const w of batch) {
      const t = instantOf(w.getTime(), zone);
      if (t !== undefined && t > from.getTime() && runs.length < count) runs.push(new Date(t));
    }
    wall = batch[batch.length - 1]!;
    if (until !== undefined && wall.getTime() - OFFSET_BOUND_MS > until.getTime()) return runs.filter((r, i) => i < 2 || r <= until);
  }
  return runs;
}

/**
 * The shortest gap between two consecutive runs, looked for over the next year of runs:
 * a job must finish within it or the next run overlaps. Infinity for a schedule that runs
 * at most once.
 */
export function shortestIntervalMs(schedule: Schedule, from: Date = new Date()): number {
  if (schedule.kind === 'rate') return schedule.everyMs;
  const runs = upcomingRuns(schedule, from);
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
  const runs = upcomingRuns(schedule, from);
  let longest = 0;
  for (let i = 1; i < runs.length; i++) {
    longest = Math.max(longest, runs[i]!.getTime() - runs[i - 1]!.getTime());
  }
  return runs.length > 1 ? longest : Infinity;
}

/**
 * The wall times ("2027-03-28 02:30") at which a cron schedule in a time zone would run but for
 * a spring change: they do not exist, and Scheduler skips them (see the top of this module).
 * Looked for over the years the schedule can run (guardSpanMs). Empty for a rate() or a
 * schedule in UTC.
 */
export function skippedRuns(schedule: Schedule, from: Date = new Date()): string[] {
  const zone = schedule.timeZone ?? UTC;
  if (schedule.kind === 'rate' || zone === UTC) return [];
  const wallCron = toCron(schedule.fields);
  const skipped: string[] = [];
  for (const change of springChanges(zone, from.getTime(), guardSpanMs(schedule.fields, from))) {
    // Wall times from the old clock's reading at the change up to the new one's do not exist;
    // cron times are whole minutes, so the walk starts on one.
    const first = Math.ceil((change.at + change.before) / MINUTE_MS) * MINUTE_MS;
    for (let wall = first; wall < change.at + change.after; wall += MINUTE_MS) {
      if (wallCron.match(new Date(wall))) skipped.push(new Date(wall).toISOString().slice(0, 16).replace('T', ' '));
    }
  }
  return skipped;
}

/**
 * How far after `from` the guard looks: GUARD_YEARS and a week (every date and weekday a yearly
 * rule meets), or to the end of the last year the cron's year field names, if later (`2060`,
 * `2030-2070`; a step such as `2028/4` runs to LAST_CRON_YEAR).
 */
export function guardSpanMs(fields: string, from: Date): number {
  const [y, m, d] = [from.getUTCFullYear(), from.getUTCMonth(), from.getUTCDate()];
  // GUARD_YEARS - 1 calendar years, then the year and a week that finds a yearly rule's next change.
  const cycle = Date.UTC(y + GUARD_YEARS - 1, m, d) - Date.UTC(y, m, d) + SPRING_LOOKAHEAD_MS;
  const year = fields.split(' ')[5]!;
  if (year === '*') return cycle;
  const last = year.includes('/') ? LAST_CRON_YEAR : Math.max(...(year.match(/\d{4}/g) ?? ['0']).map(Number));
  return Math.max(cycle, Date.UTC(Math.min(last, LAST_CRON_YEAR) + 1, 0, 8) - from.getTime());
}
