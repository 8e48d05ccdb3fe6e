/**
 * Jobs in a time zone: EventBridge Scheduler's daylight saving rules as the app's schedule
 * code applies them, the table's checks of the zone, the periods a zoned job works on (a year
 * of runs replayed: they tile time), and what the operator sees (`npm run jobs`, the
 * missed-run window).
 */
import { describe, expect, it } from 'vitest';
import { listJob, runsPerMonth, formatListing } from '../../app/jobs/list.js';
import { localDate, previousDay, previousWeek, startOfLocalDay, type Period } from '../../app/jobs/periods.js';
import { exportWeekFor } from '../../app/jobs/weekly-export.js';
import { missedRunWindow } from '../../lib/constructs/missed-run.js';
import { JOBS, scheduleOf, validateJobs, type JobDefinition } from '../../lib/jobs.js';
import { longestIntervalMs, nextRuns, parseSchedule, shortestIntervalMs, skippedRuns } from '../../lib/schedule.js';
import { describeSchedule } from '../../lib/schedule-words.js';

const HOUR = 3_600_000;
const iso = (dates: readonly Date[]) => dates.map((d) => d.toISOString());
const TABLE: readonly JobDefinition[] = JOBS;
const zonedRow = (overrides: Partial<JobDefinition>): JobDefinition => ({
  ...TABLE.find((j) => j.name === 'weekly-export')!,
  name: 'nightly-digest',
  description: 'A nightly job in a time zone',
  schedule: 'cron(15 0 * * ? *)',
  timeZone: 'Europe/Berlin',
  usesExportBucket: false,
  ...overrides,
});

describe('EventBridge Scheduler\'s daylight saving rules, in the app\'s schedule code', () => {
  it('skips a time in the hour the clocks skip in spring (Berlin, 2026-03-29, 02:00 to 03:00)', () => {
    const at0230 = parseSchedule('cron(30 2 * * ? *)', 'Europe/Berlin');
    expect(iso(nextRuns(at0230, 3, new Date('2026-03-27T12:00:00Z')))).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      // no run on 2026-03-29: 02:30 does not exist that day
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
      '2026-03-31T00:30:00.000Z',
    ]);
    expect(skippedRuns(at0230, new Date('2026-01-05T00:00:00Z')).slice(0, 2)).toEqual(['2026-03-29 02:30', '2027-03-28 02:30']);
    // Lord Howe Island moves its clocks by 30 minutes: only 02:00 to 02:30 is skipped.
    expect(skippedRuns(parseSchedule('cron(15 2 * * ? *)', 'Australia/Lord_Howe'), new Date('2026-01-05T00:00:00Z'))[0]).toBe('2026-10-04 02:15');
    expect(skippedRuns(parseSchedule('cron(45 2 * * ? *)', 'Australia/Lord_Howe'), new Date('2026-01-05T00:00:00Z'))).toEqual([]);
  });

  it('runs a time in the hour repeated in autumn once (Berlin, 2026-10-25, 02:00 to 03:00 twice)', () => {
    expect(iso(nextRuns(parseSchedule('cron(30 2 * * ? *)', 'Europe/Berlin'), 3, new Date('2026-10-24T12:00:00Z')))).toEqual([
      '2026-10-25T00:30:00.000Z', // 02:30 CEST, the first of the two; not again at 01:30Z (02:30 CET)
      '2026-10-26T01:30:00.000Z',
      '2026-10-27T01:30:00.000Z',
    ]);
    // Hourly: 02:00 comes twice on the wall clock and runs once, so the hour after it has no run.
    expect(iso(nextRuns(parseSchedule('cron(0 * * * ? *)', 'Europe/Berlin'), 3, new Date('2026-10-24T23:30:00Z')))).toEqual([
      '2026-10-25T00:00:00.000Z', // 02:00 CEST
      '2026-10-25T02:00:00.000Z', // 03:00 CET
      '2026-10-25T03:00:00.000Z',
    ]);
  });

  it('measures the gaps on the instants: a nightly job is 23 and 25 hours apart across the changes', () => {
    const nightly = parseSchedule('cron(15 0 * * ? *)', 'Europe/Berlin');
    const from = new Date('2026-01-05T00:00:00Z');
    expect(shortestIntervalMs(nightly, from)).toBe(23 * HOUR);
    expect(longestIntervalMs(nightly, from)).toBe(25 * HOUR);
    expect(longestIntervalMs(parseSchedule('cron(15 0 * * ? *)', 'Asia/Kolkata'), from)).toBe(24 * HOUR);
    expect(describeSchedule(nightly)).toBe('At 00:15 (Europe/Berlin)');
  });
});

