/**
 * IANA time zones without a library: whether a name is one, a zone's wall clock and offset
 * at an instant, and the instants its clocks move forward (Intl, from the runtime's ICU).
 * lib/schedule.ts applies EventBridge Scheduler's daylight saving rules with these.
 */

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

/** A UTC day, and the billing period (app/billing.ts); a day in a zone can be 23 or 25 hours (app/jobs/periods.ts). */
export const DAY_MS = 86_400_000;

/**
 * A zone's offset changes are found by sampling its offset weekly, then bisecting: changes
 * are months apart (the shortest break, Morocco's for Ramadan, is about a month), and the
 * container checks the table at every start, so the check must stay cheap.
 */
const SAMPLE_MS = 7 * DAY_MS;
export const MINUTE_MS = 60_000;

/** The offset of `zone` from UTC at `t`, in ms (the local wall clock minus UTC, to the minute). */
export function offsetMs(t: number, zone: string): number {
  const [date, time] = wallClock(new Date(t), zone).split(' ');
  return Date.parse(`${date}T${time}:00Z`) - Math.floor(t / MINUTE_MS) * MINUTE_MS;
}

export interface SpringChange {
  /** The instant the clocks moved forward. */
  readonly at: number;
  /** The offsets before and after it, ms. */
  readonly before: number;
  readonly after: number;
}

/**
 * A year and a week: the span that holds a yearly rule's next change from any instant (the
 * daylight-saving guard's last year, GUARD_YEARS below). A yearly rule changes
 * the clocks on a weekday ("the second Sunday in March"), so two changes in a row can be 371
 * days apart; a shorter look-ahead from the day after one change would miss the next.
 */
export const SPRING_LOOKAHEAD_MS = 373 * DAY_MS;

/**
 * How many years the daylight-saving guard looks at: the Gregorian calendar's weekdays repeat
 * every 28 years (from 1901 to 2099), so a yearly rule ("the second Sunday in March") meets
 * every date and weekday a schedule can name within 28 years of changes.
 */
export const GUARD_YEARS = 28;
/** The last year an EventBridge cron's year field can name. */
export const LAST_CRON_YEAR = 2199;

/** The spring changes of each zone after a start time; five zones, looked up by every job. */
const springChangesCache = new Map<string, readonly SpringChange[]>();

/**
 * The instants `zone`'s clocks move forward from `from` to `from + span`, each to the whole
 * minute (offsets change on whole minutes; `from` is taken from the minute it falls in, so
 * a clock read mid-minute finds the same changes as one read on it).
 */
export function springChanges(zone: string, from: number, span: number = SPRING_LOOKAHEAD_MS): readonly SpringChange[] {
  const start = Math.floor(from / MINUTE_MS) * MINUTE_MS;
  const key = `${zone}@${start}@${span}`;
  const cached = springChangesCache.get(key);
  if (cached) return cached;
  const changes: SpringChange[] = [];
  const end = start + Math.ceil(span / MINUTE_MS) * MINUTE_MS;
  let before = offsetMs(start, zone);
  for (let last = start; last < end; ) {
    // The last sample falls on the end itself, so the span's last days are looked at too.
    const t = Math.min(last + SAMPLE_MS, end);
    const after = offsetMs(t, zone);
    if (after > before) changes.push({ at: changeMinute(zone, last, t, before), before, after });
    before = after;
    last = t;
  }
  springChangesCache.set(key, changes);
  return changes;
}

/** The first whole minute in (lo, hi] at which `zone`'s offset is no longer `before` (lo, hi whole minutes). */
function changeMinute(zone: string, lo: number, hi: number, before: number): number {
  while (hi - lo > MINUTE_MS) {
    const mid = lo + Math.floor((hi - lo) / 2 / MINUTE_MS) * MINUTE_MS;
    if (offsetMs(mid, zone) === before) lo = mid;
    else hi = mid;
  }
  return hi;
}
