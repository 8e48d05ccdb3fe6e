/**
 * A job's Step Functions state machine (STANDARD): run the job's task with `ecs:runTask.sync`,
 * then decide from how it ended (the contract in lib/job-flow.ts): succeed, start a new task
 * after a backoff, or send one alert and fail.
 *
 * The definition is written as Amazon States Language (JSONPath) rather than with the CDK's
 * state classes, so that what the tests execute locally (test/infra/job-executions.test.ts, with
 * aws-local-stepfunctions) is, state for state, the definition CloudFormation receives.
 *
 * How a `.sync` ECS task ends, as Step Functions reports it:
 * - exit 0 of the essential container: the state succeeds with the stopped task's description;
 * - any other end of a started task (a non-zero exit code, none at all, a Spot interruption, a
 *   task that stopped before it ran): the error `States.TaskFailed`, whose `Cause` is the stopped
 *   task's description as JSON (DescribeTasks' Task: `Containers[].ExitCode`, `StopCode`,
 *   `StoppedReason`, ...);
 * - RunTask itself refused (its `Failures` not empty): `AmazonECS.Unknown`; an API error: its
 *   `ECS.*` name; in both the `Cause` is text.
 * See https://docs.aws.amazon.com/step-functions/latest/dg/connect-ecs.html ("If a non-empty
 * Failures field is encountered, the task is failed with an AmazonECS.Unknown error"),
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html (the description), and
 * AWS Copilot's observations for its scheduled jobs, which retry on `States.ALL`: a non-zero exit
 * and a container that never came up both fail with `States.TaskFailed`
 * (https://github.com/aws/copilot-cli/issues/3160). Unlike Copilot's, this machine retries only
 * what is safe to retry, and each new task resumes from the runner's checkpoint.
 * When the state times out (the backstop) or the execution is stopped, Step Functions stops the
 * task: that is what the `ecs:StopTask` permission of `.sync` is for.
 */
import { Aws } from 'aws-cdk-lib';
import { CONTAINER } from '../defaults.js';
import {
  EXECUTION_ERROR,
  STATE,
  backstopSeconds,
  executionConsoleUrl,
  executionTimeoutSeconds,
  rerunCommand,
  taskRetryBackoffs,
} from '../job-flow.js';
import { taskRetriesOf, type JobDefinition } from '../jobs.js';

export interface JobDefinitionProps {
  readonly job: JobDefinition;
  readonly clusterArn: string;
  /**
   * The task definition's family, without a revision: each RunTask (a retry too) takes the
   * family's latest ACTIVE revision, so an execution that retries after a deploy runs the new
   * release instead of failing on the old revision, which the deploy deregistered.
   */
  readonly taskDefinitionFamily: string;
  /** The private subnets the task runs in. */
  readonly subnetIds: readonly string[];
  readonly securityGroupIds: readonly string[];
  /** Where the alert goes. */
  readonly topicArn: string;
  /** SIGTERM to SIGKILL of the job's container, seconds. */
  readonly stopTimeoutSeconds: number;
  /** Time allowed for the task to start, seconds. @default TASK_START_ALLOWANCE_SECONDS */
  readonly startAllowanceSeconds?: number;
  /** The runbook section the alert links to. */
  readonly runbook: string;
  /** The stack's name, which the alert's rerun command names (stage stacks differ). */
  readonly stackName: string;
}

