/**
 * The API: a Fargate service behind a public Application Load Balancer.
 *
 * The three timing settings are explicit and validated, and the container's matching
 * numbers are derived from them (lib/timing.ts), so they cannot disagree:
 * stopTimeout → SHUTDOWN_TIMEOUT_MS, the ALB idle timeout → KEEP_ALIVE_TIMEOUT_MS and REQUEST_DEADLINE_MS, and the
 * target group's deregistration delay, which ECS waits out before it sends SIGTERM.
 */
import { Duration, Stack, Tags, Token, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { addAppTask, type AppRuntime } from './app-task.js';
import { ApiDomain, validateApiDomainProps, type ApiDomainProps } from './https.js';
import { CONTAINER, LIMITS, SERVICE_DEFAULTS } from '../defaults.js';
import { FARGATE_SIZES, fargateMemoryChoices } from '../jobs.js';
import { keepAliveTimeoutMs, requestDeadlineMs } from '../timing.js';
import { Problems, throwIfProblems } from './validation.js';
import { acknowledgeCanary, addCanaryTargets, canaryServiceProps, TEST_LISTENER } from './canary-deploys.js';
import { scaleOnRequestsPerTask } from './request-scaling.js';
import { OPERATOR_KEY_TAG } from './deploy-role.js';

export interface WebServiceProps {
  /** The cluster (and so the VPC) the service runs in. */
  readonly cluster: ecs.ICluster;
  /** The image, log group, shared environment and database secrets. */
  readonly runtime: AppRuntime;
  /** Fewest tasks auto-scaling keeps. @default 2 */
  readonly minCapacity?: number;
  /** Most tasks auto-scaling starts. @default 6 */
  readonly maxCapacity?: number;
  /** Fargate CPU units per task. @default 512 */
  readonly cpu?: number;
  /** Fargate memory per task, MiB. @default 1024 */
  readonly memoryMiB?: number;
  /** SIGTERM to SIGKILL, 2 to 120 s on Fargate. @default Duration.seconds(60) */
  readonly stopTimeout?: Duration;
  /** How long the ALB drains a task before ECS stops it, 0 to 3600 s. @default Duration.seconds(30) */
  readonly deregistrationDelay?: Duration;
  /** The ALB's idle timeout, 1 to 4000 s. @default Duration.seconds(60) */
  readonly albIdleTimeout?: Duration;
  /** An ACM certificate for HTTPS on 443 (HTTP on 80 then redirects). @default - the domain's new certificate, else HTTP on port 80 only */
  readonly certificateArn?: string;
  /** The API's own domain: a new DNS-validated certificate (unless certificateArn is given) and an alias record. @default - none */
  readonly domain?: ApiDomainProps;
  /** Target tracking on the service's average CPU, percent. @default 60 */
  readonly targetCpuPercent?: number;
  /** Target tracking on ALB requests per task per minute. @default 1000 */
  readonly requestsPerTarget?: number;
  /** Where the ALB writes its access logs, when the stack's region is known. @default - no access logs */
  readonly accessLogBucket?: s3.IBucket;
  /** The load balancer refuses deletion. @default true */
  readonly deletionProtection?: boolean;
  /** DB_POOL_MAX of each task, from the connection budget (lib/pool-budget.ts). @default - the container's default */
  readonly dbPoolMax?: number;
  /** ECS canary deploys (lib/constructs/canary-deploys.ts) instead of rolling ones. @default false */
  readonly canaryDeploys?: boolean;
}

/** Every problem with `props`, each showing the bad value. Empty when they are valid. */
export function validateWebServiceProps(props: Omit<WebServiceProps, 'cluster' | 'runtime'>): string[] {
  const problems = new Problems();
  const min = props.minCapacity ?? SERVICE_DEFAULTS.minCapacity;
  const max = props.maxCapacity ?? SERVICE_DEFAULTS.maxCapacity;
  problems.whole('minCapacity', props.minCapacity, 1);
  problems.whole('maxCapacity', props.maxCapacity, 1);
  if (![min, max].some((v) => Token.isUnresolved(v)) && min > max) problems.add(`minCapacity (${min}) must not exceed maxCapacity (${max})`);

  const cpu = props.cpu ?? SERVICE_DEFAULTS.cpu;
  const memory = props.memoryMiB ?? SERVICE_DEFAULTS.memoryMiB;
  const choices = fargateMemoryChoices(cpu);
  if (choices === undefined) problems.add(`cpu must be one of ${Object.keys(FARGATE_SIZES).join(', ')} (Fargate CPU units), got ${cpu}`);
  else if (!choices.includes(memory)) problems.add(`memoryMiB ${memory} is not a valid Fargate size for cpu ${cpu}; it accepts ${choices.join(', ')}`);

  problems.seconds('stopTimeout', props.stopTimeout, LIMITS.stopTimeoutSeconds);
  problems.seconds('deregistrationDelay', props.deregistrationDelay, LIMITS.deregistrationDelaySeconds);
  problems.seconds('albIdleTimeout', props.albIdleTimeout, LIMITS.albIdleTimeoutSeconds);
  problems.whole('targetCpuPercent', props.targetCpuPercent, 10, 90);
  problems.whole('requestsPerTarget', props.requestsPerTarget, 1);
  if (props.certificateArn !== undefined && !Token.isUnresolved(props.certificateArn)
    && !/^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate\/[\w-]+$/.test(props.certificateArn)) {
    problems.add(`certificateArn must be an ACM certificate ARN (arn:aws:acm:<region>:<account>:certificate/<id>), got ${JSON.stringify(props.certificateArn)}`);
  }
  if (props.domain) problems.list.push(...validateApiDomainProps(props.domain));
  return problems.list;
}

export class WebService extends Construct {
  /** The public load balancer. */
  public readonly loadBalancer: elbv2.ApplicationLoadBalancer;
  /** The listener that forwards to the service: HTTPS on 443 with a certificate, else HTTP on 80. */
  public readonly listener: elbv2.ApplicationListener;
  /** The API's domain (certificate and alias record); undefined without `domain`. */
  public readonly domain: ApiDomain | undefined;
  /** The operator's API key, generated here and injected as the ADMIN_API_KEY secret. */
  public readonly adminApiKey: secretsmanager.Secret;
  /** The service's target group (health check on /livez). */
  public readonly targetGroup: elbv2.ApplicationTargetGroup;
  /** With canary deploys, the group the new tasks of a deploy join; after a deploy the traffic may sit on either. */
  public readonly alternateTargetGroup: elbv2.ApplicationTargetGroup | undefined;
  /** Every target group that can carry the API's traffic. */
  public readonly targetGroups: readonly elbv2.ApplicationTargetGroup[];
  /** With canary deploys, the test listener and its URL (the API's host on TEST_LISTENER.port), where a deploy's new revision answers first. */
  public readonly testListener: { readonly listener: elbv2.ApplicationListener; readonly url: string } | undefined;
  public readonly service: ecs.FargateService;
  public readonly taskDefinition: ecs.FargateTaskDefinition;
  public readonly container: ecs.ContainerDefinition;
  /** The tasks' security group: reachable from the load balancer only. */
  public readonly securityGroup: ec2.SecurityGroup;
  public readonly scaling: ecs.ScalableTaskCount;

  constructor(scope: Construct, id: string, props: WebServiceProps) {
    throwIfProblems('The web service', validateWebServiceProps(props));
    super(scope, id);

    const stopTimeout = props.stopTimeout ?? Duration.seconds(SERVICE_DEFAULTS.stopTimeoutSeconds);
    const idleTimeout = props.albIdleTimeout ?? Duration.seconds(SERVICE_DEFAULTS.albIdleTimeoutSeconds);
    const vpc = props.cluster.vpc;

    this.adminApiKey = new secretsmanager.Secret(this, 'AdminApiKey', {
      description: 'ADMIN_API_KEY: the API operator\'s Bearer key (docs/security.md)',
      generateSecretString: { passwordLength: 64, excludePunctuation: true },
    });
    // The deploy role reads it by this tag, for the smoke test after each deploy (bin/smoke.ts).
    Tags.of(this.adminApiKey).add(OPERATOR_KEY_TAG.key, OPERATOR_KEY_TAG.value);
    Validations.of(this.adminApiKey).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason: 'The admin key is rotated by hand (docs/security.md): a new value then a rolling deploy; automatic rotation would need a Lambda and would cut off every caller holding the old key.',
    });

    const task = addAppTask(this, {
      runtime: props.runtime,
      cpu: props.cpu ?? SERVICE_DEFAULTS.cpu,
      memoryMiB: props.memoryMiB ?? SERVICE_DEFAULTS.memoryMiB,
      stopTimeout,
      streamPrefix: 'api',
      // A slow log sink must never stall requests; a lost API log line is the lesser harm.
      logMode: ecs.AwsLogDriverMode.NON_BLOCKING,
      logBufferBytes: SERVICE_DEFAULTS.logBufferBytes,
      port: CONTAINER.port,
      environment: {
        PORT: String(CONTAINER.port),
        KEEP_ALIVE_TIMEOUT_MS: String(keepAliveTimeoutMs(idleTimeout.toSeconds())),
        REQUEST_DEADLINE_MS: String(requestDeadlineMs(idleTimeout.toSeconds())),
        ...(props.dbPoolMax === undefined ? {} : { DB_POOL_MAX: String(props.dbPoolMax) }),
      },
      secrets: { ADMIN_API_KEY: ecs.Secret.fromSecretsManager(this.adminApiKey) },
    });
    this.taskDefinition = task.taskDefinition;
    this.container = task.container;

    this.securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc,
      description: 'API tasks: HTTP from the load balancer only',
      allowAllOutbound: true,
    });

    this.service = new ecs.FargateService(this, 'Service', {
      cluster: props.cluster,
      taskDefinition: this.taskDefinition,
      // No desiredCount: a deploy then leaves the count auto-scaling set alone (the scalable target keeps it within min and max).
      minHealthyPercent: 100,
      maxHealthyPercent: SERVICE_DEFAULTS.maxHealthyPercent,
      // Both strategies: the deployment alarms roll back a release that answers badly, the circuit
      // breaker one whose tasks keep failing to start, which no alarm sees (docs/infrastructure.md, "Deploys").
      circuitBreaker: { enable: true, rollback: true },
      ...(props.canaryDeploys ? canaryServiceProps() : {}),
      healthCheckGracePeriod: Duration.seconds(SERVICE_DEFAULTS.healthCheckGracePeriodSeconds),
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      assignPublicIp: false,
      securityGroups: [this.securityGroup],
      platformVersion: ecs.FargatePlatformVersion.LATEST,
      propagateTags: ecs.PropagatedTagSource.SERVICE,
      enableExecuteCommand: false,
    });

    // The first tasks read their secrets and pull the image with the execution role's policy;
    // a service created before that policy starts tasks that fail, and the circuit breaker
    // then rolls the whole first deploy back.
    const executionPolicy = this.taskDefinition.executionRole?.node.tryFindChild('DefaultPolicy');
    if (executionPolicy) this.service.node.addDependency(executionPolicy);

    this.loadBalancer = new elbv2.ApplicationLoadBalancer(this, 'LoadBalancer', {
      vpc,
      internetFacing: true,
      vpcSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      idleTimeout,
      dropInvalidHeaderFields: true,
      deletionProtection: props.deletionProtection ?? true,
    });
    // The bucket policy for ALB access logs names the region's log-delivery account, so an
    // environment-agnostic stack cannot have them.
    if (props.accessLogBucket && !Token.isUnresolved(Stack.of(this).region)) {
      this.loadBalancer.logAccessLogs(props.accessLogBucket, 'alb');
    } else {
      Validations.of(this.loadBalancer).acknowledge({
        id: 'AwsSolutions-ELB2',
        reason: 'Access logs need the region\'s log-delivery account in the bucket policy, which an environment-agnostic synth cannot know; set context account and region to turn them on.',
      });
    }
    Validations.of(this.loadBalancer).acknowledge({
      id: 'AwsSolutions-EC23',
      reason: 'The public load balancer is the entry point of the API: its security group opens only the listener ports (80, and 443 with a certificate) to the internet.',
    });

    this.domain = props.domain ? new ApiDomain(this, 'Domain', props.domain, { newCertificate: props.certificateArn === undefined }) : undefined;
    const certificate = props.certificateArn
      ? elbv2.ListenerCertificate.fromArn(props.certificateArn)
      : this.domain?.certificate && elbv2.ListenerCertificate.fromCertificateManager(this.domain.certificate);
    this.domain?.pointTo(this.loadBalancer);
    // The serving listener has one construct id whatever its protocol (the id HTTPS stacks have
    // always had), so moving a stack from HTTP to HTTPS updates it in place, port 80 to 443, and
    // the target group and the production listener rule under it keep theirs. With a new logical
    // id CloudFormation would create a second listener on port 80 before deleting the first, and
    // the update would fail on the duplicate port (docs/infrastructure.md, "Update paths").
    this.listener = this.loadBalancer.addListener('Https', certificate
      ? { port: 443, protocol: elbv2.ApplicationProtocol.HTTPS, certificates: [certificate], sslPolicy: elbv2.SslPolicy.RECOMMENDED_TLS, open: true }
      : { port: 80, protocol: elbv2.ApplicationProtocol.HTTP, open: true });
    if (certificate) {
      // addRedirect()'s id and settings; port 80 is free only once the serving listener has left it.
      const redirect = this.loadBalancer.addListener('Redirect80To443', {
        port: 80,
        protocol: elbv2.ApplicationProtocol.HTTP,
        open: true,
        defaultAction: elbv2.ListenerAction.redirect({ port: '443', protocol: elbv2.ApplicationProtocol.HTTPS, permanent: true }),
      });
      redirect.node.addDependency(this.listener);
    }

    const deregistrationDelay = props.deregistrationDelay ?? Duration.seconds(SERVICE_DEFAULTS.deregistrationDelaySeconds);
    const healthCheck: elbv2.HealthCheck = {
      path: SERVICE_DEFAULTS.healthCheckPath,
      healthyHttpCodes: '200',
      interval: Duration.seconds(SERVICE_DEFAULTS.healthCheckIntervalSeconds),
      timeout: Duration.seconds(SERVICE_DEFAULTS.healthCheckTimeoutSeconds),
      healthyThresholdCount: SERVICE_DEFAULTS.healthyThresholdCount,
      unhealthyThresholdCount: SERVICE_DEFAULTS.unhealthyThresholdCount,
    };
    this.targetGroup = this.listener.addTargets('Api', {
      port: CONTAINER.port,
      protocol: elbv2.ApplicationProtocol.HTTP,
      deregistrationDelay,
      healthCheck,
    });
    const canary = props.canaryDeploys
      ? addCanaryTargets(this, { vpc, loadBalancer: this.loadBalancer, listener: this.listener, certificate, primary: this.targetGroup, healthCheck, deregistrationDelay })
      : undefined;
    const host = props.domain?.domainName ?? this.loadBalancer.loadBalancerDnsName;
    this.testListener = canary ? { listener: canary.testListener, url: `${certificate ? 'https' : 'http'}://${host}:${TEST_LISTENER.port}` } : undefined;
    this.alternateTargetGroup = canary?.alternate;
    this.targetGroups = canary ? [this.targetGroup, canary.alternate] : [this.targetGroup];
    this.targetGroup.addTarget(this.service.loadBalancerTarget({
      containerName: CONTAINER.name,
      containerPort: CONTAINER.port,
      alternateTarget: canary?.target,
    }));
    acknowledgeCanary(this.service);

    this.scaling = this.service.autoScaleTaskCount({
      minCapacity: props.minCapacity ?? SERVICE_DEFAULTS.minCapacity,
      maxCapacity: props.maxCapacity ?? SERVICE_DEFAULTS.maxCapacity,
    });
    this.scaling.scaleOnCpuUtilization('Cpu', { targetUtilizationPercent: props.targetCpuPercent ?? SERVICE_DEFAULTS.targetCpuPercent });
    scaleOnRequestsPerTask(this.scaling, this.targetGroups, props.requestsPerTarget ?? SERVICE_DEFAULTS.requestsPerTarget);
  }
}
