/**
 * Properties of the time-zone code over arbitrary instants (any millisecond, not only whole
 * minutes), zones with daylight saving (Lord Howe's half-hour change, Troll's two-hour one,
 * Casablanca's Ramadan break, zones that dropped or moved their rules) and schedules:
 * - the daylight-saving guard refuses a schedule exactly when it names a wall time the
 *   clocks skip in the years it looks at, checked against wall times tested one by one with Intl
 *   on the days the clocks change (found day by day);
 * - a zoned job's periods tile time across every change: one local day each, meeting exactly.
 *
 * A short pass by default (seconds). More cases on demand: FC_NUM_RUNS=2000; a failure prints
 * its seed, and FC_SEED=<seed> replays it.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { addDays, localDate, previousDay, previousWeek } from '../../app/jobs/periods.js';
import { JOBS, validateJobs, type JobDefinition } from '../../lib/jobs.js';
import { guardSpanMs, nextRuns, parseSchedule, skippedRuns } from '../../lib/schedule.js';
import { DAY_MS, MINUTE_MS, wallClock } from '../../lib/time-zones.js';

const NUM_RUNS = Number(process.env.FC_NUM_RUNS ?? 25);
const SEED = process.env.FC_SEED === undefined ? undefined : Number(process.env.FC_SEED);
const params = { numRuns: NUM_RUNS, ...(SEED === undefined ? {} : { seed: SEED }) };
const HOUR = 3_600_000;

const ZONES = [
  'America/New_York', 'Europe/Berlin', 'Australia/Lord_Howe', 'America/Santiago', 'Africa/Casablanca',
  'Antarctica/Troll', 'Europe/Dublin', 'America/Havana', 'America/Sao_Paulo', 'Asia/Tehran',
  'Europe/Moscow', 'Pacific/Apia', 'Asia/Kolkata',
] as const;

const zone = fc.constantFrom(...ZONES);
/** Any millisecond from 2012 (after Samoa skipped a whole day) to 2060: mostly not on a whole minute. */
const instant = fc.date({ min: new Date('2012-01-01T00:00:00Z'), max: new Date('2060-01-01T00:00:00Z'), noInvalidDate: true });

/** Cron fields, mostly at the small hours when clocks change, on any day or on Sundays. */
const cronFields = fc
  .record({
    minutes: fc.uniqueArray(fc.integer({ min: 0, max: 59 }), { minLength: 1, maxLength: 2 }),
    hours: fc.uniqueArray(fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 0, max: 4 }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 23 }) }), { minLength: 1, maxLength: 2 }),
    sundays: fc.boolean(),
    // Any year, or years named: one, or a range, which the guard looks at to their end.
    years: fc.oneof({ weight: 3, arbitrary: fc.constant('*') }, { weight: 1, arbitrary: fc.integer({ min: 2012, max: 2099 }).map(String) }, {
      weight: 1,
      arbitrary: fc.tuple(fc.integer({ min: 2012, max: 2099 }), fc.integer({ min: 0, max: 40 })).map(([a, n]) => `${a}-${Math.min(a + n, 2099)}`),
    }),
  })
  .map(({ minutes, hours, sundays, years }) => `${minutes.join(',')} ${hours.join(',')} ${sundays ? '? * SUN' : '* * ?'} ${years}`);

/** `zone`'s offset at `t`, read from Intl's wall clock (ms). */
function offsetAt(t: number, zone: string): number {
  return Date.parse(`${wallClock(new Date(t), zone).replace(' ', 'T')}:00Z`) - Math.floor(t / MINUTE_MS) * MINUTE_MS;
}

const text = (wall: number) => new Date(wall).toISOString().slice(0, 16).replace('T', ' ');

/**
 * Whether the wall time `wall` (local time read as UTC) happens in `zone`: an instant whose
 * wall clock reads it, at the offset of two days before or after (no zone here changes twice
 * in four days).
 */
