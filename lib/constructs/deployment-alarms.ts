/**
 * The alarms ECS watches during a deploy and its bake times, and rolls the deploy back on.
 *
 * They judge the release by rates, not counts, so a small canary slice that fails every request
 * trips them as surely as a full rollout, and ordinary errors of a busy service do not: one
 * 5xx-rate alarm and one latency alarm per target group, since after a canary the new revision
 * may sit on either group. Each needs enough requests in a minute to judge (a rate or a p99 over
 * a handful of requests is noise), and one-minute periods, so a bad canary is caught within its
 * bake time.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import { Construct } from 'constructs';
import { SERVICE_DEFAULTS } from '../defaults.js';

export interface DeploymentAlarmsProps {
  /** Every target group that can hold the new revision's tasks. */
  readonly targetGroups: readonly elbv2.ApplicationTargetGroup[];
  /** Prefix of the alarm names (ECS names its deployment alarms by name). */
  readonly namePrefix: string;
  /** Where the operator reads what each alarm means. */
  readonly runbook: string;
  /** Where each alarm is sent too: a rollback is news even when the deployment-failed alert comes after it. */
  readonly topic: sns.ITopic;
}

/** The group's label in an alarm's name: `primary`, then `alternate`. */
export const GROUP_LABELS = ['primary', 'alternate'] as const;

export class DeploymentAlarms extends Construct {
  /** Per target group: the share of its requests the tasks answered with a 5xx. */
  public readonly serverErrorRates: cloudwatch.Alarm[];
  /** Per target group: its p99 response time, judged only with enough requests. */
  public readonly latencies: cloudwatch.Alarm[];
  /**
   * The names of every alarm here, for the service's deployment configuration: plain strings,
   * not references, so the service does not depend on alarms that read its target groups.
   */
  public readonly alarmNames: string[] = [];

  constructor(scope: Construct, id: string, props: DeploymentAlarmsProps) {
    super(scope, id);
    if (props.targetGroups.length > GROUP_LABELS.length) throw new Error(`DeploymentAlarms watches at most ${GROUP_LABELS.length} target groups, got ${props.targetGroups.length}`);
    const minute = Duration.minutes(1);
    const floor = SERVICE_DEFAULTS.deploymentMinRequestsPerMinute;
    const minutes = SERVICE_DEFAULTS.deploymentAlarmMinutes;
    const alarm = (constructId: string, name: string, description: string, metric: cloudwatch.MathExpression, threshold: number) => {
      this.alarmNames.push(name);
      const created = this.newAlarm(constructId, name, description, metric, threshold, props.runbook);
      created.addAlarmAction(new actions.SnsAction(props.topic));
      return created;
    };

    this.serverErrorRates = [];
    this.latencies = [];
    props.targetGroups.forEach((group, i) => {
      const label = GROUP_LABELS[i]!;
      const requests = group.metrics.requestCount({ statistic: cloudwatch.Stats.SUM, period: minute });
      const enough = `FILL(requests, 0) >= ${floor}`;
      this.serverErrorRates.push(alarm(
        `ServerErrorRate${i}`,
        `${props.namePrefix}-api-5xx-rate-${label}`,
        `More than ${SERVICE_DEFAULTS.deployment5xxRatePercent} % of the requests to the ${label} target group got a 5xx from its tasks for ${minutes} minutes (judged at ${floor} requests a minute or more); during a deploy this rolls it back.`,
        new cloudwatch.MathExpression({
          expression: `IF(${enough}, 100 * FILL(errors, 0) / FILL(requests, 0), 0)`,
          usingMetrics: { requests, errors: group.metrics.httpCodeTarget(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, { statistic: cloudwatch.Stats.SUM, period: minute }) },
          period: minute,
          label: `5xx rate of the ${label} group (%)`,
        }),
        SERVICE_DEFAULTS.deployment5xxRatePercent,
      ));
      this.latencies.push(alarm(
        `Latency${i}`,
        `${props.namePrefix}-api-p99-latency-${label}`,
        `The p99 response time of the ${label} target group was above ${SERVICE_DEFAULTS.p99LatencySeconds} s for ${minutes} minutes (judged at ${floor} requests a minute or more); during a deploy this rolls it back.`,
        new cloudwatch.MathExpression({
          expression: `IF(${enough}, FILL(p99, 0), 0)`,
          usingMetrics: { requests, p99: group.metrics.targetResponseTime({ statistic: cloudwatch.Stats.p(99), period: minute }) },
          period: minute,
          label: `p99 response time of the ${label} group (s)`,
        }),
        SERVICE_DEFAULTS.p99LatencySeconds,
      ));
    });
  }

  private newAlarm(id: string, name: string, description: string, metric: cloudwatch.MathExpression, threshold: number, runbook: string): cloudwatch.Alarm {
    const minutes = SERVICE_DEFAULTS.deploymentAlarmMinutes;
    return new cloudwatch.Alarm(this, id, {
      alarmName: name,
      alarmDescription: `${description} Runbook: ${runbook}`,
      metric,
      threshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: minutes,
      datapointsToAlarm: minutes,
      // A group with no traffic (the idle one between deploys) has nothing to judge.
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
  }
}
