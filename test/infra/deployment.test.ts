/**
 * How each stage deploys the API: prod with ECS's canary strategy (two target groups, a
 * weighted production rule, a bake time, deployment alarms that roll back), dev rolling; both
 * with the circuit breaker. One synth per stage.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { RELEASE_SMOKE_DEFAULTS, SERVICE_DEFAULTS, STAGE_DEFAULTS } from '../../lib/defaults.js';
import { TEST_LISTENER } from '../../lib/constructs/canary-deploys.js';
import { HOOK_ENV } from '../../lib/hooks/smoke-test.mjs';
import { settingsFromContext } from '../../lib/constructs/settings.js';
import { BackendStack } from '../../lib/constructs/stack.js';
import { newApp, NOW, resources, TEST_DOMAIN } from './synth.js';

function synthStage(context: Record<string, unknown>): Template {
  const app = newApp(context);
  const { stackName, props } = settingsFromContext(app.node);
  return Template.fromStack(new BackendStack(app, stackName, { ...props, now: NOW }));
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Resource = { Properties: any };
const one = (template: Template, type: string): Resource => {
  const all = Object.values(resources(template, type)) as Resource[];
  expect(all).toHaveLength(1);
  return all[0]!;
};
const alarmsByName = (template: Template): Map<string, Resource> =>
  new Map((Object.values(resources(template, 'AWS::CloudWatch::Alarm')) as Resource[]).map((a) => [a.Properties.AlarmName, a]));
const targetGroupIds = (template: Template): string[] => Object.keys(resources(template, 'AWS::ElasticLoadBalancingV2::TargetGroup'));
/** Every target group a math alarm's metrics read, by logical id (the dimension is a GetAtt of it). */
const groupsWatched = (alarm: Resource): string[] => (alarm.Properties.Metrics as { MetricStat?: { Metric: { Dimensions: { Name: string; Value: { 'Fn::GetAtt': [string, string] } }[] } } }[])
  .flatMap((m) => m.MetricStat?.Metric.Dimensions ?? [])
  .filter((d) => d.Name === 'TargetGroup')
  .map((d) => d.Value['Fn::GetAtt'][0]);

