/**
 * The API's failures, as messages to a human: no healthy task behind the load balancer, a
 * burst of 5xx answers, and a deployment the circuit breaker rolled back.
 *
 * Every load-balancer metric adds up (or takes the worst of) every target group that can carry
 * traffic: with canary deploys the tasks sit on either of two groups after a deploy. The
 * unhealthy-target alarm and the per-group rate alarms of lib/constructs/deployment-alarms.ts are
 * the service's deployment alarms: any of them firing during a deploy or its bake time rolls the
 * deploy back. The 5xx count and p99 alarms here page; they roll nothing back, since a count
 * cannot tell a broken canary from a busy service.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as events from 'aws-cdk-lib/aws-events';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { AlertSafetyNet } from './alert-safety-net.js';
import { DeploymentAlarms } from './deployment-alarms.js';
import { OBSERVABILITY_DEFAULTS, SERVICE_DEFAULTS } from '../defaults.js';
import { SERVICE_METRICS, USAGE_SUMMARY_WORKER, WORKER_DIMENSION } from '../metrics.js';
import type { WebService } from './web-service.js';

export interface ServiceMonitoringProps {
  /** The API to watch. */
  readonly webService: WebService;
  /** Where every alarm and alert goes. */
  readonly topic: sns.ITopic;
  /** Prefix of the alarm names. @default - the stack name */
  readonly namePrefix?: string;
  /** Where the server writes its EMF metrics (METRICS_NAMESPACE). @default 'EcsSaasBackend/Jobs' */
  readonly metricsNamespace?: string;
}

/** The runbook's sections for these alarms. */
export const SERVICE_RUNBOOK = {
  noHealthyTargets: 'docs/operations.md#api-no-healthy-targets',
  serverErrors: 'docs/operations.md#api-5xx',
  unhealthyTargets: 'docs/operations.md#api-unhealthy-targets-and-p99-latency',
  deploymentFailed: 'docs/operations.md#api-deployment-failed',
  deploymentAlarms: 'docs/operations.md#api-deployment-rolled-back-by-an-alarm',
  workerStalled: 'docs/operations.md#worker-stalled',
  databaseUnavailable: 'docs/operations.md#database-unavailable',
} as const;

export class ServiceMonitoring extends Construct {
  /** No task passes the /readyz health check: the API is down. */
  public readonly noHealthyTargets: cloudwatch.Alarm;
  /** The load balancer and the tasks answered too many 5xx. */
  public readonly serverErrors: cloudwatch.Alarm;
  /** A target failed its health check for several minutes. */
  public readonly unhealthyTargets: cloudwatch.Alarm;
  /** The p99 response time of the tasks is too high. */
  public readonly p99Latency: cloudwatch.Alarm;
  /** A background worker made no progress on some replica for WORKER_STALL_PERIODS periods. */
  public readonly workerStalled: cloudwatch.Alarm;
  /** The API's database probe failed for several minutes: the database, not the tasks, is down. */
  public readonly databaseUnavailable: cloudwatch.Alarm;
  /** The rate alarms a deploy rolls back on, per target group. */
  public readonly deploymentAlarms: DeploymentAlarms;
  /** Sends the reason to the topic when a deployment fails and the circuit breaker rolls it back. */
  public readonly deploymentFailedRule: events.Rule;
  /** The deployment-failed rule's retries, dead-letter queue and alarms. */
  public readonly deploymentFailedAlerts: AlertSafetyNet;

