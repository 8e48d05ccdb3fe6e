/**
 * The API's failures, as messages to a human: no healthy task behind the load balancer, a
 * burst of 5xx answers, and a deployment the circuit breaker rolled back.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as events from 'aws-cdk-lib/aws-events';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { AlertSafetyNet } from './alert-safety-net.js';
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
  deploymentFailed: 'docs/operations.md#api-deployment-failed',
  workerStalled: 'docs/operations.md#worker-stalled',
  databaseUnavailable: 'docs/operations.md#database-unavailable',
} as const;

export class ServiceMonitoring extends Construct {
  /** No task passes the /readyz health check: the API is down. */
  public readonly noHealthyTargets: cloudwatch.Alarm;
  /** The load balancer and the tasks answered too many 5xx. */
  public readonly serverErrors: cloudwatch.Alarm;
  /** A background worker made no progress on some replica for WORKER_STALL_PERIODS periods. */
  public readonly workerStalled: cloudwatch.Alarm;
  /** The API's database probe failed for several minutes: the database, not the tasks, is down. */
  public readonly databaseUnavailable: cloudwatch.Alarm;
  /** Sends the reason to the topic when a deployment fails and the circuit breaker rolls it back. */
  public readonly deploymentFailedRule: events.Rule;
  /** The deployment-failed rule's retries, dead-letter queue and alarms. */
  public readonly deploymentFailedAlerts: AlertSafetyNet;

  constructor(scope: Construct, id: string, props: ServiceMonitoringProps) {
    super(scope, id);
    const prefix = props.namePrefix ?? Stack.of(this).stackName;
    const { targetGroup, loadBalancer, service } = props.webService;
    const minute = Duration.minutes(1);

    this.noHealthyTargets = new cloudwatch.Alarm(this, 'NoHealthyTargets', {
      alarmName: `${prefix}-api-no-healthy-targets`,
      alarmDescription: `No API task passes the health check: the API is down. Runbook: ${SERVICE_RUNBOOK.noHealthyTargets}`,
      metric: targetGroup.metrics.healthyHostCount({ statistic: cloudwatch.Stats.MINIMUM, period: minute }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: SERVICE_DEFAULTS.noHealthyTargetsMinutes,
      // The load balancer reports the count every minute; silence means something is wrong too.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });

    const period = Duration.minutes(SERVICE_DEFAULTS.serverErrorsPeriodMinutes);
    this.serverErrors = new cloudwatch.Alarm(this, 'ServerErrors', {
      alarmName: `${prefix}-api-5xx`,
      alarmDescription: `The API answered ${SERVICE_DEFAULTS.serverErrorsThreshold} or more 5xx in ${SERVICE_DEFAULTS.serverErrorsPeriodMinutes} minutes. Runbook: ${SERVICE_RUNBOOK.serverErrors}`,
      metric: new cloudwatch.MathExpression({
        expression: 'FILL(lb, 0) + FILL(targets, 0)',
        usingMetrics: {
          lb: loadBalancer.metrics.httpCodeElb(elbv2.HttpCodeElb.ELB_5XX_COUNT, { statistic: cloudwatch.Stats.SUM, period }),
          targets: targetGroup.metrics.httpCodeTarget(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, { statistic: cloudwatch.Stats.SUM, period }),
        },
        period,
        label: '5xx answers',
      }),
      threshold: SERVICE_DEFAULTS.serverErrorsThreshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
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
    for (const alarm of [this.noHealthyTargets, this.serverErrors, this.workerStalled, this.databaseUnavailable]) alarm.addAlarmAction(action);

    this.deploymentFailedRule = new events.Rule(this, 'DeploymentFailed', {
      description: 'An API deployment failed and the circuit breaker rolled it back',
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
