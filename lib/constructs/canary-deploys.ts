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
  /** The load balancer: the test listener is added to it. */
  readonly loadBalancer: elbv2.ApplicationLoadBalancer;
  readonly listener: elbv2.ApplicationListener;
  /** The production listener's certificate: the test listener serves HTTPS with it too. @default - HTTP */
  readonly certificate?: elbv2.IListenerCertificate;
  /** The primary target group: its health check and deregistration delay are copied. */
  readonly primary: elbv2.ApplicationTargetGroup;
  readonly healthCheck: elbv2.HealthCheck;
  readonly deregistrationDelay: Duration;
}

/** What addCanaryTargets makes. */
export interface CanaryTargets {
  readonly alternate: elbv2.ApplicationTargetGroup;
  /** The production listener's rule, whose weights ECS moves. */
  readonly rule: elbv2.ApplicationListenerRule;
  /** The test listener (TEST_LISTENER.port): the new revision answers it before production traffic shifts. */
  readonly testListener: elbv2.ApplicationListener;
  readonly target: ecs.IAlternateTarget;
}

/**
 * The test listener: ECS sends all of its traffic to the new revision before any production
 * traffic moves (its TEST_TRAFFIC_SHIFT stage), which is when the release smoke test runs
 * through it (lib/constructs/release-smoke-test.ts). Nobody may reach it by default: its port
 * is closed in the load balancer's security group, and the smoke test opens it to its own way out.
 */
export const TEST_LISTENER = { port: 9443 } as const;

/** The alternate target group, the production and test listener rules, and the service's alternate target. */
export function addCanaryTargets(scope: Construct, props: CanaryTargetsProps): CanaryTargets {
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
  const testListener = props.loadBalancer.addListener('Test', {
    port: TEST_LISTENER.port,
    protocol: props.certificate ? elbv2.ApplicationProtocol.HTTPS : elbv2.ApplicationProtocol.HTTP,
    ...(props.certificate ? { certificates: [props.certificate], sslPolicy: elbv2.SslPolicy.RECOMMENDED_TLS } : {}),
    open: false,
    defaultAction: elbv2.ListenerAction.fixedResponse(404, { contentType: 'text/plain', messageBody: 'no test traffic' }),
  });
  const testRule = new elbv2.ApplicationListenerRule(scope, 'ApiTest', {
    listener: testListener,
    priority: 1,
    conditions: [elbv2.ListenerCondition.pathPatterns(['/*'])],
    // ECS owns these weights too: it points the test traffic at the new revision during a deploy.
    action: elbv2.ListenerAction.weightedForward([
      { targetGroup: props.primary, weight: 100 },
      { targetGroup: alternate, weight: 0 },
    ]),
  });
  const target = new ecs.AlternateTarget('Canary', {
    alternateTargetGroup: alternate,
    productionListener: ecs.ListenerRuleConfiguration.applicationListenerRule(rule),
    testListener: ecs.ListenerRuleConfiguration.applicationListenerRule(testRule),
  });
  return { alternate, rule, testListener, target };
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
