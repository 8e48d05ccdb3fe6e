/**
 * The contract between a job's Step Functions execution and the job runner's exit codes, as
 * plain data: the state names, the errors an execution fails with, the backoff between task
 * attempts and the backstop timeout. lib/constructs/job-state-machine.ts builds the state machine from
 * these; `npm run jobs` counts its state transitions (the price of a run) from the same names.
 *
 * | how the task ended                                                   | the execution                        |
 * |----------------------------------------------------------------------|--------------------------------------|
 * | exit 0 (done, already done, already running, skipped)                | succeeds                             |
 * | exit 3, exit 4 (failed, no alert sent), killed (137, OOM), Spot,     | new task after a backoff, up to      |
 * | no exit code, no start                                               | taskRetries; then one alert, fails   |
 * | exit 1 (the runner failed for good; exit 1 only once its alert went  | fails (Job.Failed), no second alert  |
 * | out, app/errors.ts EXIT)                                             |                                      |
 * | exit 2 (usage or configuration error: nothing was done)              | one alert, no retry, fails           |
 * | still running at the backstop timeout                                | task stopped, one alert, fails       |
 */
import { taskRetriesOf, type JobDefinition } from './jobs.js';

/** The runbook's sections, linked from every alarm's description and every alert. */
export const RUNBOOK = {
  missedRun: 'docs/operations.md#missed-run',
  delivery: 'docs/operations.md#delivery-failed',
  deadLetters: 'docs/operations.md#dead-letters',
  /** The alert of a job's execution: retries ran out, exit 2, or the backstop timeout. */
  runFailed: 'docs/operations.md#job-run-failed',
  /** The execution-status rule: an execution that ended without its own alert. */
  executionFailed: 'docs/operations.md#job-execution-failed',
} as const;

/** The state names; they appear in the console, the execution history and the logs. */
export const STATE = {
  start: 'Start',
  runTask: 'RunTask',
  succeeded: 'Succeeded',
  howItEnded: 'HowDidTheTaskEnd',
  readStoppedTask: 'ReadStoppedTask',
  hasExitCode: 'HasExitCode',
  exitCode: 'ExitCode',
  recordExit: 'RecordExit',
  recordNoExitCode: 'RecordNoExitCode',
  recordNotStarted: 'RecordNotStarted',
  recordUsageError: 'RecordUsageError',
  recordTimeout: 'RecordTimeout',
  mayRetry: 'MayRetry',
  nextAttempt: 'NextAttempt',
  backoff: 'Backoff',
  retriesExhausted: 'RetriesExhausted',
  usageError: 'UsageError',
  timedOut: 'TimedOut',
  alert: 'Alert',
  alerted: 'Alerted',
  alertFailed: 'AlertFailed',
  jobFailed: 'JobFailed',
} as const;

/**
 * The errors a job's execution fails with. The execution-status rule (lib/constructs/job-monitoring.ts)
 * pages for any failure except the two that a human already heard of.
 */
export const EXECUTION_ERROR = {
  /** The execution sent its alert, then failed. */
  alerted: 'Job.Alerted',
  /** Exit 1: the runner failed for good and sent its own alert. */
  failed: 'Job.Failed',
  /** Sending the alert failed: the execution-status rule pages instead. */
  alertFailed: 'Job.AlertFailed',
} as const;

/** The failures already alerted by the time the execution ends. */
export const ALREADY_ALERTED_ERRORS: readonly string[] = [EXECUTION_ERROR.alerted, EXECUTION_ERROR.failed];

/** The first task retry waits this long; each next one twice as long... */
export const TASK_RETRY_BACKOFF_SECONDS = 30;
/** ...but never longer than this. */
export const TASK_RETRY_MAX_BACKOFF_SECONDS = 10 * 60;

/**
 * What the Backoff state waits before attempt n (1-based), as an array indexed by the
 * number of the attempt that just ended: index 0 is never read.
 */
export function taskRetryBackoffs(taskRetries: number): number[] {
  return [0, ...Array.from({ length: taskRetries }, (_, i) => Math.min(TASK_RETRY_BACKOFF_SECONDS * 2 ** i, TASK_RETRY_MAX_BACKOFF_SECONDS))];
}

/**
 * Time for Fargate to place a task and pull its image before the runner starts counting its
 * own timeout. The backstop must not beat the runner's timeout, which alerts by itself.
 */
export const TASK_START_ALLOWANCE_SECONDS = 5 * 60;

/**
 * The backstop of one task attempt: the job's timeout (the runner's own, counted from its
 * start), plus the time to start the task, plus the stop grace (SIGTERM to SIGKILL, the
 * container's stopTimeout) in which the runner records the timeout and exits.
 */
export function backstopSeconds(job: Pick<JobDefinition, 'timeoutSeconds'>, stopTimeoutSeconds: number, startAllowanceSeconds = TASK_START_ALLOWANCE_SECONDS): number {
  return job.timeoutSeconds + startAllowanceSeconds + stopTimeoutSeconds;
}

/** Time an execution keeps for sending its alert after the last attempt. */
export const ALERT_ALLOWANCE_SECONDS = 5 * 60;

/** The whole execution's timeout: every attempt at its backstop, every backoff, and the alert. */
export function executionTimeoutSeconds(job: JobDefinition, stopTimeoutSeconds: number, startAllowanceSeconds = TASK_START_ALLOWANCE_SECONDS): number {
  const retries = taskRetriesOf(job);
  const backoffs = taskRetryBackoffs(retries).reduce((a, b) => a + b, 0);
  return (retries + 1) * backstopSeconds(job, stopTimeoutSeconds, startAllowanceSeconds) + backoffs + ALERT_ALLOWANCE_SECONDS;
}

/** The states a run that succeeds at once passes through: each is one billed state transition. */
export const SUCCESS_PATH: readonly string[] = [STATE.start, STATE.runTask, STATE.succeeded];

/** The states one more task attempt adds (a task that exited 3, then the retry). */
export const RETRY_PATH: readonly string[] = [
  STATE.howItEnded, STATE.readStoppedTask, STATE.hasExitCode, STATE.exitCode, STATE.recordExit, STATE.mayRetry, STATE.nextAttempt, STATE.backoff, STATE.runTask,
];

/** Billed state transitions of a run that succeeds after `retries` task retries. */
export function stateTransitions(retries = 0): number {
  return SUCCESS_PATH.length + retries * RETRY_PATH.length;
}

/** The one-line command that reruns a job's scheduled time in AWS (app/dev/job-aws.ts), in the stack that sent the alert. */
export function rerunCommand(job: string, scheduledTime: string, stackName: string): string {
  return `npm run job:aws -- ${job} --scheduled-time ${scheduledTime} --stack ${stackName}`;
}

/** The Step Functions console's page of an execution. */
export function executionConsoleUrl(region: string, executionArn: string): string {
  return `https://${region}.console.aws.amazon.com/states/home?region=${region}#/v2/executions/details/${executionArn}`;
}
