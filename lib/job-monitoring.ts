/**
 * Every way a scheduled job can fail, turned into a message to a human:
 *
 * - Missed run: no `Succeeded` within the schedule's longest gap plus the grace period (the
 *   dead man's switch, so a job that never starts, or whose rule is gone, still pages).
 * - Failed: the job runner recorded a failure after its retries.
 * - Delivery: EventBridge could not start the task (RunTask failed).
 * - Dead letters: a schedule event landed in the job's dead-letter queue.
 * - Crash: a job task stopped with a non-zero exit code or never started. A process killed
 *   by the OOM killer or SIGKILL cannot report that itself, so ECS's own event does.
 *
 * The metrics are the EMF lines the job runner writes (lib/metrics.ts).
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import * as events from 'aws-cdk-lib/aws-events';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { AlertTarget } from './alerts.js';
import { JOB_DEFAULTS } from './defaults.js';
import { DEFAULT_METRICS_NAMESPACE, JOB_DIMENSION, JOB_METRICS } from './metrics.js';
import { applyEvaluationWindow, missedRunWindow } from './missed-run.js';
import { jobResourceName, type ScheduledJob, type ScheduledJobs } from './scheduled-jobs.js';

export interface JobMonitoringProps {
  /** The jobs to watch. */
  readonly jobs: ScheduledJobs;
  /** The cluster the job tasks run in; the crash rule matches its tasks only. */
  readonly cluster: ecs.ICluster;
  /** Where every alarm and crash alert goes. */
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
  readonly failed: cloudwatch.Alarm;
  readonly delivery: cloudwatch.Alarm;
  readonly deadLetters: cloudwatch.Alarm;
}

/** The runbook's sections, linked from every alarm's description and the crash alert. */
export const RUNBOOK = {
  missedRun: 'docs/operations.md#missed-run',
  failed: 'docs/operations.md#job-failed',
  delivery: 'docs/operations.md#delivery-failed',
  deadLetters: 'docs/operations.md#dead-letters',
  crashed: 'docs/operations.md#job-task-crashed',
} as const;

