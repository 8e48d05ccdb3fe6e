/**
 * The API's dates, one rule for the server and the OpenAPI document: each is a regular
 * expression the document carries as its `pattern`, so a client's validator and the server
 * accept exactly the same strings (test/contract.test.ts and the fuzzer's differential check prove it).
 *
 * - A calendar day (`YYYY-MM-DD`) is a real one: no 2026-02-30, a 29 February in leap years only.
 * - Days are 1970 to 9999 as written; a date-time's instant is 1970 or later in UTC, once its
 *   offset is applied (app/instants.ts, the rules a job's scheduled time shares).
 * - A date-time has an offset, `Z` or `±hh:mm` up to ±18:00 (app/instants.ts); no leap second; any number of
 *   fractional digits, of which the server keeps three: the rest are dropped, never rounded.
 *
 * The server converts every date-time to UTC, to the millisecond, before Postgres sees it
 * (`utcInstant`): Postgres refuses offsets from ±16:00 on, and would round a seventh
 * fractional digit (23:59:59.9999995 is the next day's midnight there).
 */
import { z } from 'zod';
import { DATE_TIME_PATTERN, DAY_PATTERN, instantMs, MAX_OFFSET_HOURS, MIN_YEAR } from '../instants.js';

export { DATE_TIME_PATTERN, DAY_PATTERN, instantMs };

export const DAY_MESSAGE = `must be a real calendar date YYYY-MM-DD in ${MIN_YEAR} or later`;
export const DATE_TIME_MESSAGE = `must be an ISO 8601 date-time on a real calendar date, with an offset (Z, or ±hh:mm up to ±${MAX_OFFSET_HOURS}:00), in ${MIN_YEAR} or later in UTC`;

/** A date-time as the API takes it (`occurredAt`, `from`, `to`). */
export const timestamp = z.string().regex(DATE_TIME_PATTERN, { message: DATE_TIME_MESSAGE }).meta({ format: 'date-time' });
/** A calendar day as the API takes it (`periodStart`). */
export const isoDay = z.string().regex(DAY_PATTERN, { message: DAY_MESSAGE }).meta({ format: 'date' });

/**
 * The same instant in UTC, to the millisecond, as Postgres reads it: ISO 8601, with a year of
 * five digits for the instants past 9999 that a negative offset reaches (toISOString would
 * write `+010000`).
 */
export function utcInstant(v: string): string {
  const iso = new Date(instantMs(v)).toISOString();
  return iso.startsWith('+') ? iso.slice(2) : iso;
}
