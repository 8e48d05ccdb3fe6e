/**
 * A job's command line: its flags and its scheduled time (SCHEDULED_TIME, --scheduled-time, or
 * now), each refused with exit 2 and a message naming what is wrong and what is accepted.
 *
 * Plain code on purpose: the entry checks them before it loads the configuration, the logger
 * or the job machinery, so a typo costs no start-up and leaves stdout empty.
 */
import { UsageError } from '../errors.js';

export const JOB_FLAGS = ['--scheduled-time <ISO-8601>', '--force'] as const;

export interface JobArgs {
  readonly scheduledTime: Date;
  /** Where the time came from, for the log. */
  readonly scheduledTimeSource: 'SCHEDULED_TIME' | '--scheduled-time' | 'now';
  readonly force: boolean;
}

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$/i;

/**
 * The earliest year of a scheduled time, as the API's: nothing ran before 1970, and
 * Date.UTC reads years 0-99 as 1900-1999, so `0001-01-02` would silently become 1901.
 */
export const MIN_SCHEDULED_YEAR = 1970;

/** Why a text is not a scheduled time, in words for the user; undefined when it is one. */
export function isoTimeProblem(text: string): string | undefined {
  const m = ISO_TIME.exec(text.trim());
  if (!m) return 'is not an ISO-8601 time';
  const [, y, , , h, , , , zone] = m;
  if (h !== undefined && zone === undefined) return 'has no UTC offset: add Z for UTC or the offset it was written in (+01:00); without one it would mean a different run on every machine';
  if (Number(y) < MIN_SCHEDULED_YEAR) return `is before the year ${MIN_SCHEDULED_YEAR}`;
  return parseIsoTime(text) ? undefined : 'is not a real calendar date and time';
}

/**
 * Parses an ISO-8601 time: `2025-01-02T00:15:00Z`, with any UTC offset, or a bare date
 * (`2025-01-02`, midnight UTC). A time without an offset is refused: it would mean a
 * different run on every machine. Returns undefined when malformed (isoTimeProblem says why).
 */
export function parseIsoTime(text: string): Date | undefined {
  const m = ISO_TIME.exec(text.trim());
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  if (h !== undefined && zone === undefined) return undefined;
  if (Number(y) < MIN_SCHEDULED_YEAR) return undefined;
  const [year, month, day, hour, minute, second] = [y, mo, d, h ?? '0', mi ?? '0', s ?? '0'].map(Number) as [number, number, number, number, number, number];
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 59) return undefined;
  let offsetMin = 0;
  if (zone && zone.toUpperCase() !== 'Z') {
    const [, sign, oh, om] = /^([+-])(\d{2}):?(\d{2})?$/.exec(zone)!;
    if (Number(oh) > 23 || Number(om ?? 0) > 59) return undefined;
    offsetMin = (sign === '-' ? -1 : 1) * (Number(oh) * 60 + Number(om ?? 0));
  }
  const ms = Math.floor(Number(`0.${frac ?? '0'}`) * 1_000);
  return new Date(Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMin * 60_000);
}

/** The job's flags and its scheduled time: SCHEDULED_TIME first, then --scheduled-time, then now. */
export function parseJobArgs(job: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env, now: Date = new Date()): JobArgs {
  let flagTime: string | undefined;
  let force = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--force') force = true;
    else if (arg === '--scheduled-time' || arg.startsWith('--scheduled-time=')) {
      const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : args[++i];
      if (value === undefined || value === '') throw new UsageError(`--scheduled-time needs a value, e.g. --scheduled-time 2025-01-02T00:15:00Z`);
      flagTime = value;
    } else {
      throw new UsageError(`Unknown argument "${arg}" for job ${job}. Valid flags: ${JOB_FLAGS.join(', ')}.`);
    }
  }
  const bad = (source: string, value: string) =>
    new UsageError(
      `${source} ${JSON.stringify(value)} ${isoTimeProblem(value) ?? 'is not an ISO-8601 time'}. Use a UTC time like 2025-01-02T00:15:00Z, a time with its offset like 2025-01-02T01:15:00+01:00, or a date like 2025-01-02 (midnight UTC).`,
    );
  const fromEnv = env.SCHEDULED_TIME?.trim();
  if (fromEnv) {
    const t = parseIsoTime(fromEnv);
    if (!t) throw bad('SCHEDULED_TIME', fromEnv);
    return { scheduledTime: t, scheduledTimeSource: 'SCHEDULED_TIME', force };
  }
  if (flagTime !== undefined) {
    const t = parseIsoTime(flagTime);
    if (!t) throw bad('--scheduled-time', flagTime);
    return { scheduledTime: t, scheduledTimeSource: '--scheduled-time', force };
  }
  return { scheduledTime: now, scheduledTimeSource: 'now', force };
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
