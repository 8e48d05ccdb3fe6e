/**
 * EventBridge schedule expressions: parsing, the next run times, the shortest gap between
 * runs, and a description in words, in UTC or in a job's time zone.
 *
 * Plain data and croner, no aws-cdk-lib: synth validates the jobs table with this module and
 * the container's `npm run jobs` describes the same table with it.
 *
 * EventBridge cron has six fields, `minutes hours day-of-month month day-of-week year`, always
 * in UTC, with day-of-week numbered 1 (SUN) to 7 (SAT) and exactly one of the two day fields
 * set to `?`. Croner reads the same grammar as a seven-part pattern (seconds first) in its
 * Quartz weekday mode, so the expression is handed to it unchanged but for a leading `0`.
 *
 * A job with a time zone is run by EventBridge Scheduler, which reads the same expression in
 * that zone. Its guide ("Daylight savings time on EventBridge Scheduler",
 * https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#daylist-savings-time)
 * states two rules, which `zonedRuns` applies to croner's times:
 * - spring: a time that does not exist that day (it falls in the skipped hour) is skipped,
 *   not moved; croner would move it to the first valid minute after the gap;
 * - autumn: a time that occurs twice (it falls in the repeated hour) runs only once; the guide
 *   does not say which of the two instants, so the first is taken. Both are the same local day,
 *   so a job's period (app/jobs/periods.ts) is the same either way.
 * A `rate()` is a fixed duration after the previous invocation, whatever the zone.
 */
import { Cron } from 'croner';
import cronstrue from 'cronstrue';

export type Schedule =
  | { readonly kind: 'rate'; readonly expression: string; readonly everyMs: number; readonly timeZone?: string }
  | { readonly kind: 'cron'; readonly expression: string; readonly fields: string; readonly timeZone?: string };

/** The zone of a schedule without one: EventBridge rules run in UTC. */
export const UTC = 'UTC';

const IANA_NAME = /^(?:UTC|[A-Z][A-Za-z_-]*(?:\/[A-Z0-9][A-Za-z0-9_+-]*)+)$/;

/**
 * Whether `zone` is an IANA time zone name ("Europe/Berlin", "UTC") that this runtime knows.
 * Offsets ("+01:00") and lower-case spellings are refused: Intl accepts them, Scheduler's
 * ScheduleExpressionTimezone takes names.
 */
export function isTimeZone(zone: unknown): zone is string {
  if (typeof zone !== 'string' || !IANA_NAME.test(zone)) return false;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

const RATE = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/;
const CRON = /^cron\((.+)\)$/;
const UNIT_MS = { minute: 60_000, hour: 3_600_000, day: 86_400_000 } as const;

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
    runs = cronRuns(schedule, 1_000, from);
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

const wallClocks = new Map<string, Intl.DateTimeFormat>();

/** The local date and time of `t` in `zone`, to the minute: "2026-10-25 02:30". */
export function wallClock(t: Date, zone: string): string {
  let format = wallClocks.get(zone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat('en-CA', { timeZone: zone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit' });
    wallClocks.set(zone, format);
  }
  const p = Object.fromEntries(format.formatToParts(t).map((part) => [part.type, part.value]));
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
}

/** A zone's offsets change by at most this much at once, so a repeated wall time recurs within it. */
const REPEAT_HORIZON_MS = 3 * 3_600_000;

/**
 * Scheduler's runs of a cron in `zone`: croner's, less a time moved out of the spring gap
 * (its wall clock no longer matches the expression) and less the second instant of a wall
 * time repeated in autumn.
 */
function zonedRuns(fields: string, zone: string, count: number, from: Date): Date[] {
  const cron = toCron(fields, zone);
  const runs: Date[] = [];
  const recent = new Map<string, number>();
  let cursor: Date | null = from;
  while (runs.length < count && (cursor = cron.nextRun(cursor)) !== null) {
    if (!cron.match(cursor)) continue;
    const wall = wallClock(cursor, zone);
    const t = cursor.getTime();
    for (const [key, at] of recent) if (at < t - REPEAT_HORIZON_MS) recent.delete(key);
    if (recent.has(wall)) continue;
    recent.set(wall, t);
    runs.push(cursor);
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

/** The schedule in words, e.g. "At 00:15, every day (UTC)" or "At 06:00, only on Monday (Europe/Berlin)". */
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
  return `${text} (${schedule.timeZone ?? UTC})`;
}

/** A year of a zone's offset changes is found by sampling its offset every hour (changes are hours apart). */
const YEAR_MS = 366 * 86_400_000;
const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;

/** The offset of `zone` from UTC at `t`, in ms (the local wall clock minus UTC, to the minute). */
function offsetMs(t: number, zone: string): number {
  const [date, time] = wallClock(new Date(t), zone).split(' ');
  return Date.parse(`${date}T${time}:00Z`) - Math.floor(t / MINUTE_MS) * MINUTE_MS;
}

/**
 * The wall times ("2027-03-28 02:30") in the year after `from` at which a cron schedule in a
 * time zone would run but for the spring change: they do not exist, and Scheduler skips
 * them (see the top of this module). Empty for a rate() or a schedule in UTC.
 */
export function skippedRuns(schedule: Schedule, from: Date = new Date()): string[] {
  const zone = schedule.timeZone ?? UTC;
  if (schedule.kind === 'rate' || zone === UTC) return [];
  const wallCron = toCron(schedule.fields);
  const skipped: string[] = [];
  const end = from.getTime() + YEAR_MS;
  let before = offsetMs(from.getTime(), zone);
  for (let t = from.getTime() + HOUR_MS; t <= end; t += HOUR_MS) {
    const after = offsetMs(t, zone);
    if (after > before) {
      // The clocks moved forward within the last hour: find the minute they did.
      let lo = t - HOUR_MS;
      let hi = t;
      while (hi - lo > MINUTE_MS) {
        const mid = lo + Math.floor((hi - lo) / 2 / MINUTE_MS) * MINUTE_MS;
        if (offsetMs(mid, zone) === before) lo = mid;
        else hi = mid;
      }
      // Wall times from the old clock's reading at the change up to the new one's do not exist.
      const gapEnd = hi + after;
      for (let wall = hi + before; wall < gapEnd; wall += MINUTE_MS) {
        if (wallCron.match(new Date(wall))) skipped.push(new Date(wall).toISOString().slice(0, 16).replace('T', ' '));
      }
    }
    before = after;
  }
  return skipped;
}
