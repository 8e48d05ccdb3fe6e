/**
 * The time rules every input shares: the API's timestamps and days (app/api/dates.ts) and a
 * job's scheduled time (app/jobs/args.ts) accept the same instants, so a time the API refuses
 * cannot start a job, and one a job accepts can be sent to the API.
 *
 * Plain code: the job command line checks its time with it before anything heavy loads.
 */

/**
 * Nothing before 1970 is taken: nothing was metered then, JavaScript's Date.UTC reads years
 * 0-99 as 1900-1999, which would move such a date silently, and Postgres has no year 0. The
 * year is checked as written, and a date-time's also once its offset is applied, so
 * `1970-01-01T00:30:00+01:00` (1969 in UTC) is refused, `1970-01-01T01:00:00+01:00` (the epoch)
 * is taken, and `1969-12-31T23:30:00-01:00` (1970 in UTC, written in 1969) is refused.
 */
export const MIN_YEAR = 1970;

/**
 * The widest UTC offset: ISO 8601's ±18:00, as java.time's ZoneOffset and .NET's
 * DateTimeOffset have it. Postgres refuses offsets from ±16:00 on (SQLSTATE 22009), so the API
 * converts every time to UTC before Postgres sees it.
 */
export const MAX_OFFSET_HOURS = 18;
export const MAX_OFFSET_MINUTES = MAX_OFFSET_HOURS * 60;

export const OFFSET_RULE = `a UTC offset between -${MAX_OFFSET_HOURS}:00 and +${MAX_OFFSET_HOURS}:00`;

/** Whether an offset of `minutes` (either sign) is within ±18:00. */
export function offsetInUse(minutes: number): boolean {
  return Math.abs(minutes) <= MAX_OFFSET_MINUTES;
}

const YEAR = '(?:19[7-9]\\d|[2-9]\\d{3})';
/** Leap years from 1970 on: divisible by 4 and not by 100, or by 400. */
const LEAP_YEAR = '(?:19(?:7[26]|8[048]|9[26])|[2-9]\\d(?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00)';
const MONTH_DAY = '(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))';
const DAY = `(?:${YEAR}-${MONTH_DAY}|${LEAP_YEAR}-02-29)`;
const FRACTION = '(?:\\.\\d+)?';
const TIME = `(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d${FRACTION}`;
// Up to ±17:59, or ±18:00 exactly.
const OFFSET = `(?:Z|[+-](?:(?:0\\d|1[0-7]):[0-5]\\d|${MAX_OFFSET_HOURS}:00))`;

/**
 * A time of 1970-01-01 earlier than its offset east of UTC, which is 1969 in UTC: the local
 * hh:mm is below the offset's hh:mm, compared digit by digit (the digits before the first that
 * differs are equal, captured and referred back to; that one is lower). Read as a lookahead in
 * front of the grammar, which bounds every digit.
 */
function beforeTheEpoch(): string {
  const lower = (d: number) => `[0-${d - 1}]`;
  const rest = `:\\d\\d${FRACTION}\\+`;
  const alternatives: string[] = [];
  let group = 0;
  for (let d = 1; d <= 9; d++) {
    // The higher digit as a class: `\1[3]` in the expression, since `\13` would refer to group 13.
    const higher = `[${d}]`;
    alternatives.push(`${lower(d)}\\d:\\d\\d${rest}${higher}`);
    alternatives.push(`(\\d)${lower(d)}:\\d\\d${rest}\\${++group}${higher}`);
    alternatives.push(`(\\d\\d):${lower(d)}\\d${rest}\\${++group}:${higher}`);
    group += 2;
    alternatives.push(`(\\d\\d):(\\d)${lower(d)}${rest}\\${group - 1}:\\${group}${higher}`);
  }
  return `1970-01-01T(?:${alternatives.join('|')})`;
}

/** A calendar day as the API and a job take it: a real one, 1970 to 9999 as written. */
export const DAY_PATTERN = new RegExp(`^${DAY}$`);
/**
 * A date-time as the API and a job take it: a real calendar day, an upper-case T, no leap
 * second, any fractional digits, an offset to ±18:00, and an instant from 1970 on in UTC.
 */
export const DATE_TIME_PATTERN = new RegExp(`^(?!${beforeTheEpoch()})${DAY}T${TIME}${OFFSET}$`);

const PARTS = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/** Milliseconds since the epoch of a date-time DATE_TIME_PATTERN accepts; fractional digits past the third dropped. */
export function instantMs(v: string): number {
  const m = PARTS.exec(v);
  if (m === null) throw new Error(`not a date-time: ${v}`);
  const [, y, mo, d, h, mi, s, frac = '', sign, oh = '0', om = '0'] = m;
  const local = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), Number(frac.slice(0, 3).padEnd(3, '0')));
  const offsetMs = (Number(oh) * 60 + Number(om)) * 60_000;
  return sign === '-' ? local + offsetMs : local - offsetMs;
}
