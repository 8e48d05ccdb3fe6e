/**
 * Target tracking on requests per task, over every target group of the service.
 *
 * The predefined ALBRequestCountPerTarget metric names one target group. Under canary deploys
 * the traffic sits on either of two groups after a deploy (ECS moves the listener rule's
 * weights), so a policy on the primary group alone would see no requests half the time and
 * never scale out. This policy's metric is the requests of all groups over their healthy
 * targets, the same quotient ALBRequestCountPerTarget is for one group, as a metric math
 * expression (target tracking accepts one, written in the template; the CDK's customMetric
 * takes a single metric only).
 */
import { Duration } from 'aws-cdk-lib';
import type * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';

/** One query of a target tracking metric: a metric, or the expression the policy tracks. */
function query(id: string, metric: cloudwatch.Metric): Record<string, unknown> {
  const stat = metric.toMetricConfig().metricStat!;
  return {
    Id: id,
    MetricStat: {
      Metric: { Namespace: stat.namespace, MetricName: stat.metricName, Dimensions: (stat.dimensions ?? []).map((d) => ({ Name: d.name, Value: d.value })) },
      Stat: stat.statistic,
    },
    ReturnData: false,
  };
}

/** Adds the policy (id `Requests`) keeping requests per healthy target per minute near `requestsPerTarget`. */
export function scaleOnRequestsPerTask(scaling: ecs.ScalableTaskCount, targetGroups: readonly elbv2.ApplicationTargetGroup[], requestsPerTarget: number): appscaling.TargetTrackingScalingPolicy {
  const minute = Duration.minutes(1);
  // A placeholder the override below replaces: the CDK needs one metric to build the policy.
  scaling.scaleToTrackCustomMetric('Requests', {
    metric: targetGroups[0]!.metrics.requestCount({ period: minute }),
    targetValue: requestsPerTarget,
  });
  // The CDK adds it to the scalable target inside `scaling`.
  const policy = scaling.node.findAll().find((c) => c.node.id === 'Requests') as appscaling.TargetTrackingScalingPolicy;
  const requests = targetGroups.map((g, i) => query(`requests${i}`, g.metrics.requestCount({ statistic: cloudwatch.Stats.SUM, period: minute })));
  const healthy = targetGroups.map((g, i) => query(`healthy${i}`, g.metrics.healthyHostCount({ statistic: cloudwatch.Stats.AVERAGE, period: minute })));
  // A group with no targets reports nothing: it counts as 0 requests and 0 targets.
  const sum = (ids: string[]) => ids.map((id) => `FILL(${id}, 0)`).join(' + ');
  const expression = `(${sum(requests.map((q) => q.Id as string))}) / (${sum(healthy.map((q) => q.Id as string))})`;
  const cfn = policy.node.defaultChild as appscaling.CfnScalingPolicy;
  const spec = 'TargetTrackingScalingPolicyConfiguration.CustomizedMetricSpecification';
  // An override merges into what the CDK rendered: the single metric's fields must go.
  for (const field of ['MetricName', 'Namespace', 'Dimensions', 'Statistic', 'Unit']) cfn.addPropertyDeletionOverride(`${spec}.${field}`);
  cfn.addPropertyOverride(`${spec}.Metrics`, [...requests, ...healthy, { Id: 'requestsPerTarget', Label: 'Requests per healthy target, every target group', Expression: expression, ReturnData: true }]);
  return policy;
}
