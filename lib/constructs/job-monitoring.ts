/**
 * Every way a scheduled job can fail, turned into a message to a human:
 *
 * - Missed run: no `Succeeded` within the schedule's longest gap plus the grace period (the
 *   dead man's switch, so a job that never starts, or whose rule is gone, still pages).
 * - Failed (exit 1): the job runner's own alert. No alarm repeats it: its `Failed` metric is on
 *   the dashboard, and if the runner cannot publish, the missed-run alarm still fires.
 * - Delivery: EventBridge could not start the job's execution (StartExecution failed). For a job
 *   with a time zone, started by a Scheduler schedule: a failed start (TargetErrorCount), and a
 *   start given up after the retries (InvocationDroppedCount), from the schedule's own group.
 * - Dead letters: a schedule event landed in the job's dead-letter queue.
 * - A task that dies (killed, OOM, Spot, failed to start, exit 2, the backstop timeout): the job's
 *   state machine retries what is safe to retry and sends the one alert (lib/constructs/job-state-machine.ts).
 * - An execution that ended without that alert (the alert itself failed, the execution timed out
 *   or was stopped, a state that broke): the execution-status rule. It replaces the rule on ECS
 *   task state changes, which would page for every task the state machine is about to retry.
 *
 * The metrics are the EMF lines the job runner writes (lib/metrics.ts).
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as events from 'aws-cdk-lib/aws-events';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { AlertSafetyNet } from './alert-safety-net.js';
import { JOB_DEFAULTS } from '../defaults.js';
import { DEFAULT_METRICS_NAMESPACE, JOB_DIMENSION, JOB_METRICS } from '../metrics.js';
import { ALREADY_ALERTED_ERRORS, RUNBOOK, rerunCommand } from '../job-flow.js';
import { applyEvaluationWindow, missedRunWindow } from './missed-run.js';
import { jobResourceName, type ScheduledJob, type ScheduledJobs } from './scheduled-jobs.js';

export { RUNBOOK };

export interface JobMonitoringProps {
  /** The jobs to watch. */
  readonly jobs: ScheduledJobs;
  /** Where every alarm and the execution-status rule's alert go. */
  readonly topic: sns.ITopic;
  /** The namespace the job runner writes its metrics to (its METRICS_NAMESPACE). @default 'EcsSaasBackend/Jobs' */
  readonly metricsNamespace?: string;
  /** Prefix of the alarm and dashboard names. @default - the stack name */
  readonly namePrefix?: string;
  /** The current time, for the schedules' gaps. @default - now */
  readonly now?: Date;
}

/** One job's alarms. */
export interface JobAlarms {
  readonly missedRun: cloudwatch.Alarm;
  readonly delivery: cloudwatch.Alarm;
  /** A Scheduler start given up after its retries; undefined for a job started by a rule (its FailedInvocations already means that). */
  readonly dropped?: cloudwatch.Alarm;
  readonly deadLetters: cloudwatch.Alarm;
  readonly executionsFailed: cloudwatch.Alarm;
  readonly executionsTimedOut: cloudwatch.Alarm;
  readonly executionsAborted: cloudwatch.Alarm;
}

export class JobMonitoring extends Construct {
  /** Every enabled job's alarms, by job name. */
  public readonly alarms: ReadonlyMap<string, JobAlarms>;
  /** Pages when a job's execution ends without its own alert; none without enabled jobs. */
  public readonly executionRule: events.Rule | undefined;
  /** The execution rule's retries, dead-letter queue and alarms; none without enabled jobs. */
  public readonly executionSafetyNet: AlertSafetyNet | undefined;
  /** Each job's duration, successes, failures and heartbeats; none without enabled jobs. */
  public readonly dashboard: cloudwatch.Dashboard | undefined;

