/**
 * The periods jobs work on, in a time zone: the day before the run's local day, and the week
 * (Monday 00:00 to Monday 00:00) before the run's local week. UTC for a job without a zone.
 *
 * A period runs from the first instant of its first local day to the first instant of the day
 * after its last, so on the days the clocks change a day is 23 or 25 hours long (23.5 or 24.5
 * on Lord Howe Island), and consecutive periods meet exactly: one run's end is the next run's
 * start, with no gap and no overlap (test/jobs/periods.test.ts replays a year of runs). A
 * day that begins at a skipped midnight begins at the change instead.
 *
 * The run key stays the scheduled instant (UTC); only what the run works on is local.
 */
import type { JobDefinition } from '../../lib/jobs.js';
import { UTC } from '../../lib/schedule.js';
import { DAY_MS } from '../../lib/time-zones.js';

export interface Period {
  /** The first instant of the period. */
  readonly start: Date;
  /** The first instant after it: the next period's start. */
  readonly end: Date;
  /** The local date of the first day, YYYY-MM-DD. */
  readonly startDate: string;
  /** The local date of the day after the last, YYYY-MM-DD. */
  readonly endDate: string;
}

/** The zone a job's periods are in: its `timeZone`, else UTC. */
export function zoneOf(job: Pick<JobDefinition, 'timeZone'> | undefined): string {
  return job?.timeZone ?? UTC;
}

const dateFormats = new Map<string, Intl.DateTimeFormat>();

/** The local date of `t` in `zone`, YYYY-MM-DD. */
export function localDate(t: Date, zone: string): string {
  let format = dateFormats.get(zone);
  if (format === undefined) {
    // en-CA writes dates as YYYY-MM-DD.
    format = new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' });
    dateFormats.set(zone, format);
  }
  return format.format(t);
}

/** `date` plus `days` calendar days, YYYY-MM-DD. */
export function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * DAY_MS).toISOString().slice(0, 10);
}

/** Offsets lie within UTC−12 and UTC+14, so a local day starts within this far of its UTC midnight. */
const OFFSET_BOUND_MS = 15 * 3_600_000;

/**
 * The first instant whose local date in `zone` is `date` or later: its local midnight, or the
 * change instant when the clocks skip midnight. Found by bisection to the second (offsets
 * and their changes are whole seconds).
 */
export function startOfLocalDay(date: string, zone: string): Date {
  const midnight = Date.parse(`${date}T00:00:00Z`);
  let lo = midnight - OFFSET_BOUND_MS; // local date is before `date`
  let hi = midnight + OFFSET_BOUND_MS; // local date is `date` or after
  while (hi - lo > 1_000) {
    const mid = lo + Math.floor((hi - lo) / 2_000) * 1_000;
    if (localDate(new Date(mid), zone) >= date) hi = mid;
    else lo = mid;
  }
  return new Date(hi);
}

/** The local days from `startDate` up to (not including) `endDate`, as a period. */
export function localDays(startDate: string, endDate: string, zone: string): Period {
  return { start: startOfLocalDay(startDate, zone), end: startOfLocalDay(endDate, zone), startDate, endDate };
}

/** The whole local day before the one that contains `t`: the period of a nightly job. */
export function previousDay(t: Date, zone: string): Period {
  const today = localDate(t, zone);
  return localDays(addDays(today, -1), today, zone);
}

/** The local week (Monday to Monday) before the one that contains `t`: the period of a weekly job. */
export function previousWeek(t: Date, zone: string): Period {
  const today = localDate(t, zone);
  const sinceMonday = (new Date(`${today}T00:00:00Z`).getUTCDay() + 6) % 7;
  const thisMonday = addDays(today, -sinceMonday);
  return localDays(addDays(thisMonday, -7), thisMonday, zone);
}
