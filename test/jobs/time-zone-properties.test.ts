/**
 * Properties of the time-zone code over arbitrary instants (any millisecond, not only whole
 * minutes), zones with daylight saving (Lord Howe's half-hour change, Troll's two-hour one,
 * Casablanca's Ramadan break, zones that dropped or moved their rules) and schedules:
 * - the daylight-saving guard refuses a schedule exactly when it names a wall time the
 *   clocks skip, checked against wall times tested one by one with Intl;
 * - a zoned job's periods tile time across every change: one local day each, meeting exactly.
 *
 * A short pass by default (seconds). More cases on demand: FC_NUM_RUNS=2000; a failure prints
 * its seed, and FC_SEED=<seed> replays it.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { addDays, localDate, previousDay, previousWeek } from '../../app/jobs/periods.js';
import { JOBS, validateJobs, type JobDefinition } from '../../lib/jobs.js';
import { nextRuns, parseSchedule, skippedRuns } from '../../lib/schedule.js';
import { DAY_MS, MINUTE_MS, SPRING_LOOKAHEAD_MS, wallClock } from '../../lib/time-zones.js';

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
  })
  .map(({ minutes, hours, sundays }) => `${minutes.join(',')} ${hours.join(',')} ${sundays ? '? * SUN' : '* * ?'} *`);

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

/** The schedule's wall times from `fromWall` to `untilWall` that never happen in `zone`. */
function wallTimesThatNeverHappen(fields: string, zone: string, fromWall: number, untilWall: number): string[] {
  // The schedule read in UTC gives its wall times as they are written.
  const walls = nextRuns(parseSchedule(`cron(${fields})`), 4 * 400, new Date(fromWall)).map((d) => d.getTime()).filter((w) => w <= untilWall);
  return walls.filter((w) => !happens(w, zone)).map(text);
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
    expect(skippedRuns(at0230, new Date('2026-12-03T20:23:00.000Z'))).toEqual(['2027-03-14 02:30']);
    expect(skippedRuns(at0230, new Date('2026-12-03T20:23:45.083Z'))).toEqual(['2027-03-14 02:30']);
    expect(validateJobs([row('cron(30 2 * * ? *)', 'America/New_York')], new Date('2026-12-03T20:23:45.083Z'))).toEqual([
      expect.stringMatching(/^job "nightly-digest": schedule cron\(30 2 \* \* \? \*\) in America\/New_York names a time the clocks skip: 2027-03-14 02:30/),
    ]);
  });

  it('looks far enough ahead to find the next change of a yearly rule, 371 days after the last', () => {
    // New York changed on 2026-03-08 and changes next on 2027-03-14.
    expect(skippedRuns(parseSchedule('cron(30 2 * * ? *)', 'America/New_York'), new Date('2026-03-08T07:00:30Z'))).toEqual(['2027-03-14 02:30']);
  });

  test.prop([cronFields, zone, instant], params)('refuses a schedule exactly when one of its wall times never happens', (fields, zone, from) => {
    const skipped = skippedRuns(parseSchedule(`cron(${fields})`, zone), from);
    const fromWall = from.getTime() + offsetAt(from.getTime(), zone);
    const untilWall = from.getTime() + SPRING_LOOKAHEAD_MS + offsetAt(from.getTime() + SPRING_LOOKAHEAD_MS, zone);
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
