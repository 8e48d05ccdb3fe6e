import { Duration, Stack } from 'aws-cdk-lib';
import { Capture, Match, type Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as logs from 'aws-cdk-lib/aws-logs';
import { beforeAll, describe, expect, it } from 'vitest';
import { CONTAINER, SERVICE_DEFAULTS, STAGE_DEFAULTS } from '../../lib/defaults.js';
import { keepAliveTimeoutMs, REQUEST_DEADLINE_MS, requestDeadlineMs, shutdownTimeoutMs } from '../../lib/timing.js';
import { WebService, type WebServiceProps } from '../../lib/constructs/web-service.js';
import { errorMessage, newApp, resources, synth, TEST_DOMAIN, type Synthesized } from './synth.js';

/** The API task definition's `app` container. */
function apiContainer(template: Template): Record<string, any> {
  const [taskDef] = Object.entries(resources(template, 'AWS::ECS::TaskDefinition')).filter(([id]) => id.startsWith('Api'));
  const container = taskDef![1].Properties.ContainerDefinitions.find((c: { Name: string }) => c.Name === CONTAINER.name);
  expect(container).toBeDefined();
  return container;
}

function env(container: Record<string, any>): Record<string, string> {
  return Object.fromEntries((container.Environment ?? []).map((e: { Name: string; Value: string }) => [e.Name, e.Value]));
}

function targetGroupAttributes(template: Template): Record<string, string> {
  const [tg] = Object.values(resources(template, 'AWS::ElasticLoadBalancingV2::TargetGroup'));
  return Object.fromEntries(tg!.Properties.TargetGroupAttributes.map((a: { Key: string; Value: string }) => [a.Key, a.Value]));
}

function albAttributes(template: Template): Record<string, string> {
  const [lb] = Object.values(resources(template, 'AWS::ElasticLoadBalancingV2::LoadBalancer'));
  return Object.fromEntries(lb!.Properties.LoadBalancerAttributes.map((a: { Key: string; Value: string }) => [a.Key, a.Value]));
}

describe('web service, default settings', () => {
  let s: Synthesized;
  beforeAll(() => {
    s = synth();
  });

  it('sets stopTimeout explicitly (60 s) and derives SHUTDOWN_TIMEOUT_MS from it', () => {
    const container = apiContainer(s.template);
    expect(container.StopTimeout).toBe(SERVICE_DEFAULTS.stopTimeoutSeconds);
    expect(Number(env(container).SHUTDOWN_TIMEOUT_MS)).toBe(shutdownTimeoutMs(container.StopTimeout));
    expect(Number(env(container).SHUTDOWN_TIMEOUT_MS)).toBeLessThan(container.StopTimeout * 1_000);
  });

  it('derives KEEP_ALIVE_TIMEOUT_MS from the ALB idle timeout, and keeps it longer', () => {
    const idle = Number(albAttributes(s.template)['idle_timeout.timeout_seconds']);
    const keepAlive = Number(env(apiContainer(s.template)).KEEP_ALIVE_TIMEOUT_MS);
    expect(idle).toBe(SERVICE_DEFAULTS.albIdleTimeoutSeconds);
    expect(keepAlive).toBe(keepAliveTimeoutMs(idle));
    expect(keepAlive).toBeGreaterThan(idle * 1_000);
  });

  it('derives REQUEST_DEADLINE_MS from the ALB idle timeout: the task answers before the ALB gives up', () => {
    const idle = Number(albAttributes(s.template)['idle_timeout.timeout_seconds']);
    const deadline = Number(env(apiContainer(s.template)).REQUEST_DEADLINE_MS);
    expect(deadline).toBe(requestDeadlineMs(idle));
    expect(deadline).toBe(REQUEST_DEADLINE_MS);
    expect(deadline).toBeLessThan(idle * 1_000);
    expect(requestDeadlineMs(6)).toBe(1_000);
  });

  it('sets the target group deregistration delay explicitly, short of AWS\'s 300 s', () => {
    const delay = targetGroupAttributes(s.template)['deregistration_delay.timeout_seconds'];
    expect(delay).toBe(String(SERVICE_DEFAULTS.deregistrationDelaySeconds));
    expect(Number(delay)).toBeLessThan(300);
  });

  it('health-checks /livez (not the shared database) on the container port', () => {
    s.template.hasResourceProperties('AWS::ElasticLoadBalancingV2::TargetGroup', {
      HealthCheckPath: '/livez',
      Port: CONTAINER.port,
      Protocol: 'HTTP',
      TargetType: 'ip',
      Matcher: { HttpCode: '200' },
    });
    const container = apiContainer(s.template);
    expect(container.PortMappings).toEqual([expect.objectContaining({ ContainerPort: CONTAINER.port })]);
    expect(env(container).PORT).toBe(String(CONTAINER.port));
  });

  it('deploys with a rolling circuit breaker and never below the running count', () => {
    s.template.hasResourceProperties('AWS::ECS::Service', {
      DesiredCount: Match.absent(),
      LaunchType: 'FARGATE',
      DeploymentConfiguration: {
        DeploymentCircuitBreaker: { Enable: true, Rollback: true },
        MinimumHealthyPercent: 100,
        MaximumPercent: 200,
      },
      NetworkConfiguration: { AwsvpcConfiguration: Match.objectLike({ AssignPublicIp: 'DISABLED' }) },
      EnableExecuteCommand: false,
    });
  });

  it('auto-scales on CPU and on requests per target', () => {
    s.template.hasResourceProperties('AWS::ApplicationAutoScaling::ScalableTarget', {
      MinCapacity: STAGE_DEFAULTS.dev.minCapacity,
      MaxCapacity: STAGE_DEFAULTS.dev.maxCapacity,
      ScalableDimension: 'ecs:service:DesiredCount',
    });
    const policies = Object.values(resources(s.template, 'AWS::ApplicationAutoScaling::ScalingPolicy')).map((p) => p.Properties.TargetTrackingScalingPolicyConfiguration);
    expect(policies.map((p) => p.PredefinedMetricSpecification?.PredefinedMetricType ?? 'requests per target').sort()).toEqual(['ECSServiceAverageCPUUtilization', 'requests per target']);
    const requests = policies.find((p) => p.CustomizedMetricSpecification)!;
    expect(requests.TargetValue).toBe(SERVICE_DEFAULTS.requestsPerTarget);
    expect(requests.CustomizedMetricSpecification.Metrics.at(-1)).toMatchObject({ Expression: '(FILL(requests0, 0)) / (FILL(healthy0, 0))', ReturnData: true });
  });

  it('in prod, tracks the requests per task over both target groups, wherever a canary deploy left the traffic', () => {
    const prod = synth({ stage: 'prod', service: { domain: TEST_DOMAIN } });
    const groups = Object.keys(resources(prod.template, 'AWS::ElasticLoadBalancingV2::TargetGroup')).sort();
    expect(groups).toHaveLength(2);
    const policy = Object.values(resources(prod.template, 'AWS::ApplicationAutoScaling::ScalingPolicy'))
      .map((p) => p.Properties.TargetTrackingScalingPolicyConfiguration).find((p) => p.CustomizedMetricSpecification)!;
    const queries = policy.CustomizedMetricSpecification.Metrics as { Id: string; Expression?: string; ReturnData: boolean; MetricStat?: { Metric: { MetricName: string; Dimensions: { Name: string; Value: any }[] }; Stat: string } }[];
    const read = (metric: string) => queries.filter((q) => q.MetricStat?.Metric.MetricName === metric)
      .map((q) => q.MetricStat!.Metric.Dimensions.find((d) => d.Name === 'TargetGroup')!.Value['Fn::GetAtt'][0]).sort();
    expect(read('RequestCount')).toEqual(groups);
    expect(read('HealthyHostCount')).toEqual(groups);
    expect(queries.filter((q) => q.ReturnData)).toEqual([expect.objectContaining({ Expression: '(FILL(requests0, 0) + FILL(requests1, 0)) / (FILL(healthy0, 0) + FILL(healthy1, 0))' })]);
    // What the CDK rendered for its one metric is gone: CloudFormation takes Metrics or a metric, not both.
    expect(Object.keys(policy.CustomizedMetricSpecification)).toEqual(['Metrics']);
  });

  it('hardens the container: init process, non-root user, read-only root with a writable /tmp volume', () => {
    const container = apiContainer(s.template);
    expect(container.LinuxParameters.InitProcessEnabled).toBe(true);
    expect(container.User).toBe(CONTAINER.user);
    expect(container.User.startsWith('0')).toBe(false);
    expect(container.ReadonlyRootFilesystem).toBe(true);
    expect(container.MountPoints).toEqual([{ ContainerPath: CONTAINER.scratchPath, ReadOnly: false, SourceVolume: 'scratch' }]);
    s.template.hasResourceProperties('AWS::ECS::TaskDefinition', {
      RuntimePlatform: { CpuArchitecture: 'ARM64', OperatingSystemFamily: 'LINUX' },
      Volumes: [{ Name: 'scratch' }],
      ContainerDefinitions: [Match.objectLike({ Name: CONTAINER.name, PortMappings: Match.anyValue() })],
    });
  });

  it('never turns on the debug routes', () => {
    expect(env(apiContainer(s.template)).ENABLE_DEBUG_ROUTES).toBe('false');
  });

  it('logs to CloudWatch with a retention period', () => {
    const container = apiContainer(s.template);
    expect(container.LogConfiguration.LogDriver).toBe('awslogs');
    const group = new Capture();
    s.template.hasResourceProperties('AWS::ECS::TaskDefinition', {
      ContainerDefinitions: [Match.objectLike({ LogConfiguration: { LogDriver: 'awslogs', Options: Match.objectLike({ 'awslogs-group': group }) } })],
    });
    const logGroups = resources(s.template, 'AWS::Logs::LogGroup');
    expect(logGroups[group.asObject().Ref]?.Properties.RetentionInDays).toBe(STAGE_DEFAULTS.dev.logRetentionDays);
  });

  it('serves HTTP on 80 without a certificate', () => {
    s.template.resourceCountIs('AWS::ElasticLoadBalancingV2::Listener', 1);
    s.template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', { Port: 80, Protocol: 'HTTP' });
    expect(albAttributes(s.template)['routing.http.drop_invalid_header_fields.enabled']).toBe('true');
  });

  it('admits traffic to the tasks from the load balancer only', () => {
    const ingress = Object.values(resources(s.template, 'AWS::EC2::SecurityGroupIngress'))
      .map((r) => r.Properties)
      .filter((p) => p.FromPort === CONTAINER.port);
    expect(ingress).toHaveLength(1);
    expect(JSON.stringify(ingress[0]!.SourceSecurityGroupId)).toContain('LoadBalancerSecurityGroup');
  });
});

describe('API alerts', () => {
  let s: Synthesized;
  beforeAll(() => {
    s = synth();
  });
  const alarm = (name: string) => Object.values(resources(s.template, 'AWS::CloudWatch::Alarm')).find((a) => a.Properties.AlarmName === `Test-api-${name}`)?.Properties;

  it('pages when no task passes the health check', () => {
    const noHealthy = alarm('no-healthy-targets')!;
    const stats = noHealthy.Metrics.filter((m: any) => m.MetricStat).map((m: any) => m.MetricStat);
    expect(stats.map((m: any) => [m.Metric.Namespace, m.Metric.MetricName, m.Stat])).toEqual([['AWS/ApplicationELB', 'HealthyHostCount', 'Minimum']]);
    expect(noHealthy).toMatchObject({
      ComparisonOperator: 'LessThanThreshold',
      Threshold: 1,
      EvaluationPeriods: SERVICE_DEFAULTS.noHealthyTargetsMinutes,
      TreatMissingData: 'breaching',
      AlarmActions: [{ Ref: expect.stringMatching(/^AlertsTopic/) }],
    });
  });

  it('pages on a burst of 5xx from the load balancer or the tasks', () => {
    const errors = alarm('5xx')!;
    expect(errors.Threshold).toBe(SERVICE_DEFAULTS.serverErrorsThreshold);
    const names = errors.Metrics.filter((m: any) => m.MetricStat).map((m: any) => m.MetricStat.Metric.MetricName).sort();
    expect(names).toEqual(['HTTPCode_ELB_5XX_Count', 'HTTPCode_Target_5XX_Count']);
    expect(errors.AlarmActions).toEqual([{ Ref: expect.stringMatching(/^AlertsTopic/) }]);
  });

  it('sends the reason when a deployment fails and is rolled back', () => {
    s.template.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: {
        source: ['aws.ecs'],
        'detail-type': ['ECS Deployment State Change'],
        resources: [{ Ref: Match.stringLikeRegexp('^ApiService') }],
        detail: { eventName: ['SERVICE_DEPLOYMENT_FAILED'] },
      },
      Targets: [Match.objectLike({ Arn: { Ref: Match.stringLikeRegexp('^AlertsTopic') }, InputTransformer: Match.objectLike({ InputPathsMap: Match.objectLike({ 'detail-reason': '$.detail.reason' }) }) })],
    });
  });
});

