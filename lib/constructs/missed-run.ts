/**
 * The missed-run alarm's window: how long CloudWatch waits for a job's `Succeeded` metric
 * before it pages (the dead man's switch), and how that window follows from the schedule.
 *
 * A run may succeed up to `missedRunGraceMinutes` after its scheduled time, and the previous
 * run's success may have come the moment it was due. So the alarm must look back at least
 * the schedule's longest gap plus the grace: that is the window, and then a run that is
 * merely later than the last one (but within the grace) never leaves the window empty.
 *
 * - Up to CloudWatch's seven-day cap (Period × EvaluationPeriods), the window is one sliding
 *   period of exactly that length: every schedule that runs at least every 7 days minus the
 *   grace, `rate()` schedules included.
 * - A weekly cron cannot have it: its gap alone is the whole seven days, so a sliding window
 *   loses last week's success the minute before this week's arrives. Such a schedule uses a
 *   wall clock window instead: seven whole UTC days, evaluated at each midnight. A weekly run
 *   always lands inside the last seven whole days, however late in its day it succeeds, and a
 *   missed run pages at the first midnight after its day. That holds only if every run
 *   succeeds (grace included) before its day ends, which `missedRunProblems` checks over the
 *   next year of runs.
 * - A `rate()` has no fixed phase, so it cannot use a wall clock window; past the cap it is
 *   rejected, as is any schedule with gaps longer than seven days.
 *
 * A job in a time zone has its gaps measured on the instants Scheduler runs it at: a nightly
 * job's longest gap is the 25 hours across the autumn change, so its window is 25 hours plus
 * the grace. The wall clock window stays in whole UTC days, and the check runs over the
 * zoned instants, so a weekly job's runs must land (grace included) within their UTC day.
 */
import type { Alarm, CfnAlarm } from 'aws-cdk-lib/aws-cloudwatch';
import { LIMITS } from '../defaults.js';
import { scheduleOf, type JobDefinition } from '../jobs.js';
import { longestIntervalMs, nextRuns, type Schedule } from '../schedule.js';
import { DAY_MS } from '../time-zones.js';

export interface MissedRunWindow {
  /** One evaluation period, in seconds. */
  readonly periodSeconds: number;
  /** How many periods the alarm looks at; the window is periodSeconds × evaluationPeriods. */
  readonly evaluationPeriods: number;
  /** `sliding` moves with every evaluation; `wall-clock` covers whole UTC periods, evaluated at their boundaries. */
  readonly alignment: 'sliding' | 'wall-clock';
}

const MINUTE_S = 60;
const DAY_S = 24 * 60 * MINUTE_S;
/** A year of runs: a weekly schedule's 52, a daily schedule's 365. */
const RUNS_CHECKED = 400;

type Choice = { readonly window: MissedRunWindow } | { readonly problem: string };

function choose(job: JobDefinition, now: Date): Choice | undefined {
  let schedule: Schedule;
  let longestMs: number;
  try {
    schedule = scheduleOf(job);
    longestMs = longestIntervalMs(schedule, now);
  } catch {
    return undefined; // validateJobs reports a bad schedule
  }
  if (!Number.isFinite(longestMs)) return undefined;
  const graceS = job.missedRunGraceMinutes * MINUTE_S;
  const wantedS = Math.ceil((longestMs / 1_000 + graceS) / MINUTE_S) * MINUTE_S;
  if (wantedS <= LIMITS.alarmWindowSeconds) {
    return { window: { periodSeconds: wantedS, evaluationPeriods: 1, alignment: 'sliding' } };
  }
  const days = (longestMs / DAY_MS).toFixed(1);
  const weekly: MissedRunWindow = { periodSeconds: DAY_S, evaluationPeriods: LIMITS.alarmWindowSeconds / DAY_S, alignment: 'wall-clock' };
  // A weekly job in a time zone is 7 days and an hour apart across the autumn change; the
  // replay of its runs below decides whether the whole UTC days still cover it.
  if (schedule.kind === 'cron' && longestMs / 1_000 <= LIMITS.alarmWindowSeconds + DAY_S) {
    const runs = nextRuns(schedule, RUNS_CHECKED, now).map((d) => d.getTime());
    const late = firstUncoveredRun(runs, graceS * 1_000, weekly);
    if (late === undefined) return { window: weekly };
    return {
      problem: `job ${JSON.stringify(job.name)}: schedule ${job.schedule} runs a week apart, so its missed-run alarm counts whole UTC days, ` +
        `but the run of ${new Date(late).toISOString()} plus missedRunGraceMinutes (${job.missedRunGraceMinutes}) ends after that day does; ` +
        'schedule it earlier in the day or shorten the grace',
    };
  }
  return {
    problem: `job ${JSON.stringify(job.name)}: schedule ${job.schedule} has runs up to ${days} days apart, ` +
      `and with missedRunGraceMinutes (${job.missedRunGraceMinutes}) no CloudWatch alarm (at most 7 days) can cover it; ` +
      (schedule.kind === 'rate' ? 'use a cron schedule (a fixed weekly time) or run it more often' : 'run it at least weekly'),
  };
}

/**
 * The first run (epoch ms) after which some evaluation of a wall clock `window` would find no
 * success, if every run succeeds as late as `graceMs` after its time; undefined when none.
 * An evaluation at boundary b sees [b − window, b): it needs a run r with b − window ≤ r and
 * r + grace ≤ b.
 */
export function firstUncoveredRun(runs: readonly number[], graceMs: number, window: MissedRunWindow): number | undefined {
  const periodMs = window.periodSeconds * 1_000;
  const spanMs = periodMs * window.evaluationPeriods;
  let i = 0;
  for (let b = Math.ceil((runs[0]! + spanMs) / periodMs) * periodMs; b <= runs[runs.length - 1]!; b += periodMs) {
    while (i + 1 < runs.length && runs[i + 1]! + graceMs <= b) i++;
    // runs[i] is the latest run whose success is in by b.
    if (!(runs[i]! + graceMs <= b && runs[i]! >= b - spanMs)) return runs[i + 1] ?? runs[i];
  }
  return undefined;
}

/** The window for `job`, or undefined when no alarm can cover its schedule (missedRunProblems says why). */
export function missedRunWindow(job: JobDefinition, now: Date = new Date()): MissedRunWindow | undefined {
  const choice = choose(job, now);
  return choice && 'window' in choice ? choice.window : undefined;
}

/** Problems a missed-run alarm would have with these jobs, each naming the job and the field. */
export function missedRunProblems(jobs: readonly JobDefinition[], now: Date = new Date()): string[] {
  return jobs.filter((job) => job.enabled).map((job) => choose(job, now)).flatMap((c) => (c && 'problem' in c ? [c.problem] : []));
}

/** Sets `alarm`'s evaluation window to `window`'s alignment (the L2 Alarm has no prop for it yet). */
export function applyEvaluationWindow(alarm: Alarm, window: MissedRunWindow): void {
  if (window.alignment === 'wall-clock') (alarm.node.defaultChild as CfnAlarm).evaluationWindow = { wallClockWindow: { timezone: 'UTC' } };
}
