/**
 * The API's dates, one rule for the server and the OpenAPI document: each is a regular
 * expression the document carries as its `pattern`, so a client's validator and the server
 * accept exactly the same strings (test/contract.test.ts and the fuzzer's differential check prove it).
 *
 * - A calendar day (`YYYY-MM-DD`) is a real one: no 2026-02-30, a 29 February in leap years only.
 * - Years are 1970 to 9999 as written (app/instants.ts, the rules a job's scheduled time shares).
 * - A date-time has an offset, `Z` or `±hh:mm` up to ±18:00 (app/instants.ts); no leap second; any number of
 *   fractional digits, of which the server keeps three: the rest are dropped, never rounded.
 *
 * The server converts every date-time to UTC, to the millisecond, before Postgres sees it
 * (`utcInstant`): Postgres refuses offsets from ±16:00 on, and would round a seventh
 * fractional digit (23:59:59.9999995 is the next day's midnight there).
 */
import { z } from 'zod';
import { MAX_OFFSET_HOURS, MIN_YEAR } from '../instants.js';


const YEAR = '(?:19[7-9]\\d|[2-9]\\d{3})';
/** Leap years from 1970 on: divisible by 4 and not by 100, or by 400. */
const LEAP_YEAR = '(?:19(?:7[26]|8[048]|9[26])|[2-9]\\d(?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00)';
const MONTH_DAY = '(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))';
const DAY = `(?:${YEAR}-${MONTH_DAY}|${LEAP_YEAR}-02-29)`;
const TIME = '(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?';
// Up to ±17:59, or ±18:00 exactly.
const OFFSET = `(?:Z|[+-](?:(?:0\\d|1[0-7]):[0-5]\\d|${MAX_OFFSET_HOURS}:00))`;

export const DAY_PATTERN = new RegExp(`^${DAY}$`);
export const DATE_TIME_PATTERN = new RegExp(`^${DAY}T${TIME}${OFFSET}$`);

export const DAY_MESSAGE = `must be a real calendar date YYYY-MM-DD in ${MIN_YEAR} or later`;
export const DATE_TIME_MESSAGE = `must be an ISO 8601 date-time on a real calendar date in ${MIN_YEAR} or later, with an offset (Z, or ±hh:mm up to ±${MAX_OFFSET_HOURS}:00)`;

/** A date-time as the API takes it (`occurredAt`, `from`, `to`). */
export const timestamp = z.string().regex(DATE_TIME_PATTERN, { message: DATE_TIME_MESSAGE }).meta({ format: 'date-time' });
/** A calendar day as the API takes it (`periodStart`). */
export const isoDay = z.string().regex(DAY_PATTERN, { message: DAY_MESSAGE }).meta({ format: 'date' });

const PARTS = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/** Milliseconds since the epoch of a date-time `timestamp` accepted; fractional digits past the third dropped. */
export function instantMs(v: string): number {
  const m = PARTS.exec(v);
  if (m === null) throw new Error(`not a date-time: ${v}`);
  const [, y, mo, d, h, mi, s, frac = '', sign, oh = '0', om = '0'] = m;
  const local = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), Number(frac.slice(0, 3).padEnd(3, '0')));
  const offsetMs = (Number(oh) * 60 + Number(om)) * 60_000;
  return sign === '-' ? local + offsetMs : local - offsetMs;
}

/**
 * The same instant in UTC, to the millisecond, as Postgres reads it: ISO 8601, with a year of
 * five digits for the instants past 9999 that a negative offset reaches (toISOString would
 * write `+010000`).
 */
export function utcInstant(v: string): string {
  const iso = new Date(instantMs(v)).toISOString();
  return iso.startsWith('+') ? iso.slice(2) : iso;
}
