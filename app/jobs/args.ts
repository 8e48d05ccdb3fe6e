/**
 * A job's command line: its flags and its scheduled time (SCHEDULED_TIME, --scheduled-time, or
 * now), each refused with exit 2 and a message naming what is wrong and what is accepted.
 * A run has one meaning: a flag given twice, or SCHEDULED_TIME and --scheduled-time naming
 * different instants, is refused rather than one of them picked. The times accepted are
 * exactly the API's (app/instants.ts): a date-time the API takes, or a day it takes.
 *
 * Plain code on purpose: the entry checks them, and a future time, before it loads the
 * configuration, the logger or the job machinery, so a mistake costs no start-up and leaves
 * stdout empty.
 */
import { UsageError } from '../errors.js';
import { DATE_TIME_PATTERN, DAY_PATTERN, instantMs, MIN_YEAR, OFFSET_RULE, offsetInUse } from '../instants.js';

export const JOB_FLAGS = ['--scheduled-time <ISO-8601>', '--force'] as const;

export interface JobArgs {
  readonly scheduledTime: Date;
  /** Where the time came from, for the log. */
  readonly scheduledTimeSource: 'SCHEDULED_TIME' | '--scheduled-time' | 'now';
  readonly force: boolean;
}

// Loose on purpose: it reads what a person may type, to say what is wrong with it. What is
// taken is only what the API takes (DAY_PATTERN, DATE_TIME_PATTERN).
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$/i;

type Reading = { readonly time: Date; readonly problem?: undefined } | { readonly time?: undefined; readonly problem: string };

const NOT_REAL = 'is not a real calendar date and time';

/**
 * Reads a scheduled time: a date-time as the API takes it (`2025-01-02T00:15:00Z`, or with
 * its offset), or a day as the API takes it (`2025-01-02`, midnight UTC). Anything else is
 * refused, with the problem in words for the user.
 */
function readIsoTime(text: string): Reading {
  if (DAY_PATTERN.test(text)) return { time: new Date(`${text}T00:00:00Z`) };
  if (DATE_TIME_PATTERN.test(text)) return { time: new Date(instantMs(text)) };
  return { problem: problemWith(text) };
}

/** What keeps `text` from being a time the API takes, most specific first. */
function problemWith(text: string): string {
  if (text.trim() === '') return 'is only white space: give a time';
  if (text !== text.trim()) return 'has white space around it: give the time alone';
  const m = ISO_TIME.exec(text);
  if (!m) return 'is not an ISO-8601 time';
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  if (h !== undefined && zone === undefined) {
    return 'has no UTC offset: add Z for UTC or the offset it was written in (+01:00); without one it would mean a different run on every machine';
  }
  const [year, month, day, hour, minute, second] = [y, mo, d, h ?? '0', mi ?? '0', s ?? '0'].map(Number) as [number, number, number, number, number, number];
  // Before Date.UTC, which reads the years 0-99 as 1900-1999.
  if (year < MIN_YEAR) return beforeMinYear(text, year);
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 59) return NOT_REAL;
  const offsetMin = zone === undefined ? 0 : offsetMinutes(zone);
  if (offsetMin === undefined) return `has the UTC offset ${zone}, whose minutes are past 59: it must have ${OFFSET_RULE}`;
  if (!offsetInUse(offsetMin)) return `has the UTC offset ${zone}: it must have ${OFFSET_RULE}`;
  const ms = Date.UTC(year, month - 1, day, hour, minute, second, Math.floor(Number(`0.${frac ?? '0'}`) * 1_000)) - offsetMin * 60_000;
  if (ms < 0) return `is ${new Date(ms).toISOString()} in UTC, before the year ${MIN_YEAR}`;
  return 'is not written the way the API writes times: YYYY-MM-DDThh:mm:ss, a fraction if any, then Z or ±hh:mm (upper-case T and Z)';
}

/**
 * A time written before 1970. One written on 1969-12-31 west of UTC may be 1970 in UTC
 * (`1969-12-31T23:30:00-01:00`): the year is still checked as written, as the API checks it,
 * and the message gives the same instant in a form both take.
 */
function beforeMinYear(text: string, year: number): string {
  const written = `is before the year ${MIN_YEAR}`;
  if (year !== MIN_YEAR - 1 || !DATE_TIME_PATTERN.test(text.replace(/^\d{4}/, String(MIN_YEAR + 1)))) return written;
  const ms = instantMs(text);
  if (ms < 0) return written;
  return `is written in ${year}, though it is ${new Date(ms).toISOString()} in UTC: a date-time's year must be ${MIN_YEAR} or later as written, as the API takes it, so give it in UTC (${new Date(ms).toISOString()})`;
}

/** The minutes of `Z`, `+01:00`, `-0500` or `+01`; undefined for a minute past 59. */
function offsetMinutes(zone: string): number | undefined {
  if (zone.toUpperCase() === 'Z') return 0;
  const [, sign, oh, om] = /^([+-])(\d{2}):?(\d{2})?$/.exec(zone)!;
  if (Number(om ?? 0) > 59) return undefined;
  return (sign === '-' ? -1 : 1) * (Number(oh) * 60 + Number(om ?? 0));
}

/** Why a text is not a scheduled time, in words for the user; undefined when it is one. */
export function isoTimeProblem(text: string): string | undefined {
  return readIsoTime(text).problem;
}