function happens(wall: number, zone: string): boolean {
  const offsets = new Set([offsetAt(wall - 2 * DAY_MS, zone), offsetAt(wall + 2 * DAY_MS, zone)]);
  return [...offsets].some((offset) => wallClock(new Date(wall - offset), zone) === text(wall));
}

/** The last year the oracle knows a zone's changes for: past any look-ahead from an instant below, or a year field's. */
const ORACLE_END = Date.UTC(2101, 0, 1);
const changeDaysCache = new Map<string, number[]>();

/**
 * The instants (noon UTC) after which `zone`'s offset differs a day later, from 2012 to 2100:
 * sampled every day with Intl, not as the guard finds them (weekly samples, then bisection).
 */
function changeDays(zone: string): number[] {
  let days = changeDaysCache.get(zone);
  if (days === undefined) {
    days = [];
    let before = offsetAt(Date.UTC(2011, 11, 31, 12), zone);
    for (let t = Date.UTC(2011, 11, 31, 12); t < ORACLE_END; t += DAY_MS) {
      const after = offsetAt(t + DAY_MS, zone);
      if (after !== before) days.push(t);
      before = after;
    }
    changeDaysCache.set(zone, days);
  }
  return days;
}

/** The schedule's wall times from `fromWall` to `untilWall` that never happen in `zone`: only a day when its clocks change can have one. */
function wallTimesThatNeverHappen(fields: string, zone: string, fromWall: number, untilWall: number): string[] {
  // The schedule read in UTC gives its wall times as they are written.
  const schedule = parseSchedule(`cron(${fields})`);
  const never = new Set<string>();
  for (const day of changeDays(zone).filter((t) => t >= fromWall - 2 * DAY_MS && t <= untilWall + 2 * DAY_MS)) {
    const walls = nextRuns(schedule, 50, new Date(day - DAY_MS)).map((d) => d.getTime()).filter((w) => w <= day + 2 * DAY_MS);
    for (const w of walls) if (w >= fromWall && w <= untilWall && !happens(w, zone)) never.add(text(w));
  }
  return [...never].sort();
}

const row = (schedule: string, timeZone: string): JobDefinition => ({
  ...JOBS.find((j) => j.name === 'weekly-export')!,
  name: 'nightly-digest',
  schedule,
  timeZone,
  usesExportBucket: false,
  timeoutSeconds: 60,
});
const refusedForGap = (problems: readonly string[]) => problems.some((p) => p.includes('names a time the clocks skip'));

describe('the daylight-saving guard', () => {
  it('finds the skipped time from any clock reading, not only a whole minute', () => {
    const at0230 = parseSchedule('cron(30 2 * * ? *)', 'America/New_York');
    expect(skippedRuns(at0230, new Date('2026-12-03T20:23:00.000Z'))[0]).toBe('2027-03-14 02:30');
    expect(skippedRuns(at0230, new Date('2026-12-03T20:23:45.083Z'))[0]).toBe('2027-03-14 02:30');
    expect(validateJobs([row('cron(30 2 * * ? *)', 'America/New_York')], new Date('2026-12-03T20:23:45.083Z'))).toEqual([
      expect.stringMatching(/^job "nightly-digest": schedule cron\(30 2 \* \* \? \*\) in America\/New_York names a time the clocks skip: 2027-03-14 02:30/),
    ]);
  });

  it('looks far enough ahead to find the next change of a yearly rule, 371 days after the last', () => {
    // New York changed on 2026-03-08 and changes next on 2027-03-14.
    expect(skippedRuns(parseSchedule('cron(30 2 * * ? *)', 'America/New_York'), new Date('2026-03-08T07:00:30Z'))[0]).toBe('2027-03-14 02:30');
  });

  it('looks at every year a schedule runs in: 28 years for any year, to its end for a year named', () => {
    const from = new Date('2026-12-03T20:26:38.541Z');
    // March 8 is New York's change day in 2026, then not again until 2037.
    expect(skippedRuns(parseSchedule('cron(30 2 8 3 ? *)', 'America/New_York'), from).slice(0, 2)).toEqual(['2037-03-08 02:30', '2043-03-08 02:30']);
    expect(skippedRuns(parseSchedule('cron(30 2 * * ? 2028)', 'Europe/Berlin'), from)).toEqual(['2028-03-26 02:30']);
    expect(skippedRuns(parseSchedule('cron(30 2 * * ? 2090-2091)', 'Europe/Berlin'), from)).toEqual(['2090-03-26 02:30', '2091-03-25 02:30']);
    expect(refusedForGap(validateJobs([row('cron(30 2 * * ? 2028)', 'Europe/Berlin')], from))).toBe(true);
  });

  test.prop([cronFields, zone, instant], params)('refuses a schedule exactly when one of its wall times never happens', (fields, zone, from) => {
    const skipped = skippedRuns(parseSchedule(`cron(${fields})`, zone), from);
    const span = guardSpanMs(fields, from);
    const fromWall = from.getTime() + offsetAt(from.getTime(), zone);
    const untilWall = from.getTime() + span + offsetAt(from.getTime() + span, zone);
    // What it names never happens and is the schedule's; what never happens well inside the
    // look-ahead (a day from either end, clear of any offset) is named.
    const never = wallTimesThatNeverHappen(fields, zone, fromWall - DAY_MS, untilWall + DAY_MS);
    for (const s of skipped) expect(never, `${s} is named but happens`).toContain(s);
    for (const n of wallTimesThatNeverHappen(fields, zone, fromWall + DAY_MS, untilWall - DAY_MS)) {
      expect(skipped, `${n} never happens but is not named`).toContain(n);
    }
    expect(refusedForGap(validateJobs([row(`cron(${fields})`, zone)], from))).toBe(skipped.length > 0);
  });
});

