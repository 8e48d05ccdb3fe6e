/**
 * What ECS's canary deployment strategy needs besides the service's own settings: a second
 * (alternate) target group for the new tasks, a listener rule that forwards to both with
 * weights ECS moves, and the deployment settings (canary slice, bake times).
 *
 * The rule matches every path, so the listener's default action (the primary target group)
 * never answers; ECS shifts the rule's weights from one group to the other at each deploy,
 * which is why after a deploy the traffic may sit on either group.
 */
import { Duration, Validations } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import type { Construct } from 'constructs';
import { CONTAINER, SERVICE_DEFAULTS } from '../defaults.js';

/**
 * The service settings of a canary deploy. The circuit breaker is set beside them, as for a
 * rolling one: ECS's failure detection (the circuit breaker and the deployment alarms) covers its
 * rolling and blue/green deployments, and a canary is a blue/green deployment that shifts in two steps.
 */
export function canaryServiceProps(): Pick<ecs.FargateServiceProps, 'deploymentStrategy' | 'canaryConfiguration' | 'bakeTime'> {
  return {
    deploymentStrategy: ecs.DeploymentStrategy.CANARY,
    canaryConfiguration: {
      stepPercent: SERVICE_DEFAULTS.canaryPercent,
      stepBakeTime: Duration.minutes(SERVICE_DEFAULTS.canaryBakeMinutes),
    },
    bakeTime: Duration.minutes(SERVICE_DEFAULTS.deploymentBakeMinutes),
  };
}

export interface CanaryTargetsProps {
  readonly vpc: ec2.IVpc;
  readonly listener: elbv2.ApplicationListener;
  /** The primary target group: its health check and deregistration delay are copied. */
  readonly primary: elbv2.ApplicationTargetGroup;
  readonly healthCheck: elbv2.HealthCheck;
  readonly deregistrationDelay: Duration;
}

/** The alternate target group, the production listener rule, and the service's alternate target. */
export function addCanaryTargets(scope: Construct, props: CanaryTargetsProps): { alternate: elbv2.ApplicationTargetGroup; rule: elbv2.ApplicationListenerRule; target: ecs.IAlternateTarget } {
  const alternate = new elbv2.ApplicationTargetGroup(scope, 'ApiAlternate', {
    vpc: props.vpc,
    port: CONTAINER.port,
    protocol: elbv2.ApplicationProtocol.HTTP,
    targetType: elbv2.TargetType.IP,
    deregistrationDelay: props.deregistrationDelay,
    healthCheck: props.healthCheck,
  });
  const rule = new elbv2.ApplicationListenerRule(scope, 'ApiProduction', {
    listener: props.listener,
    priority: 1,
    conditions: [elbv2.ListenerCondition.pathPatterns(['/*'])],
    // ECS owns these weights after the first deploy: CloudFormation writes them only when it creates the rule.
    action: elbv2.ListenerAction.weightedForward([
      { targetGroup: props.primary, weight: 100 },
      { targetGroup: alternate, weight: 0 },
    ]),
  });
  const target = new ecs.AlternateTarget('Canary', {
    alternateTargetGroup: alternate,
    productionListener: ecs.ListenerRuleConfiguration.applicationListenerRule(rule),
  });
  return { alternate, rule, target };
}

/** The synth findings a canary service raises, each with its reason. */
export function acknowledgeCanary(service: ecs.FargateService): void {
  const role = service.node.tryFindChild('CanaryRole');
  if (!role) return;
  Validations.of(role).acknowledge({
    id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonECSInfrastructureRolePolicyForLoadBalancers]',
    reason: 'AmazonECSInfrastructureRolePolicyForLoadBalancers is the AWS managed policy ECS documents for moving listener rules and target groups during canary deploys; AWS keeps it in step with the feature.',
  });
}