describe('the table\'s timeZone column', () => {
  it('is checked with the rest, every problem naming the job and the field', () => {
    const problems = validateJobs([
      zonedRow({ name: 'mars-job', timeZone: 'Mars/Olympus_Mons' }),
      zonedRow({ name: 'lower-job', timeZone: 'europe/berlin' }),
      zonedRow({ name: 'offset-job', timeZone: '+01:00' }),
      zonedRow({ name: 'gap-job', schedule: 'cron(30 2 * * ? *)' }),
      { ...TABLE.find((j) => j.name === 'billing-run')!, timeZone: 'America/New_York' },
      zonedRow({ name: 'fine-job' }),
    ], new Date('2026-01-05T00:00:00Z'));
    expect(problems).toEqual([
      expect.stringMatching(/^job "mars-job": timeZone "Mars\/Olympus_Mons" is not an IANA time zone name/),
      expect.stringMatching(/^job "lower-job": timeZone "europe\/berlin" is not an IANA time zone name/),
      expect.stringMatching(/^job "offset-job": timeZone "\+01:00" is not an IANA time zone name/),
      expect.stringMatching(/^job "gap-job": schedule cron\(30 2 \* \* \? \*\) in Europe\/Berlin names a time the clocks skip: 2026-03-29 02:30/),
      expect.stringMatching(/^job "billing-run": timeZone cannot be "America\/New_York": its invoices are UTC days/),
    ]);
  });

  it('accepts the shipped table, whose weekly-export runs in Berlin', () => {
    expect(validateJobs(TABLE)).toEqual([]);
    expect(TABLE.find((j) => j.name === 'weekly-export')!.timeZone).toBe('Europe/Berlin');
  });
});

/** Every scheduled instant of 2026 (and the first of 2027), mapped through `period`. */
function replay(schedule: string, zone: string, period: (t: Date) => Period): Period[] {
  const runs = nextRuns(parseSchedule(schedule, zone), 400, new Date('2025-12-31T12:00:00Z')).filter((t) => t < new Date('2027-01-08T00:00:00Z'));
  return runs.map(period);
}

/** No gap and no overlap: each period starts where the one before ended, and none is empty. */
function expectTiling(periods: readonly Period[]): void {
  for (let i = 1; i < periods.length; i++) {
    expect(periods[i]!.start.getTime(), `${periods[i]!.startDate} after ${periods[i - 1]!.startDate}`).toBe(periods[i - 1]!.end.getTime());
  }
  for (const p of periods) expect(p.end.getTime()).toBeGreaterThan(p.start.getTime());
}

const ZONES = ['Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kolkata', 'UTC'] as const;
/** The lengths (hours) of the days of a year in each zone: 23 and 25 around the changes, 23.5 and 24.5 on Lord Howe. */
const DAY_LENGTHS: Record<(typeof ZONES)[number], number[]> = {
  'Europe/Berlin': [23, 24, 25],
  'America/New_York': [23, 24, 25],
  'Australia/Lord_Howe': [23.5, 24, 24.5],
  'Asia/Kolkata': [24],
  UTC: [24],
};

