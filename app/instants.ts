/**
 * The time rules every input shares: the API's timestamps and days (app/api/dates.ts) and a
 * job's scheduled time (app/jobs/args.ts) accept the same instants, so a time the API refuses
 * cannot start a job, and one a job accepts can be sent to the API.
 *
 * Plain code: the job command line checks its time with it before anything heavy loads.
 */

/**
 * Years before 1970, as written, are refused: nothing was metered then, JavaScript's Date.UTC
 * reads years 0-99 as 1900-1999, which would move such a date silently, and Postgres has no
 * year 0. The rule is on the year as written, so a pattern in the OpenAPI document can state it.
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
