/**
 * The time rules every input shares: the API's timestamps and days (app/api/request.ts) and a
 * job's scheduled time (app/jobs/args.ts) accept the same instants, so a time the API refuses
 * cannot start a job, and one a job accepts can be sent to the API.
 *
 * Plain code: the job command line checks its time with it before anything heavy loads.
 */

/**
 * Instants before 1970 (UTC) are refused: nothing was metered then, and JavaScript's Date.UTC
 * reads years 0-99 as 1900-1999, which would move such a date silently. Postgres has no year 0.
 */
export const MIN_YEAR = 1970;
export const EPOCH_MS = Date.UTC(MIN_YEAR, 0, 1);

/** The widest UTC offset in use (Kiribati, +14:00); Postgres refuses offsets from 16:00 on (SQLSTATE 22009). */
export const MAX_OFFSET_HOURS = 14;
export const MAX_OFFSET_MINUTES = MAX_OFFSET_HOURS * 60;

export const OFFSET_RULE = `a UTC offset between -${MAX_OFFSET_HOURS}:00 and +${MAX_OFFSET_HOURS}:00`;
export const YEAR_RULE = `in ${MIN_YEAR} or later (UTC)`;

/** Whether an offset of `minutes` (either sign) is one in use. */
export function offsetInUse(minutes: number): boolean {
  return Math.abs(minutes) <= MAX_OFFSET_MINUTES;
}

/** Whether the instant `ms` is 1970-01-01T00:00:00Z or later. */
export function sinceEpoch(ms: number): boolean {
  return ms >= EPOCH_MS;
}