  constructor(scope: Construct, id: string, props: ServiceMonitoringProps) {
    super(scope, id);
    const prefix = props.namePrefix ?? Stack.of(this).stackName;
    const { targetGroups, loadBalancer, service } = props.webService;
    const minute = Duration.minutes(1);
    // The deployment alarms are named by these strings, not by alarm.alarmName (a reference to
    // the alarm), so the service does not depend on the alarms that read its target groups.
    const names = { serverErrors: `${prefix}-api-5xx`, unhealthyTargets: `${prefix}-api-unhealthy-targets`, p99Latency: `${prefix}-api-p99-latency` };
    this.deploymentAlarms = new DeploymentAlarms(this, 'Deployment', { targetGroups, namePrefix: prefix, runbook: SERVICE_RUNBOOK.deploymentAlarms, topic: props.topic });
    /** One metric per target group, named tg0, tg1, ... for a math expression. */
    const perGroup = (metric: (g: elbv2.ApplicationTargetGroup) => cloudwatch.IMetric): Record<string, cloudwatch.IMetric> =>
      Object.fromEntries(targetGroups.map((g, i) => [`tg${i}`, metric(g)]));
    const filled = (names: string[]): string => names.map((n) => `FILL(${n}, 0)`).join(' + ');

    this.noHealthyTargets = new cloudwatch.Alarm(this, 'NoHealthyTargets', {
      alarmName: `${prefix}-api-no-healthy-targets`,
      alarmDescription: `No API task passes the health check: the API is down. Runbook: ${SERVICE_RUNBOOK.noHealthyTargets}`,
      metric: new cloudwatch.MathExpression({
        expression: filled(targetGroups.map((_, i) => `tg${i}`)),
        usingMetrics: perGroup((g) => g.metrics.healthyHostCount({ statistic: cloudwatch.Stats.MINIMUM, period: minute })),
        period: minute,
        label: 'healthy API tasks',
      }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: SERVICE_DEFAULTS.noHealthyTargetsMinutes,
      // The load balancer reports the count every minute; silence means something is wrong too.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });

    const period = Duration.minutes(SERVICE_DEFAULTS.serverErrorsPeriodMinutes);
    this.serverErrors = new cloudwatch.Alarm(this, 'ServerErrors', {
      alarmName: names.serverErrors,
      alarmDescription: `The API answered ${SERVICE_DEFAULTS.serverErrorsThreshold} or more 5xx in ${SERVICE_DEFAULTS.serverErrorsPeriodMinutes} minutes. Runbook: ${SERVICE_RUNBOOK.serverErrors}`,
      metric: new cloudwatch.MathExpression({
        expression: filled(['lb', ...targetGroups.map((_, i) => `tg${i}`)]),
        usingMetrics: {
          lb: loadBalancer.metrics.httpCodeElb(elbv2.HttpCodeElb.ELB_5XX_COUNT, { statistic: cloudwatch.Stats.SUM, period }),
          ...perGroup((g) => g.metrics.httpCodeTarget(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, { statistic: cloudwatch.Stats.SUM, period })),
        },
        period,
        label: '5xx answers',
      }),
      threshold: SERVICE_DEFAULTS.serverErrorsThreshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    const deployMinutes = SERVICE_DEFAULTS.deploymentAlarmMinutes;
    this.unhealthyTargets = new cloudwatch.Alarm(this, 'UnhealthyTargets', {
      alarmName: names.unhealthyTargets,
      alarmDescription: `An API task failed the health check for ${deployMinutes} minutes; during a deploy this rolls it back. Runbook: ${SERVICE_RUNBOOK.unhealthyTargets}`,
      metric: new cloudwatch.MathExpression({
        expression: filled(targetGroups.map((_, i) => `tg${i}`)),
        usingMetrics: perGroup((g) => g.metrics.unhealthyHostCount({ statistic: cloudwatch.Stats.MAXIMUM, period: minute })),
        period: minute,
        label: 'unhealthy API tasks',
      }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: deployMinutes,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    this.p99Latency = new cloudwatch.Alarm(this, 'P99Latency', {
      alarmName: names.p99Latency,
      alarmDescription: `The API's p99 response time was above ${SERVICE_DEFAULTS.p99LatencySeconds} s for ${deployMinutes} minutes. Runbook: ${SERVICE_RUNBOOK.unhealthyTargets}`,
      metric: new cloudwatch.MathExpression({
        // The worst group: the canary's slice is small, an average would hide it.
        expression: `MAX([${targetGroups.map((_, i) => `FILL(tg${i}, 0)`).join(', ')}])`,
        usingMetrics: perGroup((g) => g.metrics.targetResponseTime({ statistic: cloudwatch.Stats.p(99), period: minute })),
        period: minute,
        label: 'p99 response time (s)',
      }),
      threshold: SERVICE_DEFAULTS.p99LatencySeconds,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: deployMinutes,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    const namespace = props.metricsNamespace ?? OBSERVABILITY_DEFAULTS.metricsNamespace;
    this.workerStalled = new cloudwatch.Alarm(this, 'WorkerStalled', {
      alarmName: `${prefix}-api-worker-stalled`,
      alarmDescription: `A background worker (usage-summary) has completed no batch, and no replica leads it, for several periods. Runbook: ${SERVICE_RUNBOOK.workerStalled}`,
      metric: new cloudwatch.Metric({ namespace, metricName: SERVICE_METRICS.workerStalled, dimensionsMap: { [WORKER_DIMENSION]: USAGE_SUMMARY_WORKER }, statistic: cloudwatch.Stats.MAXIMUM, period: minute }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      // Written only while stalled.
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    this.databaseUnavailable = new cloudwatch.Alarm(this, 'DatabaseUnavailable', {
      alarmName: `${prefix}-database-unavailable`,
      alarmDescription: `The API tasks cannot reach the database (probe every 10 s). The tasks stay in the load balancer: replacing them would not help. Runbook: ${SERVICE_RUNBOOK.databaseUnavailable}`,
      metric: new cloudwatch.Metric({ namespace, metricName: SERVICE_METRICS.databaseUnavailable, statistic: cloudwatch.Stats.MINIMUM, period: minute }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      // Every probe of every task failed for this many minutes: not one slow answer.
      evaluationPeriods: SERVICE_DEFAULTS.noHealthyTargetsMinutes,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    const action = new actions.SnsAction(props.topic);
    for (const alarm of [this.noHealthyTargets, this.serverErrors, this.unhealthyTargets, this.p99Latency, this.workerStalled, this.databaseUnavailable]) alarm.addAlarmAction(action);
    service.enableDeploymentAlarms(
      [names.unhealthyTargets, ...this.deploymentAlarms.alarmNames],
      { behavior: ecs.AlarmBehavior.ROLLBACK_ON_ALARM },
    );

    this.deploymentFailedRule = new events.Rule(this, 'DeploymentFailed', {
      description: 'An API deployment failed and the circuit breaker or a deployment alarm rolled it back',
      eventPattern: {
        source: ['aws.ecs'],
        detailType: ['ECS Deployment State Change'],
        resources: [service.serviceArn],
        detail: { eventName: ['SERVICE_DEPLOYMENT_FAILED'] },
      },
    });
    // Every event field is a whole JSON value of the message, never spliced into a string:
    // EventBridge inserts a value inside quotes unescaped, so a reason with a quote would
    // break the message, while a value outside quotes is inserted as valid JSON.
    this.deploymentFailedAlerts = new AlertSafetyNet(this, 'DeploymentFailedAlerts', {
      rule: this.deploymentFailedRule,
      topic: props.topic,
      alarmNamePrefix: `${prefix}-deployment-failed-alerts`,
      runbook: SERVICE_RUNBOOK.deploymentFailed,
      message: events.RuleTargetInput.fromObject({
      alert: 'An API deployment failed and the circuit breaker rolled it back',
      service: events.EventField.fromPath('$.resources[0]'),
      reason: events.EventField.fromPath('$.detail.reason'),
      deployment: events.EventField.fromPath('$.detail.deploymentId'),
      at: events.EventField.time,
      runbook: SERVICE_RUNBOOK.deploymentFailed,
    }),
    });
  }
}