describe('web service, settings from context', () => {
  it('keeps the container in step with a changed stopTimeout and idle timeout, and uses the given delay', () => {
    const { template } = synth({ service: { stopTimeout: Duration.seconds(20), albIdleTimeout: Duration.seconds(120), deregistrationDelay: Duration.seconds(5) } });
    const container = apiContainer(template);
    expect(container.StopTimeout).toBe(20);
    expect(env(container).SHUTDOWN_TIMEOUT_MS).toBe(String(shutdownTimeoutMs(20)));
    expect(albAttributes(template)['idle_timeout.timeout_seconds']).toBe('120');
    expect(env(container).KEEP_ALIVE_TIMEOUT_MS).toBe(String(keepAliveTimeoutMs(120)));
    expect(targetGroupAttributes(template)['deregistration_delay.timeout_seconds']).toBe('5');
  });

  it('serves HTTPS on 443 with the certificate and redirects 80 to it', () => {
    const certificateArn = 'arn:aws:acm:eu-west-1:123456789012:certificate/11111111-2222-3333-4444-555555555555';
    const { template } = synth({ service: { certificateArn } });
    template.resourceCountIs('AWS::ElasticLoadBalancingV2::Listener', 2);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 443,
      Protocol: 'HTTPS',
      Certificates: [{ CertificateArn: certificateArn }],
      DefaultActions: [Match.objectLike({ Type: 'forward' })],
    });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 80,
      DefaultActions: [Match.objectLike({ Type: 'redirect', RedirectConfig: Match.objectLike({ Port: '443', Protocol: 'HTTPS' }) })],
    });
  });

  it('writes ALB access logs when the stack has a region', () => {
    const { template } = synth({ env: { account: '123456789012', region: 'eu-west-1' } });
    expect(albAttributes(template)['access_logs.s3.enabled']).toBe('true');
  });
});