describe('prod deploys', () => {
  let template: Template;
  beforeAll(() => { template = synthStage({ stage: 'prod', ...TEST_DOMAIN }); });

  it('uses the canary strategy with its slice, canary bake time and deployment bake time', () => {
    const config = one(template, 'AWS::ECS::Service').Properties.DeploymentConfiguration;
    expect(config.Strategy).toBe('CANARY');
    expect(config.CanaryConfiguration).toEqual({ CanaryPercent: SERVICE_DEFAULTS.canaryPercent, CanaryBakeTimeInMinutes: SERVICE_DEFAULTS.canaryBakeMinutes });
    expect(config.BakeTimeInMinutes).toBe(SERVICE_DEFAULTS.deploymentBakeMinutes);
    // New tasks that never start trip no alarm (no target ever reports): the circuit breaker
    // fails and rolls back such a deploy after a few failed starts, instead of CloudFormation after 3 hours.
    expect(config.DeploymentCircuitBreaker).toEqual({ Enable: true, Rollback: true });
  });

  it('leaves the task count to auto-scaling: no DesiredCount for a deploy to reset', () => {
    const service = one(template, 'AWS::ECS::Service').Properties;
    expect(service).not.toHaveProperty('DesiredCount');
    const target = one(template, 'AWS::ApplicationAutoScaling::ScalableTarget').Properties;
    expect([target.MinCapacity, target.MaxCapacity]).toEqual([STAGE_DEFAULTS.prod.minCapacity, STAGE_DEFAULTS.prod.maxCapacity]);
  });

  it('rolls back on the unhealthy-target alarm and on per-group 5xx-rate and latency alarms, not on counts', () => {
    const { Alarms } = one(template, 'AWS::ECS::Service').Properties.DeploymentConfiguration;
    expect(Alarms.Enable).toBe(true);
    expect(Alarms.Rollback).toBe(true);
    const names = [...alarmsByName(template).keys()];
    const watched = (Alarms.AlarmNames as string[]).map((n) => n.replace(/^EcsSaasBackend-prod-/, '')).sort();
    expect(watched).toEqual(['api-5xx-rate-alternate', 'api-5xx-rate-primary', 'api-p99-latency-alternate', 'api-p99-latency-primary', 'api-unhealthy-targets']);
    for (const name of Alarms.AlarmNames) expect(names).toContain(name);
  });

  it('judges each target group by its own 5xx rate and p99, per minute, only with enough requests', () => {
    const alarms = alarmsByName(template);
    const groups = targetGroupIds(template);
    const seen = { rate: new Set<string>(), latency: new Set<string>() };
    for (const label of ['primary', 'alternate']) {
      const rate = alarms.get(`EcsSaasBackend-prod-api-5xx-rate-${label}`)!.Properties;
      const latency = alarms.get(`EcsSaasBackend-prod-api-p99-latency-${label}`)!.Properties;
      for (const [kind, alarm] of [['rate', rate], ['latency', latency]] as const) {
        const read = groupsWatched({ Properties: alarm });
        expect(new Set(read).size, `${kind} ${label} reads one group`).toBe(1);
        seen[kind].add(read[0]!);
        const metrics = alarm.Metrics as { Id: string; Expression?: string; MetricStat?: { Metric: { MetricName: string }; Period: number; Stat: string } }[];
        for (const m of metrics.filter((x) => x.MetricStat)) expect(m.MetricStat!.Period).toBe(60);
        const expression = metrics.find((m) => m.Expression)!.Expression!;
        expect(expression).toContain(`FILL(requests, 0) >= ${SERVICE_DEFAULTS.deploymentMinRequestsPerMinute}`);
        expect(alarm.AlarmActions, `${kind} ${label}`).toEqual([{ Ref: expect.stringMatching(/^AlertsTopic/) }]);
        expect(alarm).toMatchObject({ EvaluationPeriods: SERVICE_DEFAULTS.deploymentAlarmMinutes, DatapointsToAlarm: SERVICE_DEFAULTS.deploymentAlarmMinutes, TreatMissingData: 'notBreaching', ComparisonOperator: 'GreaterThanThreshold' });
      }
      const rateMetrics = Object.fromEntries((rate.Metrics as { Id: string; MetricStat?: { Metric: { MetricName: string } } }[]).filter((m) => m.MetricStat).map((m) => [m.Id, m.MetricStat!.Metric.MetricName]));
      expect(rateMetrics).toEqual({ requests: 'RequestCount', errors: 'HTTPCode_Target_5XX_Count' });
      expect(rate.Threshold).toBe(SERVICE_DEFAULTS.deployment5xxRatePercent);
      expect(latency.Threshold).toBe(SERVICE_DEFAULTS.p99LatencySeconds);
    }
    // Either group may hold the new revision: each is watched.
    expect(seen.rate).toEqual(new Set(groups));
    expect(seen.latency).toEqual(new Set(groups));
  });

  it('gives the service an alternate target group and a weighted production rule on both', () => {
    const groups = targetGroupIds(template);
    expect(groups).toHaveLength(2);
    const lb = one(template, 'AWS::ECS::Service').Properties.LoadBalancers;
    expect(lb).toHaveLength(1);
    expect(lb[0].AdvancedConfiguration.AlternateTargetGroupArn).toEqual({ Ref: groups.find((g) => g.includes('Alternate')) });
    const ruleId = (lb[0].AdvancedConfiguration.ProductionListenerRule as { Ref: string }).Ref;
    const rule = resources(template, 'AWS::ElasticLoadBalancingV2::ListenerRule')[ruleId]!.Properties;
    // The production rule is on the production listener (the test listener has a rule of its own).
    expect(JSON.stringify(rule.ListenerArn)).toMatch(/Https/);
    const forwarded = rule.Actions[0].ForwardConfig.TargetGroups.map((t: { TargetGroupArn: { Ref: string }; Weight: number }) => [t.TargetGroupArn.Ref, t.Weight]);
    expect(forwarded.map(([ref]: [string]) => ref).sort()).toEqual([...groups].sort());
    expect(forwarded.map(([, w]: [string, number]) => w).sort()).toEqual([0, 100]);
  });

  it('alarms on 5xx and healthy tasks across both target groups', () => {
    const alarms = alarmsByName(template);
    for (const name of ['api-5xx', 'api-no-healthy-targets', 'api-unhealthy-targets', 'api-p99-latency']) {
      const alarm = alarms.get(`EcsSaasBackend-prod-${name}`)!;
      expect(new Set(groupsWatched(alarm)), name).toEqual(new Set(targetGroupIds(template)));
    }
  });
});

