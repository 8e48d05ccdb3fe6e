/**
 * The missed-run alarm's window: how long CloudWatch waits for a job's `Succeeded` metric
 * before it pages (the dead man's switch).
 *
 * The window is the schedule's longest gap plus the job's grace period. CloudWatch caps an
 * alarm's window (Period × EvaluationPeriods) at seven days, so a weekly job's window
 * (7 days + grace) cannot hold. Such a job's alarm watches the longest window CloudWatch
 * allows and counts heartbeats as well as successes: a run that is under way keeps it
 * quiet, and it fires when a whole week passes with no success and no run at all.
 * A schedule whose gaps exceed seven days cannot be watched at all and is rejected.
 */
import { LIMITS } from './defaults.js';
import type { JobDefinition } from './jobs.js';
import { longestIntervalMs, parseSchedule } from './schedule.js';

export interface MissedRunWindow {
  /** The alarm's one evaluation period, whole minutes, in seconds. */
  readonly periodSeconds: number;
  /** True when CloudWatch's seven-day cap cut the window short (and heartbeats count too). */
  readonly capped: boolean;
}

/** The window for `job`, or undefined when its schedule is invalid (validateJobs reports that). */
export function missedRunWindow(job: JobDefinition, now: Date = new Date()): MissedRunWindow | undefined {
  let longestMs: number;
  try {
    longestMs = longestIntervalMs(parseSchedule(job.schedule), now);
  } catch {
    return undefined;
  }
  if (!Number.isFinite(longestMs)) return undefined;
  const wanted = Math.ceil((longestMs / 1_000 + job.missedRunGraceMinutes * 60) / 60) * 60;
  return { periodSeconds: Math.min(wanted, LIMITS.alarmWindowSeconds), capped: wanted > LIMITS.alarmWindowSeconds };
}

/** Problems a missed-run alarm would have with these jobs, each naming the job and the field. */
export function missedRunProblems(jobs: readonly JobDefinition[], now: Date = new Date()): string[] {
  const problems: string[] = [];
  for (const job of jobs) {
    if (!job.enabled) continue;
    let longestMs: number;
    try {
      longestMs = longestIntervalMs(parseSchedule(job.schedule), now);
    } catch {
      continue;
    }
    if (Number.isFinite(longestMs) && longestMs / 1_000 > LIMITS.alarmWindowSeconds) {
      const days = (longestMs / 86_400_000).toFixed(1);
      problems.push(
        `job ${JSON.stringify(job.name)}: schedule ${job.schedule} has runs up to ${days} days apart, ` +
          `but a CloudWatch alarm can watch at most 7 days, so no missed-run alarm can cover it; run it at least weekly`,
      );
    }
  }
  return problems;
}