  constructor(scope: Construct, id: string, props: JobMonitoringProps) {
    super(scope, id);
    const namespace = props.metricsNamespace ?? DEFAULT_METRICS_NAMESPACE;
    const prefix = props.namePrefix ?? Stack.of(this).stackName;
    const alarmAction = new actions.SnsAction(props.topic);
    const jobs = [...props.jobs.jobs.values()];

    const alarms = new Map<string, JobAlarms>();
    for (const scheduled of jobs) {
      // In the job's nested stack: the parent's 500-resource limit would not hold 200 jobs' alarms.
      const jobScope = new Construct(scheduled.stack, 'Monitoring');
      const jobAlarms = this.addAlarms(jobScope, scheduled, { namespace, prefix, now: props.now });
      for (const alarm of Object.values(jobAlarms)) alarm.addAlarmAction(alarmAction);
      alarms.set(scheduled.job.name, jobAlarms);
    }
    this.alarms = alarms;

    // With no enabled job there is nothing to match, and EventBridge rejects a pattern with an empty list.
    if (jobs.length === 0) {
      this.executionRule = undefined;
      this.executionSafetyNet = undefined;
      this.dashboard = undefined;
      return;
    }
    this.executionRule = new events.Rule(this, 'ExecutionRule', {
      description: 'A scheduled job\'s execution ended without its own alert: failed, timed out or stopped',
      eventPattern: executionEventPattern(props.jobs),
    });
    this.executionSafetyNet = new AlertSafetyNet(this, 'ExecutionAlerts', {
      rule: this.executionRule,
      topic: props.topic,
      message: executionMessage(prefix),
      alarmNamePrefix: `${prefix}-job-execution-alerts`,
      runbook: RUNBOOK.executionFailed,
    });

    // One widget per metric, each a SEARCH over every job: the dashboard keeps its size (and
    // CloudWatch's 500-widget limit) however many jobs there are.
    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `${prefix}-jobs`,
      defaultInterval: Duration.days(7),
      widgets: [dashboardRow(namespace)],
    });
  }

  private addAlarms(scope: Construct, scheduled: ScheduledJob, o: { namespace: string; prefix: string; now?: Date }): JobAlarms {
    const { job } = scheduled;
    const name = (what: string) => `${o.prefix}-${job.name}-${what}`;
    const period = Duration.seconds(JOB_DEFAULTS.alarmPeriodSeconds);
    const jobMetric = (metricName: string, statistic: string, p: Duration) =>
      new cloudwatch.Metric({ namespace: o.namespace, metricName, dimensionsMap: { [JOB_DIMENSION]: job.name }, statistic, period: p });

    // validateScheduledJobs has already rejected every schedule this could not cover.
    const window = missedRunWindow(job, o.now)!;
    const windowText = formatDuration(window.periodSeconds * window.evaluationPeriods);
    const scheduleText = job.timeZone === undefined ? job.schedule : `${job.schedule} in ${job.timeZone}`;
    const missedRun = new cloudwatch.Alarm(scope, 'MissedRun', {
      alarmName: name('missed-run'),
      alarmDescription: window.alignment === 'wall-clock'
        ? `${job.name} has not succeeded in the last ${windowText} of whole UTC days (schedule ${scheduleText}). Runbook: ${RUNBOOK.missedRun}`
        : `${job.name} has not succeeded for ${windowText} (the longest gap of ${scheduleText} plus ${job.missedRunGraceMinutes} min grace). Runbook: ${RUNBOOK.missedRun}`,
      metric: jobMetric(JOB_METRICS.succeeded, cloudwatch.Stats.SUM, Duration.seconds(window.periodSeconds)),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: window.evaluationPeriods,
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
    applyEvaluationWindow(missedRun, window);

    const countAlarm = (id: string, alarmName: string, alarmDescription: string, metric: cloudwatch.IMetric) => new cloudwatch.Alarm(scope, id, {
      alarmName,
      alarmDescription,
      metric,
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    let delivery: cloudwatch.Alarm;
    let dropped: cloudwatch.Alarm | undefined;
    if (scheduled.schedule) {
      const schedulerMetric = (metricName: string) => new cloudwatch.Metric({
        namespace: 'AWS/Scheduler',
        metricName,
        dimensionsMap: { ScheduleGroup: scheduled.schedule!.group.name! },
        statistic: cloudwatch.Stats.SUM,
        period,
      });
      delivery = countAlarm('Delivery', name('delivery'),
        `EventBridge Scheduler could not start ${job.name}'s execution (StartExecution failed; it retries). Runbook: ${RUNBOOK.delivery}`,
        schedulerMetric('TargetErrorCount'));
      dropped = countAlarm('Dropped', name('dropped'),
        `EventBridge Scheduler gave up starting ${job.name}'s execution after its retries: a run never started. Runbook: ${RUNBOOK.deadLetters}`,
        schedulerMetric('InvocationDroppedCount'));
    } else {
      delivery = countAlarm('Delivery', name('delivery'),
        `EventBridge could not start ${job.name}'s execution (StartExecution failed). Runbook: ${RUNBOOK.delivery}`,
        new cloudwatch.Metric({
          namespace: 'AWS/Events',
          metricName: 'FailedInvocations',
          dimensionsMap: { RuleName: scheduled.rule!.ruleName },
          statistic: cloudwatch.Stats.SUM,
          period,
        }));
    }

    const deadLetters = new cloudwatch.Alarm(scope, 'DeadLetters', {
      alarmName: name('dead-letters'),
      alarmDescription: `A schedule event of ${job.name} is in its dead-letter queue: a run never started. Runbook: ${RUNBOOK.deadLetters}`,
      metric: scheduled.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ statistic: cloudwatch.Stats.MAXIMUM, period }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    // The state machine's own view: an execution that failed, timed out or was stopped alarms even
    // if every alert path (the execution's Alert state, the execution-status rule) is broken.
    const executionAlarm = (id: string, what: string, metric: cloudwatch.Metric) =>
      new cloudwatch.Alarm(scope, id, {
        alarmName: name(`executions-${what}`),
        alarmDescription: `An execution of ${job.name}'s state machine ${what.replace('-', ' ')}. Runbook: ${RUNBOOK.executionFailed}`,
        metric,
        threshold: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
    const sm = scheduled.stateMachine;
    const executionsFailed = executionAlarm('ExecutionsFailed', 'failed', sm.metricFailed({ statistic: cloudwatch.Stats.SUM, period }));
    const executionsTimedOut = executionAlarm('ExecutionsTimedOut', 'timed-out', sm.metricTimedOut({ statistic: cloudwatch.Stats.SUM, period }));
    const executionsAborted = executionAlarm('ExecutionsAborted', 'aborted', sm.metricAborted({ statistic: cloudwatch.Stats.SUM, period }));

    return { missedRun, delivery, ...(dropped ? { dropped } : {}), deadLetters, executionsFailed, executionsTimedOut, executionsAborted };
  }
}

/**
 * Step Functions Execution Status Change events of this stack's job state machines that no
 * alert covers yet: FAILED with any error but those already alerted (lib/job-flow.ts; the
 * event's `error` field, and a FAILED event without one pages too), TIMED_OUT and ABORTED.
 * One prefix of the state machines' names rather than a list of their ARNs: an event pattern
 * may hold 2,048 characters.
 */
export function executionEventPattern(jobs: ScheduledJobs): events.EventPattern {
  const stack = Stack.of(jobs);
  const stateMachineArn = [{ prefix: `arn:${stack.partition}:states:${stack.region}:${stack.account}:stateMachine:${jobResourceName(jobs.namePrefix, { name: '' })}` }];
  return {
    source: ['aws.states'],
    detailType: ['Step Functions Execution Status Change'],
    detail: {
      stateMachineArn,
      $or: [
        { status: ['TIMED_OUT', 'ABORTED'] },
        { status: ['FAILED'], error: [{ 'anything-but': [...ALREADY_ALERTED_ERRORS] }] },
        { status: ['FAILED'], error: [{ exists: false }] },
      ],
    } as Record<string, unknown>,
  };
}

/**
 * The message: a JSON object whose values are the event's fields, each placed as a JSON value
 * (never inside a quoted string), so EventBridge writes valid JSON whatever they hold.
 */
function executionMessage(stackName: string): events.RuleTargetInput {
  const field = (path: string) => events.EventField.fromPath(path);
  return events.RuleTargetInput.fromObject({
    alert: 'A scheduled job\'s execution ended without its own alert (its alert failed, it timed out, it was stopped, or a state broke). Open the execution in the Step Functions console; rerun with: ' + rerunCommand('JOB', 'SCHEDULED_TIME', stackName) + ' (JOB: the state machine\'s name after the stack\'s; SCHEDULED_TIME: the input\'s scheduledTime)',
    status: field('$.detail.status'),
    error: field('$.detail.error'),
    cause: field('$.detail.cause'),
    execution: field('$.detail.executionArn'),
    stateMachine: field('$.detail.stateMachineArn'),
    input: field('$.detail.input'),
    runbook: RUNBOOK.executionFailed,
  });
}

function dashboardRow(namespace: string): cloudwatch.IWidget[] {
  const search = (metricName: string, statistic: string, label: string) => new cloudwatch.MathExpression({
    expression: `SEARCH('{${namespace},${JOB_DIMENSION}} MetricName="${metricName}"', '${statistic}', 3600)`,
    label,
    period: Duration.hours(1),
  });
  return [
    new cloudwatch.GraphWidget({ title: 'Jobs: duration (ms, average)', left: [search(JOB_METRICS.duration, 'Average', 'duration')], width: 8 }),
    new cloudwatch.GraphWidget({
      title: 'Jobs: runs succeeded and failed',
      left: [search(JOB_METRICS.succeeded, 'Sum', 'succeeded'), search(JOB_METRICS.failed, 'Sum', 'failed')],
      width: 8,
    }),
    new cloudwatch.GraphWidget({ title: 'Jobs: heartbeats', left: [search(JOB_METRICS.heartbeat, 'Sum', 'heartbeats')], width: 8 }),
  ];
}

function formatDuration(seconds: number): string {
  const d = Math.floor(seconds / 86_400);
  const h = Math.floor((seconds % 86_400) / 3_600);
  const m = Math.floor((seconds % 3_600) / 60);
  return [d ? `${d} d` : '', h ? `${h} h` : '', m ? `${m} min` : ''].filter(Boolean).join(' ') || `${seconds} s`;
}
