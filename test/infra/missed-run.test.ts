/**
 * The missed-run alarms, replayed: each alarm's settings are read from the synthesized
 * template and evaluated minute by minute, as CloudWatch would, against a history of successes.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { missedRunProblems } from '../../lib/constructs/missed-run.js';
import { JOBS } from '../../lib/jobs.js';
import { EXTRA_JOB, jobTemplate, NOW, resources, synth, type Synthesized } from './synth.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;

interface AlarmSettings {
  readonly Period: number;
  readonly EvaluationPeriods: number;
  readonly DatapointsToAlarm?: number;
  readonly TreatMissingData: string;
  readonly EvaluationWindow?: { WallClockWindow?: { Timezone?: string } };
}

/**
 * Whether the alarm is in ALARM at `t` (ms): CloudWatch sums `Succeeded` per period over the
 * evaluation range and alarms when every datapoint is below 1 (missing counts as breaching).
 * A sliding window's range ends at `t`; a wall clock window's at the last whole period boundary (UTC).
 */
function inAlarm(alarm: AlarmSettings, successes: readonly number[], t: number): boolean {
  expect(alarm.TreatMissingData).toBe('breaching');
  expect(alarm.DatapointsToAlarm ?? alarm.EvaluationPeriods).toBe(alarm.EvaluationPeriods);
  const period = alarm.Period * 1_000;
  const end = alarm.EvaluationWindow?.WallClockWindow ? Math.floor(t / period) * period : t;
  const start = end - period * alarm.EvaluationPeriods;
  return !successes.some((s) => s >= start && s < end && s <= t);
}

/** The minutes in [from, to) at which the alarm is in ALARM. */
function alarmingMinutes(alarm: AlarmSettings, successes: readonly number[], from: number, to: number): number[] {
  const out: number[] = [];
  for (let t = from; t < to; t += MIN) if (inAlarm(alarm, successes, t)) out.push(t);
  return out;
}

let shipped: Synthesized | undefined;
// Synthesized once, before the tests: on a loaded machine the synth alone can pass a test's timeout.
beforeAll(() => {
  shipped = synth();
}, 300_000);

/** The missed-run alarm of job `name` (in its nested stack) with the shipped jobs table. */
function missedRunAlarm(name: string): AlarmSettings {
  const template = jobTemplate((shipped ??= synth()), name);
  const alarm = Object.values(resources(template, 'AWS::CloudWatch::Alarm')).find((a) => a.Properties.AlarmName === `Test-${name}-missed-run`);
  expect(alarm, name).toBeDefined();
  return alarm!.Properties as AlarmSettings;
}

const job = (name: string) => JOBS.find((j) => j.name === name)!;
const at = (iso: string) => Date.parse(iso);

describe('missed-run alarms tuned to their schedules', () => {
  it('daily: a run later than yesterday\'s (within the grace) stays quiet; a missed day pages within its gap plus grace', () => {
    const daily = job('billing-run'); // cron(15 0 * * ? *), 60 min grace
    const alarm = missedRunAlarm(daily.name);
    const day0 = at('2026-01-05T00:15:00Z');
    // Successes 1 to 55 minutes after the scheduled time, the later ones right after the earlier.
    const successes = [1, 2, 55, 3, 50, 4, 58, 1, 2, 3].map((late, i) => day0 + i * DAY + late * MIN);
    expect(alarmingMinutes(alarm, successes, day0 + DAY, day0 + 10 * DAY)).toEqual([]);

    const missed = successes.filter((_, i) => i !== 5);
    const firing = alarmingMinutes(alarm, missed, day0 + DAY, day0 + 10 * DAY);
    expect(firing.length).toBeGreaterThan(0);
    // The day-5 run was due at day0 + 5 days; day 4's success (4 min late) leaves the window a day and a grace later.
    expect(firing[0]! - (day0 + 5 * DAY)).toBeLessThanOrEqual(DAY + daily.missedRunGraceMinutes * MIN + 5 * MIN);
  });

  it('weekly: a run minutes later than last week\'s stays quiet, where a 7-day sliding window would page', () => {
    const weekly = job('weekly-export'); // cron(0 6 ? * MON *) in Europe/Berlin: 05:00 UTC in winter
    const alarm = missedRunAlarm(weekly.name);
    expect(alarm.EvaluationWindow).toEqual({ WallClockWindow: { Timezone: 'UTC' } });
    expect(alarm.Period * alarm.EvaluationPeriods).toBe(7 * 86_400);

    const monday = at('2026-01-05T05:00:00Z');
    const successes = [1, 9, 2, 40, 3].map((late, i) => monday + i * 7 * DAY + late * MIN);
    expect(alarmingMinutes(alarm, successes, monday + 7 * DAY, monday + 5 * 7 * DAY)).toEqual([]);

    // The alarm this replaces (one sliding 7-day period) pages while the later run is under way.
    const sliding = { ...alarm, Period: 7 * 86_400, EvaluationPeriods: 1, EvaluationWindow: undefined };
    expect(alarmingMinutes(sliding, successes, monday + 7 * DAY, monday + 5 * 7 * DAY).length).toBeGreaterThan(0);

    // A missed Monday pages at the midnight that ends it.
    const missed = successes.filter((_, i) => i !== 2);
    const firing = alarmingMinutes(alarm, missed, monday + 7 * DAY, monday + 5 * 7 * DAY);
    expect(new Date(firing[0]!).toISOString()).toBe('2026-01-20T00:00:00.000Z');
  });

  it('rate(): a run later than the last one (within the grace) stays quiet; a missed run pages', () => {
    const cleanup = job('data-cleanup'); // rate(6 hours), no fixed phase
    const alarm = missedRunAlarm(cleanup.name);
    expect(alarm.EvaluationWindow).toBeUndefined();
    const start = at('2026-01-05T04:37:00Z');
    const successes = [2, 3, 58, 1, 45, 2, 2, 30, 1, 1].map((late, i) => start + i * 6 * HOUR + late * MIN);
    expect(alarmingMinutes(alarm, successes, start + 6 * HOUR, start + 10 * 6 * HOUR)).toEqual([]);
    const missed = successes.filter((_, i) => i !== 6);
    expect(alarmingMinutes(alarm, missed, start + 6 * HOUR, start + 10 * 6 * HOUR).length).toBeGreaterThan(0);
  });

  it('rejects a weekly run whose grace runs past its UTC day, and a weekly rate(), saying what to change', () => {
    const late = { ...EXTRA_JOB, name: 'late-weekly', schedule: 'cron(30 23 ? * SUN *)', missedRunGraceMinutes: 60 };
    expect(missedRunProblems([late], NOW)).toEqual([expect.stringContaining('schedule it earlier in the day or shorten the grace')]);
    const rate = { ...EXTRA_JOB, name: 'rate-weekly', schedule: 'rate(7 days)' };
    expect(missedRunProblems([rate], NOW)).toEqual([expect.stringContaining('use a cron schedule (a fixed weekly time) or run it more often')]);
    expect(missedRunProblems([{ ...late, schedule: 'cron(30 20 ? * SUN *)' }], NOW)).toEqual([]);
  });
});