describe('web service validation', () => {
  const construct = (props: Partial<WebServiceProps>) => () => {
    const stack = new Stack(newApp(), 'V');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    const cluster = new ecs.Cluster(stack, 'Cluster', { vpc });
    const runtime = {
      image: ecs.ContainerImage.fromRegistry('public.ecr.aws/docker/library/node:24-slim'),
      logGroup: new logs.LogGroup(stack, 'Logs'),
      environment: {},
      secrets: {},
    };
    new WebService(stack, 'Api', { cluster, runtime, ...props });
  };

  it('rejects a stopTimeout Fargate does not accept, showing the value', () => {
    expect(construct({ stopTimeout: Duration.seconds(150) })).toThrow('stopTimeout must be a whole number of seconds between 2 and 120, got 150');
    expect(construct({ stopTimeout: Duration.seconds(1) })).toThrow(/stopTimeout .* got 1$/m);
  });

  it('reports every problem at once', () => {
    const message = errorMessage(construct({
      deregistrationDelay: Duration.seconds(4000),
      albIdleTimeout: Duration.seconds(0),
      minCapacity: 5,
      maxCapacity: 2,
      cpu: 512,
      memoryMiB: 512,
    }));
    expect(message).toMatch(/^The web service has 4 problems:/);
    expect(message).toContain('deregistrationDelay must be a whole number of seconds between 0 and 3600, got 4000');
    expect(message).toContain('albIdleTimeout must be a whole number of seconds between 1 and 4000, got 0');
    expect(message).toContain('minCapacity (5) must not exceed maxCapacity (2)');
    expect(message).toContain('memoryMiB 512 is not a valid Fargate size for cpu 512');
  });
});