/** `States.Format`'s template escapes: ' { } and \ are special in it. */
function literal(text: string): string {
  return text.replace(/[\\'{}]/g, (c) => `\\${c}`);
}

/**
 * A `States.Format(...)` call that joins `lines` with newlines. Each line is a template whose
 * `%` marks take the next of its paths. The newline is data (`$.nl`), never part of the
 * template, and so is everything that comes from an event or a task: whatever it holds, it
 * cannot break the template or the JSON around it.
 */
function formatLines(lines: ReadonlyArray<readonly [string, ...string[]]>): string {
  const template = lines.map(([text]) => literal(text).replace(/%/g, '{}')).join('{}');
  const args: string[] = [];
  lines.forEach(([, ...paths], i) => {
    args.push(...paths);
    if (i < lines.length - 1) args.push('$.nl');
  });
  return `States.Format('${template}', ${args.join(', ')})`;
}

/** The record of how one more attempt ended, appended to `$.run.log`. */
function record(line: string, ...paths: string[]): Record<string, unknown> {
  return {
    'attempt.$': '$.run.attempt',
    'log.$': formatLines([[`%attempt %: ${line}%`, '$.run.log', '$.run.attempt', ...paths, '$.nl']]),
  };
}

/** The job's state machine definition, tokens and all (render it with Stack.toJsonString). */
export function jobStateMachineDefinition(p: JobDefinitionProps): Record<string, unknown> {
  const { job } = p;
  const taskRetries = taskRetriesOf(job);
  const backstop = backstopSeconds(job, p.stopTimeoutSeconds, p.startAllowanceSeconds);
  const capacity = job.spot
    ? { CapacityProviderStrategy: [{ CapacityProvider: 'FARGATE_SPOT', Weight: 1 }] }
    : { LaunchType: 'FARGATE' };
  const pass = (next: string, parameters: Record<string, unknown>, resultPath?: string) => ({ Type: 'Pass', Parameters: parameters, ...(resultPath ? { ResultPath: resultPath } : {}), Next: next });
  const alertReason = (next: string, summary: string) => pass(next, { summary }, '$.alert');

  return {
    Comment: `${job.name}: run the job's task until it finishes (lib/job-flow.ts has the contract)`,
    StartAt: STATE.start,
    TimeoutSeconds: executionTimeoutSeconds(job, p.stopTimeoutSeconds, p.startAllowanceSeconds),
    States: {
      [STATE.start]: pass(STATE.runTask, {
        // The run key: the event's time, whatever time the task starts or restarts.
        'scheduledTime.$': '$.scheduledTime',
        run: { attempt: 1, log: '' },
        backoffSeconds: taskRetryBackoffs(taskRetries),
        nl: '\n',
        consoleUrl: executionConsoleUrl(Aws.REGION, ''),
      }),
      [STATE.runTask]: {
        Type: 'Task',
        Resource: `arn:${Aws.PARTITION}:states:::ecs:runTask.sync`,
        Parameters: {
          Cluster: p.clusterArn,
          TaskDefinition: p.taskDefinitionFamily,
          ...capacity,
          PlatformVersion: 'LATEST',
          NetworkConfiguration: {
            AwsvpcConfiguration: { Subnets: [...p.subnetIds], SecurityGroups: [...p.securityGroupIds], AssignPublicIp: 'DISABLED' },
          },
          Overrides: {
            ContainerOverrides: [{ Name: CONTAINER.name, Environment: [
              { Name: 'SCHEDULED_TIME', 'Value.$': '$.scheduledTime' },
              // The run's trace names the execution that started it.
              { Name: 'SFN_EXECUTION_ARN', 'Value.$': '$$.Execution.Id' },
            ] }],
          },
        },
        TimeoutSeconds: backstop,
        ResultPath: null,
        Catch: [
          { ErrorEquals: ['States.Timeout'], ResultPath: '$.error', Next: STATE.recordTimeout },
          { ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: STATE.howItEnded },
        ],
        Next: STATE.succeeded,
      },
      [STATE.succeeded]: { Type: 'Succeed' },

      [STATE.howItEnded]: {
        Type: 'Choice',
        Choices: [{
          And: [
            { Variable: '$.error.Error', StringEquals: 'States.TaskFailed' },
            { Variable: '$.error.Cause', StringMatches: '{*' },
          ],
          Next: STATE.readStoppedTask,
        }],
        Default: STATE.recordNotStarted,
      },
      [STATE.readStoppedTask]: pass(STATE.hasExitCode, { 'task.$': 'States.StringToJson($.error.Cause)' }, '$.stopped'),
      // One container per job task (lib/constructs/app-task.ts), so the first is the essential one.
      [STATE.hasExitCode]: {
        Type: 'Choice',
        Choices: [{ Variable: '$.stopped.task.Containers[0].ExitCode', IsPresent: true, Next: STATE.exitCode }],
        Default: STATE.recordNoExitCode,
      },
      [STATE.exitCode]: {
        Type: 'Choice',
        Choices: [
          { Variable: '$.stopped.task.Containers[0].ExitCode', NumericEquals: 1, Next: STATE.jobFailed },
          { Variable: '$.stopped.task.Containers[0].ExitCode', NumericEquals: 2, Next: STATE.recordUsageError },
        ],
        Default: STATE.recordExit,
      },
      [STATE.recordExit]: pass(STATE.mayRetry, record('exit code %, stop code %: %', '$.stopped.task.Containers[0].ExitCode', '$.stopped.task.StopCode', '$.stopped.task.StoppedReason'), '$.run'),
      [STATE.recordNoExitCode]: pass(STATE.mayRetry, record('no exit code, stop code %: %', '$.stopped.task.StopCode', '$.stopped.task.StoppedReason'), '$.run'),
      [STATE.recordNotStarted]: pass(STATE.mayRetry, record('the task did not start: %: %', '$.error.Error', '$.error.Cause'), '$.run'),
      [STATE.recordUsageError]: pass(STATE.usageError, record('exit code 2, stop code %: %', '$.stopped.task.StopCode', '$.stopped.task.StoppedReason'), '$.run'),
      [STATE.recordTimeout]: pass(STATE.timedOut, record(`still running after ${backstop} s (the backstop: timeout ${job.timeoutSeconds} s + start and stop grace); Step Functions stopped the task`), '$.run'),

      [STATE.mayRetry]: {
        Type: 'Choice',
        Choices: [{ Variable: '$.run.attempt', NumericLessThanEquals: taskRetries, Next: STATE.nextAttempt }],
        Default: STATE.retriesExhausted,
      },
      [STATE.nextAttempt]: pass(STATE.backoff, {
        'attempt.$': 'States.MathAdd($.run.attempt, 1)',
        'log.$': '$.run.log',
        'waitSeconds.$': 'States.ArrayGetItem($.backoffSeconds, $.run.attempt)',
      }, '$.run'),
      [STATE.backoff]: { Type: 'Wait', SecondsPath: '$.run.waitSeconds', Next: STATE.runTask },

      [STATE.retriesExhausted]: alertReason(STATE.alert, `its task did not finish in ${taskRetries + 1} attempts (taskRetries: ${taskRetries}); each new task resumed from the checkpoint`),
      [STATE.usageError]: alertReason(STATE.alert, 'exit code 2, a usage or configuration error: nothing was done, and it was not retried'),
      [STATE.timedOut]: alertReason(STATE.alert, `its task passed the backstop timeout of ${backstop} s and was stopped`),

      [STATE.alert]: {
        Type: 'Task',
        Resource: `arn:${Aws.PARTITION}:states:::sns:publish`,
        Parameters: {
          TopicArn: p.topicArn,
          'Subject.$': formatLines([[`[job failed] ${job.name} scheduled %`, '$.scheduledTime']]),
          'Message.$': formatLines([
            [`The scheduled job ${job.name} failed: %.`, '$.alert.summary'],
            [''],
            [`Job:            ${job.name}`],
            ['Scheduled time: %', '$.scheduledTime'],
            ['Execution:      %%', '$.consoleUrl', '$$.Execution.Id'],
            [''],
            ['How each attempt ended:'],
            ['%', '$.run.log'],
            ['Rerun it (a new execution; it resumes from the last checkpoint and cannot double any work):'],
            [`  ${rerunCommand(job.name, '%', p.stackName)}`, '$.scheduledTime'],
            [''],
            [`Runbook: ${p.runbook}`],
          ]),
        },
        ResultPath: null,
        Retry: [{ ErrorEquals: ['States.ALL'], IntervalSeconds: 2, MaxAttempts: 3, BackoffRate: 2 }],
        Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.alertError', Next: STATE.alertFailed }],
        Next: STATE.alerted,
      },
      [STATE.alerted]: { Type: 'Fail', Error: EXECUTION_ERROR.alerted, Cause: 'The job failed; its alert says how each attempt ended.' },
      [STATE.alertFailed]: { Type: 'Fail', Error: EXECUTION_ERROR.alertFailed, Cause: 'The job failed and its alert could not be published; the execution-status rule pages instead.' },
      [STATE.jobFailed]: { Type: 'Fail', Error: EXECUTION_ERROR.failed, Cause: 'Exit code 1: the job failed for good after its own retries, and the runner sent its alert.' },
    },
  };
}
