/**
 * How a run ends: its outcome, the exit code that stands for it, the reason a stop carries,
 * and the failure alert a run that failed for good sends before its exit 1.
 */
import type { PoolClient } from '../db.js';
import { EXIT } from '../errors.js';
import { sendFailureAlert } from './alert.js';
import type { RunState } from './run-state.js';

export type StopReason = 'shutdown' | 'timeout' | 'lock-lost';

export type RunOutcome =
  | { readonly kind: 'succeeded'; readonly runId: string; readonly attempts: number }
  | { readonly kind: 'already-done'; readonly runId: string }
  | { readonly kind: 'already-running' }
  | { readonly kind: 'skipped' }
  | { readonly kind: 'interrupted'; readonly runId?: string }
  | {
      readonly kind: 'failed';
      readonly reason: StopReason | 'error';
      readonly runId?: string;
      readonly attempts: number;
      readonly error: string;
      /** The failure alert was published (or, with no topic, logged): only then does the process exit 1. */
      readonly alerted: boolean;
    };

export function exitCodeOf(outcome: RunOutcome): number {
  switch (outcome.kind) {
    case 'interrupted':
      return EXIT.interrupted;
    case 'failed':
      return outcome.alerted ? EXIT.failure : EXIT.unalerted;
    default:
      return EXIT.ok;
  }
}

/** The reason an AbortSignal of the runner carries. */
export class Stop extends Error {
  constructor(
    readonly reason: StopReason,
    message: string,
  ) {
    super(message);
  }
}

export function stopOf(signal: AbortSignal): Stop {
  const r: unknown = signal.reason;
  return r instanceof Stop ? r : new Stop('shutdown', `interrupted by ${typeof r === 'string' ? r : 'a shutdown'}`);
}

/** The run failed for good: the metric, then the alert; the process exits 1 after this if the alert went out, else 4. */
export async function failRun(s: RunState, reason: StopReason | 'error', error: string): Promise<RunOutcome> {
  const durationMs = s.elapsedMs();
  s.metrics.emit({ duration: durationMs, failed: 1 }, { outcome: 'failed', reason }, 'run failed');
  s.phase = 'sending the failure alert';
  const sent = await sendFailureAlert(
    {
      job: s.job.name,
      scheduledTime: s.o.scheduledTime,
      period: s.period,
      runId: s.runId,
      attempts: s.attemptsMade,
      maxAttempts: s.job.retries + 1,
      durationMs,
      error,
      location: await s.location,
    },
    { topicArn: s.o.config.ALERT_TOPIC_ARN, logger: s.log },
  );
  const alerted = sent !== 'failed';
  if (alerted) s.alerted = true;
  return { kind: 'failed', reason, runId: s.runId, attempts: s.attemptsMade, error, alerted };
}

/** The run stopped before any attempt started: SIGTERM (interrupted) or the timeout (failed, recorded, alerted). */
export async function stoppedBeforeStart(s: RunState, db: PoolClient, stop: Stop, where = 'before it started'): Promise<RunOutcome> {
  if (stop.reason === 'shutdown') {
    s.log.warn({ outcome: 'interrupted' }, `${s.job.name} interrupted ${where} (${stop.message}); nothing was done; rerun the same scheduled time`);
    return { kind: 'interrupted' };
  }
  const message = `${stop.message} ${where}`;
  const ranOn = (await s.location).ranOn;
  // The row carries the previous attempt's checkpoint: the next run resumes from the last attempt's.
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO job_runs (job, scheduled_time, status, attempt, finished_at, error, ran_on, checkpoint)
     SELECT $1, $2, 'failed', coalesce(max(attempt), 0) + 1, now(), $3, $4,
            (SELECT checkpoint FROM job_runs WHERE job = $1 AND scheduled_time = $2 ORDER BY attempt DESC LIMIT 1)
     FROM job_runs WHERE job = $1 AND scheduled_time = $2
     RETURNING id::text`,
    [s.job.name, s.iso, message, ranOn],
  );
  s.runId = rows[0]!.id;
  s.log.error({ outcome: 'failed', reason: stop.reason, runId: s.runId }, `${s.job.name} failed: ${message}`);
  return failRun(s, stop.reason, message);
}