describe('the release smoke test (prod)', () => {
  let template: Template;
  beforeAll(() => { template = synthStage({ stage: 'prod', ...TEST_DOMAIN }); });

  it('runs the smoke-test hook after the test traffic shift, before any production traffic moves', () => {
    const { LifecycleHooks } = one(template, 'AWS::ECS::Service').Properties.DeploymentConfiguration;
    expect(LifecycleHooks).toHaveLength(1);
    expect(LifecycleHooks[0].LifecycleStages).toEqual(['POST_TEST_TRAFFIC_SHIFT']);
    const [fnId] = LifecycleHooks[0].HookTargetArn['Fn::GetAtt'];
    const fn = resources(template, 'AWS::Lambda::Function')[fnId]!;
    expect(fn.Properties.Handler).toBe('smoke-test.handler');
    expect(fn.Properties.Environment.Variables).toMatchObject({
      [HOOK_ENV.baseUrl]: `https://${TEST_DOMAIN.domainName}:${TEST_LISTENER.port}`,
      [HOOK_ENV.attempts]: String(RELEASE_SMOKE_DEFAULTS.attempts),
      [HOOK_ENV.retrySeconds]: String(RELEASE_SMOKE_DEFAULTS.retrySeconds),
    });
    expect(fn.Properties.VpcConfig.SubnetIds.length).toBeGreaterThan(0);
  });

  it('gives ECS a test listener rule on an HTTPS listener of its own, which only the NAT gateways\' addresses reach', () => {
    const listeners = Object.entries(resources(template, 'AWS::ElasticLoadBalancingV2::Listener')) as [string, Resource][];
    const [testId, test] = listeners.find(([, l]) => l.Properties.Port === TEST_LISTENER.port)!;
    expect(test.Properties.Protocol).toBe('HTTPS');
    expect(test.Properties.Certificates).toHaveLength(1);
    const rules = Object.entries(resources(template, 'AWS::ElasticLoadBalancingV2::ListenerRule')) as [string, Resource][];
    const [testRuleId] = rules.find(([, r]) => r.Properties.ListenerArn.Ref === testId)!;
    const lb = one(template, 'AWS::ECS::Service').Properties.LoadBalancers[0];
    expect(lb.AdvancedConfiguration.TestListenerRule).toEqual({ Ref: testRuleId });
    const ingress = (Object.values(resources(template, 'AWS::EC2::SecurityGroupIngress')) as Resource[]).map((r) => r.Properties).filter((r) => r.FromPort === TEST_LISTENER.port);
    const groups = Object.values(resources(template, 'AWS::EC2::SecurityGroup')) as Resource[];
    const inline = groups.flatMap((g) => (g.Properties.SecurityGroupIngress ?? []) as { FromPort: number; CidrIp?: unknown }[]).filter((r) => r.FromPort === TEST_LISTENER.port);
    const rulesForPort = [...ingress, ...inline];
    expect(rulesForPort.length).toBeGreaterThan(0);
    for (const rule of rulesForPort) expect(JSON.stringify(rule.CidrIp)).toMatch(/NatGatewayEIP|EIP.*PublicIp/);
    expect(JSON.stringify(rulesForPort)).not.toContain('0.0.0.0/0');
  });

  it('publishes the operator key\'s secret for `npm run smoke`', () => {
    expect(template.toJSON().Outputs.OperatorKeySecret.Value).toEqual({ Ref: expect.stringMatching(/^ApiAdminApiKey/) });
  });
});

describe('dev deploys', () => {
  let template: Template;
  beforeAll(() => { template = synthStage({ stage: 'dev' }); });

  it('stay rolling, with the circuit breaker and the same deployment alarms', () => {
    const config = one(template, 'AWS::ECS::Service').Properties.DeploymentConfiguration;
    expect(config.Strategy).toBeUndefined();
    expect(config.CanaryConfiguration).toBeUndefined();
    expect(config.DeploymentCircuitBreaker).toEqual({ Enable: true, Rollback: true });
    expect(config.Alarms).toMatchObject({ Enable: true, Rollback: true });
    expect(targetGroupIds(template)).toHaveLength(1);
    template.resourceCountIs('AWS::ElasticLoadBalancingV2::ListenerRule', 0);
    // Rolling deploys have no test traffic and no lifecycle hooks.
    expect(config.LifecycleHooks).toBeUndefined();
    const ports = (Object.values(resources(template, 'AWS::ElasticLoadBalancingV2::Listener')) as Resource[]).map((l) => l.Properties.Port);
    expect(ports).not.toContain(TEST_LISTENER.port);
  });
});