/** An instant within three days of one of the year's changes, where a period's edges move. */
const nearAChange = fc.tuple(zone, fc.integer({ min: 2012, max: 2059 }), fc.integer({ min: -3 * DAY_MS, max: 3 * DAY_MS })).map(([zone, year, shift]) => {
  let t = Date.UTC(year, 0, 1);
  const changes: number[] = [];
  for (let prev = offsetAt(t, zone); t < Date.UTC(year + 1, 0, 1); t += DAY_MS) {
    const now = offsetAt(t, zone);
    if (now !== prev) changes.push(t);
    prev = now;
  }
  const base = changes.length > 0 ? changes[Math.abs(shift) % changes.length]! : Date.UTC(year, 5, 1);
  return { zone, t: new Date(base + shift) };
});
const anyInstant = fc.tuple(zone, instant).map(([zone, t]) => ({ zone, t }));

describe('the periods of a zoned job', () => {
  test.prop([fc.oneof(nearAChange, anyInstant), fc.integer({ min: 1, max: 2 * DAY_MS })], params)(
    'tile time: the day before is one whole local day, and the next day\'s run starts where it ends',
    ({ zone, t }, later) => {
      const day = previousDay(t, zone);
      const today = localDate(t, zone);
      expect(day.startDate).toBe(addDays(today, -1));
      expect(localDate(day.start, zone)).toBe(day.startDate);
      expect(localDate(new Date(day.start.getTime() - 1_000), zone)).not.toBe(day.startDate);
      expect(localDate(new Date(day.end.getTime() - 1_000), zone)).toBe(day.startDate);
      expect(localDate(day.end, zone)).toBe(today);
      // Troll moves its clocks by two hours.
      const hours = (day.end.getTime() - day.start.getTime()) / HOUR;
      expect(hours).toBeGreaterThanOrEqual(22);
      expect(hours).toBeLessThanOrEqual(26);
      const next = new Date(t.getTime() + later);
      if (localDate(next, zone) === addDays(today, 1)) expect(previousDay(next, zone).start).toEqual(day.end);
      const week = previousWeek(t, zone);
      const nextWeek = previousWeek(new Date(week.end.getTime() + 7 * DAY_MS + 3 * HOUR), zone);
      expect(nextWeek.start).toEqual(week.end);
      expect(new Date(`${week.startDate}T00:00:00Z`).getUTCDay()).toBe(1);
    },
  );
});