describe('a year of runs, replayed through the periods of a zoned job', () => {
  for (const zone of ZONES) {
    it(`tiles time in ${zone}: nightly runs (one in the repeated hour) bill each local day once, weekly runs each local week`, () => {
      // 00:15 exists every day in every zone here; 01:45 is in New York's and Lord Howe's repeated hour in autumn.
      for (const schedule of ['cron(15 0 * * ? *)', 'cron(45 1 * * ? *)']) {
        const days = replay(schedule, zone, (t) => previousDay(t, zone));
        expect(days.length).toBeGreaterThanOrEqual(366);
        expect(new Set(days.map((p) => p.startDate)).size).toBe(days.length);
        expectTiling(days);
        const lengths = new Set(days.map((p) => (p.end.getTime() - p.start.getTime()) / HOUR));
        expect([...lengths].sort((a, b) => a - b)).toEqual(DAY_LENGTHS[zone]);
        // Each period is one local day, from its local midnight, named by its local date.
        for (const p of days) {
          expect(localDate(p.start, zone)).toBe(p.startDate);
          expect(localDate(new Date(p.start.getTime() - 1), zone)).not.toBe(p.startDate);
        }
      }
      const weeks = replay('cron(0 6 ? * MON *)', zone, (t) => previousWeek(t, zone));
      expect(weeks.length).toBeGreaterThanOrEqual(52);
      expectTiling(weeks);
      for (const w of weeks) expect(new Date(`${w.startDate}T00:00:00Z`).getUTCDay()).toBe(1);
      // weekly-export's own function names the same weeks.
      const runs = nextRuns(parseSchedule('cron(0 6 ? * MON *)', zone), weeks.length, new Date('2025-12-31T12:00:00Z'));
      expect(runs.map((t) => exportWeekFor(t, zone))).toEqual(weeks.map((w) => ({ start: w.startDate, end: w.endDate })));
    });
  }

  it('would leave a gap if a run fell in the skipped hour, which the table refuses', () => {
    const days = replay('cron(30 2 * * ? *)', 'Europe/Berlin', (t) => previousDay(t, 'Europe/Berlin'));
    const gaps = days.slice(1).filter((p, i) => p.start.getTime() !== days[i]!.end.getTime());
    expect(gaps.map((p) => p.startDate)).toEqual(['2026-03-29']);
  });

  it('starts a day at the change when the clocks skip its midnight (Santiago, 2026-09-06)', () => {
    const start = startOfLocalDay('2026-09-06', 'America/Santiago');
    expect(localDate(start, 'America/Santiago')).toBe('2026-09-06');
    expect(localDate(new Date(start.getTime() - 1_000), 'America/Santiago')).toBe('2026-09-05');
  });
});

describe('what the operator sees of a zoned job', () => {
  const weekly = TABLE.find((j) => j.name === 'weekly-export')!;

  it('npm run jobs shows the zone and the next runs in it and in UTC, across the spring change', () => {
    const listing = listJob(weekly, undefined, new Date('2026-03-20T12:00:00Z'));
    expect(listing.timeZone).toBe('Europe/Berlin');
    expect(listing.nextRunsLocal).toEqual(['2026-03-23 06:00', '2026-03-30 06:00', '2026-04-06 06:00']);
    expect(listing.nextRuns).toEqual(['2026-03-23T05:00:00.000Z', '2026-03-30T04:00:00.000Z', '2026-04-06T04:00:00.000Z']);
    const text = formatListing([listing]);
    expect(text).toContain('Europe/Berlin');
    expect(text).toContain('03-23 06:00 (05:00Z), 03-30 06:00 (04:00Z), 04-06 06:00 (04:00Z)');
    // A run on another UTC date shows that date.
    expect(formatListing([listJob({ ...weekly, schedule: 'cron(0 22 ? * SUN *)', timeZone: 'America/New_York' }, undefined, new Date('2026-03-20T12:00:00Z'))])).toContain('03-22 22:00 (03-23 02:00Z)');
  });

  it('counts a month\'s runs as the schedule runs in its zone', () => {
    const from = new Date('2026-01-05T00:00:00Z');
    // A run at 02:30 in Berlin is skipped one day a year; in UTC it is not.
    expect(runsPerMonth(parseSchedule('cron(30 2 * * ? *)', 'Europe/Berlin'), from) * 12).toBe(364);
    expect(runsPerMonth(parseSchedule('cron(30 2 * * ? *)'), from) * 12).toBe(365);
  });

  it('gives a nightly job\'s missed-run alarm a window that covers the 25-hour night of the autumn change', () => {
    const nightly = zonedRow({ missedRunGraceMinutes: 60 });
    const window = missedRunWindow(nightly, new Date('2026-01-05T00:00:00Z'))!;
    expect(window).toEqual({ periodSeconds: (25 * 3_600) + 3_600, evaluationPeriods: 1, alignment: 'sliding' });
    // In UTC the same row's window is a day and the grace.
    expect(missedRunWindow({ ...nightly, timeZone: undefined }, new Date('2026-01-05T00:00:00Z'))!.periodSeconds).toBe(24 * 3_600 + 3_600);
    expect(longestIntervalMs(scheduleOf(nightly), new Date('2026-01-05T00:00:00Z'))).toBe(25 * HOUR);
  });

  it('keeps the weekly export\'s whole-UTC-day missed-run window, its runs replayed in Berlin time', () => {
    expect(missedRunWindow(weekly, new Date('2026-01-05T00:00:00Z'))).toEqual({ periodSeconds: 86_400, evaluationPeriods: 7, alignment: 'wall-clock' });
  });
});