/** The instant an ISO-8601 time names, or undefined when it is refused (isoTimeProblem says why). */
export function parseIsoTime(text: string): Date | undefined {
  return readIsoTime(text).time;
}

const FORMS = 'Use a UTC time like 2025-01-02T00:15:00Z, a time with its offset like 2025-01-02T01:15:00+01:00, or a date like 2025-01-02 (midnight UTC).';

/** The longest value a message quotes whole: a longer one is cut, saying how long it was. */
const QUOTED_MAX = 100;

/** `value` in quotes, as JSON writes it (control characters visible), cut after QUOTED_MAX characters. */
function quoted(value: string): string {
  if (value.length <= QUOTED_MAX) return JSON.stringify(value);
  return `${JSON.stringify(value.slice(0, QUOTED_MAX))}... (${value.length} characters)`;
}

/** The instant `value` from `source` names, or a usage error naming both and the accepted forms. */
function timeFrom(source: string, value: string): Date {
  const reading = readIsoTime(value);
  if (reading.time) return reading.time;
  throw new UsageError(`${source} ${quoted(value)} ${reading.problem}. ${FORMS}`);
}

/** The flags as given: each known one at most once. */
function readFlags(job: string, args: readonly string[]): { time?: string; force: boolean } {
  const given = new Map<string, string>();
  const once = (flag: string, value: string) => {
    const earlier = given.get(flag);
    if (earlier !== undefined) {
      const both = flag === '--force' ? '' : ` (${quoted(earlier)} and ${quoted(value)})`;
      throw new UsageError(`${flag} is given twice${both}; a run has one meaning, so give it once.`);
    }
    given.set(flag, value);
  };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--force') once(arg, arg);
    else if (arg === '--scheduled-time' || arg.startsWith('--scheduled-time=')) {
      const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : args[++i];
      if (value === undefined || value === '') throw new UsageError(`--scheduled-time needs a value, e.g. --scheduled-time 2025-01-02T00:15:00Z`);
      once('--scheduled-time', value);
    } else {
      throw new UsageError(`Unknown argument ${quoted(arg)} for job ${job}. Valid flags: ${JOB_FLAGS.join(', ')}.`);
    }
  }
  return { time: given.get('--scheduled-time'), force: given.has('--force') };
}

/** The job's flags and its scheduled time: SCHEDULED_TIME or --scheduled-time (the same instant if both), else now. */
export function parseJobArgs(job: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env, now: Date = new Date()): JobArgs {
  const { time, force } = readFlags(job, args);
  // An empty SCHEDULED_TIME counts as unset; any other value, white space alone included, is
  // read as given, as the API reads a time (a run at "now" for a broken input would get a new
  // run key on every retry of its task).
  const fromEnv = env.SCHEDULED_TIME === '' ? undefined : env.SCHEDULED_TIME;
  const envTime = fromEnv === undefined ? undefined : timeFrom('SCHEDULED_TIME', fromEnv);
  const flagTime = time === undefined ? undefined : timeFrom('--scheduled-time', time);
  if (envTime && flagTime && envTime.getTime() !== flagTime.getTime()) {
    throw new UsageError(
      `SCHEDULED_TIME ${JSON.stringify(fromEnv)} (${envTime.toISOString()}) and --scheduled-time ${JSON.stringify(time)} (${flagTime.toISOString()}) name different times; a run has one meaning, so give one of them, or the same time in both.`,
    );
  }
  if (envTime) return { scheduledTime: envTime, scheduledTimeSource: 'SCHEDULED_TIME', force };
  if (flagTime) return { scheduledTime: flagTime, scheduledTimeSource: '--scheduled-time', force };
  return { scheduledTime: now, scheduledTimeSource: 'now', force };
}

/** SCHEDULED_TIME_SKEW_MS's default and its most (app/config.ts reads it with these). */
export const SCHEDULED_TIME_SKEW = { defaultMs: 60_000, maxMs: 3_600_000 } as const;

/**
 * SCHEDULED_TIME_SKEW_MS, read with plain code so that a future time is refused before the
 * job's first line. A malformed value counts as the default here; the configuration then
 * refuses it (exit 2).
 */
export function scheduledTimeSkewMs(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.SCHEDULED_TIME_SKEW_MS?.trim() ?? '';
  return /^\d+$/.test(text) && Number(text) <= SCHEDULED_TIME_SKEW.maxMs ? Number(text) : SCHEDULED_TIME_SKEW.defaultMs;
}

/**
 * Refuses a scheduled time later than now plus the clock-skew allowance, --force or not. An
 * early run bills or cleans up a period that has not ended: the usage after it is never
 * billed (the real delivery then finds the run key done), or data younger than its retention
 * is deleted. A past time is fine: that is how a missed period is run.
 */
export function refuseFutureTime({ scheduledTime, scheduledTimeSource }: JobArgs, skewMs: number, now: Date = new Date()): void {
  const latest = now.getTime() + skewMs;
  if (scheduledTime.getTime() > latest) {
    throw new UsageError(
      `${scheduledTimeSource} ${scheduledTime.toISOString()} is in the future: it is later than now (${now.toISOString()}) plus the clock-skew allowance of ${skewMs} ms (SCHEDULED_TIME_SKEW_MS), so its period has not ended. A job runs for a time that has come; --force does not change that.`,
    );
  }
}