export class JobMonitoring extends Construct {
  /** Every enabled job's alarms, by job name. */
  public readonly alarms: ReadonlyMap<string, JobAlarms>;
  /** Sends a readable message to the topic when a job task crashes or fails to start; none without enabled jobs. */
  public readonly crashRule: events.Rule | undefined;
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
      const jobScope = new Construct(this, scheduled.job.name);
      const jobAlarms = this.addAlarms(jobScope, scheduled, { namespace, prefix, now: props.now });
      for (const alarm of Object.values(jobAlarms)) alarm.addAlarmAction(alarmAction);
      alarms.set(scheduled.job.name, jobAlarms);
    }
    this.alarms = alarms;

    // With no enabled job there is nothing to match, and EventBridge rejects a pattern with an empty list.
    if (jobs.length === 0) {
      this.crashRule = undefined;
      this.dashboard = undefined;
      return;
    }
    this.crashRule = new events.Rule(this, 'CrashRule', {
      description: 'A scheduled job task stopped with a non-zero exit code or failed to start',
      eventPattern: crashEventPattern(props.cluster, props.jobs),
    });
    this.crashRule.addTarget(new AlertTarget(props.topic, crashMessage()));

    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `${prefix}-jobs`,
      defaultInterval: Duration.days(7),
      widgets: jobs.map((scheduled) => dashboardRow(scheduled, namespace)),
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
    const missedRun = new cloudwatch.Alarm(scope, 'MissedRun', {
      alarmName: name('missed-run'),
      alarmDescription: window.alignment === 'wall-clock'
        ? `${job.name} has not succeeded in the last ${windowText} of whole UTC days (schedule ${job.schedule}). Runbook: ${RUNBOOK.missedRun}`
        : `${job.name} has not succeeded for ${windowText} (the longest gap of ${job.schedule} plus ${job.missedRunGraceMinutes} min grace). Runbook: ${RUNBOOK.missedRun}`,
      metric: jobMetric(JOB_METRICS.succeeded, cloudwatch.Stats.SUM, Duration.seconds(window.periodSeconds)),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: window.evaluationPeriods,
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
    applyEvaluationWindow(missedRun, window);

    const failed = new cloudwatch.Alarm(scope, 'Failed', {
      alarmName: name('failed'),
      alarmDescription: `${job.name} recorded a failed run after its retries. Runbook: ${RUNBOOK.failed}`,
      metric: jobMetric(JOB_METRICS.failed, cloudwatch.Stats.SUM, period),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    const delivery = new cloudwatch.Alarm(scope, 'Delivery', {
      alarmName: name('delivery'),
      alarmDescription: `EventBridge could not start ${job.name} (RunTask failed). Runbook: ${RUNBOOK.delivery}`,
      metric: new cloudwatch.Metric({
        namespace: 'AWS/Events',
        metricName: 'FailedInvocations',
        dimensionsMap: { RuleName: scheduled.rule.ruleName },
        statistic: cloudwatch.Stats.SUM,
        period,
      }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    const deadLetters = new cloudwatch.Alarm(scope, 'DeadLetters', {
      alarmName: name('dead-letters'),
      alarmDescription: `A schedule event of ${job.name} is in its dead-letter queue: a run never started. Runbook: ${RUNBOOK.deadLetters}`,
      metric: scheduled.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ statistic: cloudwatch.Stats.MAXIMUM, period }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    return { missedRun, failed, delivery, deadLetters };
  }
}

/**
 * ECS Task State Change events of the job tasks that ended badly: STOPPED with a container's
 * non-zero exit code, or never started (stopCode TaskFailedToStart, e.g. no Spot capacity, an
 * image that cannot be pulled, a secret that cannot be read).
 */
export function crashEventPattern(cluster: ecs.ICluster, jobs: ScheduledJobs): events.EventPattern {
  return {
    source: ['aws.ecs'],
    detailType: ['ECS Task State Change'],
    detail: {
      clusterArn: [cluster.clusterArn],
      lastStatus: ['STOPPED'],
      // RunTask puts the family in the task's group; the service's tasks are "service:..." instead.
      // One prefix for every job's family, not a list of them: an event pattern may hold 2,048
      // characters, which some 40 job families would use up.
      group: [{ prefix: `family:${jobResourceName(jobs.namePrefix, { name: '' })}` }],
      $or: [
        { containers: { exitCode: [{ 'anything-but': 0 }] } },
        { stopCode: ['TaskFailedToStart'] },
      ],
    },
  };
}

/** Event fields are whole JSON values, never spliced into strings (see lib/service-monitoring.ts). */
function crashMessage(): events.RuleTargetInput {
  const field = (path: string) => events.EventField.fromPath(path);
  return events.RuleTargetInput.fromObject({
    alert: 'A scheduled job task stopped abnormally',
    group: field('$.detail.group'),
    exitCode: field('$.detail.containers[0].exitCode'),
    exitCodes: '1 failed or timed out, 2 usage error, 3 interrupted by SIGTERM with a checkpoint saved, 137 killed: out of memory or stopTimeout',
    containerReason: field('$.detail.containers[0].reason'),
    stopCode: field('$.detail.stopCode'),
    stoppedReason: field('$.detail.stoppedReason'),
    task: field('$.detail.taskArn'),
    stoppedAt: field('$.detail.stoppedAt'),
    runbook: RUNBOOK.crashed,
  });
}

function dashboardRow(scheduled: ScheduledJob, namespace: string): cloudwatch.IWidget[] {
  const { job } = scheduled;
  const metric = (metricName: string, statistic: string, label: string) =>
    new cloudwatch.Metric({ namespace, metricName, dimensionsMap: { [JOB_DIMENSION]: job.name }, statistic, label, period: Duration.hours(1) });
  return [
    new cloudwatch.GraphWidget({
      title: `${job.name}: duration (ms)`,
      left: [metric(JOB_METRICS.duration, cloudwatch.Stats.AVERAGE, 'average'), metric(JOB_METRICS.duration, cloudwatch.Stats.MAXIMUM, 'max')],
      width: 8,
    }),
    new cloudwatch.GraphWidget({
      title: `${job.name}: runs`,
      left: [metric(JOB_METRICS.succeeded, cloudwatch.Stats.SUM, 'succeeded'), metric(JOB_METRICS.failed, cloudwatch.Stats.SUM, 'failed')],
      width: 8,
    }),
    new cloudwatch.GraphWidget({
      title: `${job.name}: heartbeats`,
      left: [metric(JOB_METRICS.heartbeat, cloudwatch.Stats.SUM, 'heartbeats')],
      width: 8,
    }),
  ];
}

function formatDuration(seconds: number): string {
  const d = Math.floor(seconds / 86_400);
  const h = Math.floor((seconds % 86_400) / 3_600);
  const m = Math.floor((seconds % 3_600) / 60);
  return [d ? `${d} d` : '', h ? `${h} h` : '', m ? `${m} min` : ''].filter(Boolean).join(' ') || `${seconds} s`;
}
