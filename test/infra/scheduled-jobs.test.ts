import { Match, type Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { CONTAINER, JOB_DEFAULTS } from '../../lib/defaults.js';
import { JOBS, type JobDefinition } from '../../lib/jobs.js';
import { DEFAULT_METRICS_NAMESPACE, JOB_DIMENSION, JOB_METRICS } from '../../lib/metrics.js';
import { longestIntervalMs, parseSchedule } from '../../lib/schedule.js';
import { shutdownTimeoutMs } from '../../lib/timing.js';
import { errorMessage, EXTRA_JOB, jobsCopy, newApp, NOW, resources, STACK_ID, synth, type Synthesized } from './synth.js';
import { BackendStack } from '../../lib/stack.js';

const ENABLED = JOBS.filter((j) => j.enabled);

interface Counts {
  readonly rules: number;
  readonly taskDefinitions: number;
  readonly queues: number;
  readonly alarms: number;
}

function counts(template: Template): Counts {
  const n = (type: string) => Object.keys(resources(template, type)).length;
  return {
    rules: n('AWS::Events::Rule'),
    taskDefinitions: n('AWS::ECS::TaskDefinition'),
    queues: n('AWS::SQS::Queue'),
    alarms: n('AWS::CloudWatch::Alarm'),
  };
}

/** The rule that runs `job`, found by its name. */
function ruleOf(template: Template, job: Pick<JobDefinition, 'name'>): Record<string, any> {
  const found = Object.values(resources(template, 'AWS::Events::Rule')).filter((r) => r.Properties.Name === `${STACK_ID}-${job.name}`);
  expect(found).toHaveLength(1);
  return found[0]!.Properties;
}

/** The rule on ECS Task State Change events. */
function crashRule(template: Template): Record<string, any> {
  const found = Object.values(resources(template, 'AWS::Events::Rule')).filter((r) => r.Properties.EventPattern?.['detail-type']?.[0] === 'ECS Task State Change');
  expect(found).toHaveLength(1);
  return found[0]!.Properties;
}

function taskDefinitionOf(template: Template, job: Pick<JobDefinition, 'name'>): Record<string, any> | undefined {
  return Object.values(resources(template, 'AWS::ECS::TaskDefinition')).find((t) => t.Properties.Family === `${STACK_ID}-${job.name}`)?.Properties;
}

function alarmsOf(template: Template, job: Pick<JobDefinition, 'name'>): Record<string, Record<string, any>> {
  return Object.fromEntries(Object.values(resources(template, 'AWS::CloudWatch::Alarm'))
    .filter((a) => a.Properties.AlarmName.startsWith(`${STACK_ID}-${job.name}-`))
    .map((a) => [a.Properties.AlarmName.slice(`${STACK_ID}-${job.name}-`.length), a.Properties]));
}

/** The stack with the jobs table as shipped, shared by the tests that only read it. */
let s: Synthesized;
beforeAll(() => {
  s = synth();
});

describe('scheduled jobs, the jobs table as shipped', () => {

  it('creates one rule, one task definition, one dead-letter queue and four alarms per enabled job', () => {
    // Besides the jobs': the crash alert and the API's deployment alert (rules), the API's task
    // definition, and the API's four alarms (no healthy targets, 5xx, worker stalled, database unavailable).
    expect(counts(s.template)).toEqual({ rules: ENABLED.length + 2, taskDefinitions: ENABLED.length + 1, queues: ENABLED.length, alarms: 4 * ENABLED.length + 4 });
    for (const job of ENABLED) {
      expect(ruleOf(s.template, job).ScheduleExpression).toBe(job.schedule);
      expect(Object.keys(alarmsOf(s.template, job)).sort()).toEqual(['dead-letters', 'delivery', 'failed', 'missed-run']);
    }
  });

  it('gives every job the same image on ARM64, its own cpu and memory, and the command `node dist/app/main.js <name>`', () => {
    const api = Object.entries(resources(s.template, 'AWS::ECS::TaskDefinition')).find(([id]) => id.startsWith('Api'))![1].Properties;
    for (const job of ENABLED) {
      const taskDef = taskDefinitionOf(s.template, job)!;
      expect(taskDef.Cpu).toBe(String(job.cpu));
      expect(taskDef.Memory).toBe(String(job.memoryMiB));
      expect(taskDef.RuntimePlatform).toEqual({ CpuArchitecture: 'ARM64', OperatingSystemFamily: 'LINUX' });
      const [container] = taskDef.ContainerDefinitions;
      expect(container.Command).toEqual(['node', 'dist/app/main.js', job.name]);
      expect(container.Image).toEqual(api.ContainerDefinitions[0].Image);
      expect(container.StopTimeout).toBe(JOB_DEFAULTS.stopTimeoutSeconds);
      const env = Object.fromEntries(container.Environment.map((e: { Name: string; Value: unknown }) => [e.Name, e.Value]));
      expect(env.SHUTDOWN_TIMEOUT_MS).toBe(String(shutdownTimeoutMs(JOB_DEFAULTS.stopTimeoutSeconds)));
      expect(env.METRICS_NAMESPACE).toBe(DEFAULT_METRICS_NAMESPACE);
      expect(env.ALERT_TOPIC_ARN).toEqual({ Ref: expect.stringMatching(/^AlertsTopic/) });
      expect('EXPORT_BUCKET' in env).toBe(job.usesExportBucket);
      expect(container.ReadonlyRootFilesystem).toBe(true);
      expect(container.User).toBe(CONTAINER.user);
      expect(container.LinuxParameters.InitProcessEnabled).toBe(true);
    }
  });

  it('passes the event\'s time into the container as SCHEDULED_TIME through an input transformer', () => {
    for (const job of ENABLED) {
      const [target] = ruleOf(s.template, job).Targets;
      expect(target.InputTransformer.InputPathsMap).toEqual({ time: '$.time' });
      const input = JSON.parse(target.InputTransformer.InputTemplate.replace('<time>', '"2026-01-05T00:15:00Z"'));
      expect(input.containerOverrides).toEqual([{ name: CONTAINER.name, environment: [{ name: 'SCHEDULED_TIME', value: '2026-01-05T00:15:00Z' }] }]);
    }
  });

  it('covers delivery failures with a retry policy and a dead-letter queue EventBridge may write to', () => {
    for (const job of ENABLED) {
      const [target] = ruleOf(s.template, job).Targets;
      expect(target.RetryPolicy).toEqual({ MaximumRetryAttempts: JOB_DEFAULTS.retryAttempts, MaximumEventAgeInSeconds: JOB_DEFAULTS.maxEventAgeSeconds });
      expect(target.DeadLetterConfig.Arn['Fn::GetAtt'][0]).toMatch(/DeadLetterQueue/);
    }
    s.template.hasResourceProperties('AWS::SQS::QueuePolicy', {
      PolicyDocument: {
        Statement: Match.arrayWith([Match.objectLike({
          Action: 'sqs:SendMessage',
          Principal: { Service: 'events.amazonaws.com' },
          Condition: { ArnEquals: { 'aws:SourceArn': Match.anyValue() } },
        })]),
      },
    });
    s.template.allResourcesProperties('AWS::SQS::Queue', { SqsManagedSseEnabled: true, MessageRetentionPeriod: JOB_DEFAULTS.deadLetterRetentionDays * 86_400 });
  });

  it('runs jobs in private subnets with no public IP', () => {
    for (const job of ENABLED) {
      const { AwsVpcConfiguration: vpc } = ruleOf(s.template, job).Targets[0].EcsParameters.NetworkConfiguration;
      expect(vpc.AssignPublicIp).toBe('DISABLED');
      expect(vpc.Subnets.map((r: { Ref: string }) => r.Ref)).toEqual([expect.stringMatching(/^VpcPrivateSubnet1/), expect.stringMatching(/^VpcPrivateSubnet2/)]);
    }
  });

  it('runs Spot jobs on FARGATE_SPOT through the rule\'s capacity provider strategy, the others on FARGATE', () => {
    expect(JOBS.some((j) => j.enabled && j.spot) && JOBS.some((j) => j.enabled && !j.spot)).toBe(true);
    for (const job of ENABLED) {
      const params = ruleOf(s.template, job).Targets[0].EcsParameters;
      if (job.spot) {
        expect(params.CapacityProviderStrategy).toEqual([{ CapacityProvider: 'FARGATE_SPOT', Weight: 1 }]);
        expect(params.LaunchType).toBeUndefined();
      } else {
        expect(params.LaunchType).toBe('FARGATE');
        expect(params.CapacityProviderStrategy).toBeUndefined();
      }
    }
    s.template.hasResourceProperties('AWS::ECS::ClusterCapacityProviderAssociations', {
      CapacityProviders: Match.arrayWith(['FARGATE', 'FARGATE_SPOT']),
    });
  });

  it('sets each missed-run alarm to the schedule\'s longest gap plus the grace period, missing data breaching', () => {
    for (const job of ENABLED) {
      const alarm = alarmsOf(s.template, job)['missed-run']!;
      const wanted = longestIntervalMs(parseSchedule(job.schedule), NOW) / 1_000 + job.missedRunGraceMinutes * 60;
      expect(alarm.TreatMissingData).toBe('breaching');
      expect(alarm.EvaluationPeriods).toBe(1);
      expect(alarm.ComparisonOperator).toBe('LessThanThreshold');
      if (wanted <= 7 * 86_400) {
        expect(alarm.Period).toBe(wanted);
        expect(alarm.Namespace).toBe(DEFAULT_METRICS_NAMESPACE);
        expect(alarm.MetricName).toBe(JOB_METRICS.succeeded);
        expect(alarm.Dimensions).toEqual([{ Name: JOB_DIMENSION, Value: job.name }]);
        expect(alarm.Statistic).toBe('Sum');
      }
    }
  });

  it('caps the weekly job\'s missed-run window at CloudWatch\'s 7 days and counts its heartbeats too', () => {
    const weekly = alarmsOf(s.template, { name: 'weekly-export' })['missed-run']!;
    expect(weekly.Period).toBeUndefined();
    const stats = weekly.Metrics.filter((m: { MetricStat?: unknown }) => m.MetricStat);
    expect(stats.map((m: any) => [m.MetricStat.Metric.MetricName, m.MetricStat.Period]).sort()).toEqual([
      [JOB_METRICS.heartbeat, 7 * 86_400],
      [JOB_METRICS.succeeded, 7 * 86_400],
    ]);
    expect(weekly.Metrics.find((m: { Expression?: string }) => m.Expression).Expression).toBe('FILL(succeeded, 0) + FILL(heartbeats, 0)');
    // CloudWatch's rule: Period × EvaluationPeriods ≤ 7 days.
    for (const alarm of Object.values(resources(s.template, 'AWS::CloudWatch::Alarm'))) {
      const period = alarm.Properties.Period ?? alarm.Properties.Metrics.find((m: any) => m.MetricStat).MetricStat.Period;
      expect(period * alarm.Properties.EvaluationPeriods).toBeLessThanOrEqual(7 * 86_400);
    }
  });

  it('alarms on the Failed metric, the rule\'s FailedInvocations and the dead-letter queue, all to the alert topic', () => {
    for (const job of ENABLED) {
      const alarms = alarmsOf(s.template, job);
      expect(alarms.failed).toMatchObject({ Namespace: DEFAULT_METRICS_NAMESPACE, MetricName: JOB_METRICS.failed, Dimensions: [{ Name: JOB_DIMENSION, Value: job.name }], Threshold: 1 });
      expect(alarms.delivery).toMatchObject({ Namespace: 'AWS/Events', MetricName: 'FailedInvocations', Dimensions: [{ Name: 'RuleName', Value: expect.anything() }] });
      expect(alarms['dead-letters']).toMatchObject({ Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible' });
      for (const alarm of Object.values(alarms)) {
        expect(alarm.AlarmActions).toEqual([{ Ref: expect.stringMatching(/^AlertsTopic/) }]);
        expect(alarm.AlarmDescription).toMatch(/Runbook: README\.md#/);
      }
    }
  });

  it('shows each job\'s duration, successes, failures and heartbeats on the dashboard', () => {
    const [dashboard] = Object.values(resources(s.template, 'AWS::CloudWatch::Dashboard'));
    const body = JSON.stringify(dashboard!.Properties.DashboardBody);
    for (const job of ENABLED) {
      for (const metric of [JOB_METRICS.duration, JOB_METRICS.succeeded, JOB_METRICS.failed, JOB_METRICS.heartbeat]) {
        expect(body).toContain(`\\"${metric}\\",\\"${JOB_DIMENSION}\\",\\"${job.name}\\"`);
      }
    }
  });
});

describe('the crash alert', () => {
  let pattern: Record<string, any>;
  beforeAll(() => {
    pattern = crashRule(s.template).EventPattern;
  });

  /** An ECS Task State Change event of a task in this stack's cluster. */
  const event = (detail: Record<string, unknown>) => ({
    source: 'aws.ecs',
    'detail-type': 'ECS Task State Change',
    detail: { clusterArn: 'CLUSTER', lastStatus: 'STOPPED', desiredStatus: 'STOPPED', ...detail },
  });
  const job = (name: string) => `family:${STACK_ID}-${name}`;

  it('matches the job tasks\' families, in this cluster, once stopped', () => {
    expect(pattern.source).toEqual(['aws.ecs']);
    expect(pattern['detail-type']).toEqual(['ECS Task State Change']);
    expect(pattern.detail.lastStatus).toEqual(['STOPPED']);
    expect(pattern.detail.clusterArn).toEqual([{ 'Fn::GetAtt': [expect.stringMatching(/^Cluster/), 'Arn'] }]);
    const detail = { ...pattern.detail, clusterArn: ['CLUSTER'] };
    const group = (family: string) => matches({ group: detail.group }, { group: `family:${family}` });
    const families = Object.values(resources(s.template, 'AWS::ECS::TaskDefinition')).map((t) => t.Properties.Family as string);
    for (const j of ENABLED) expect(group(`${STACK_ID}-${j.name}`), j.name).toBe(true);
    // The API's task definition is in the same cluster; its family must not match.
    expect(families.filter((f) => group(f)).sort()).toEqual(ENABLED.map((j) => `${STACK_ID}-${j.name}`).sort());
  });

  it('keeps its pattern the same size however many jobs there are (EventBridge allows 2,048 characters)', () => {
    const { template } = synth({ jobs: [...jobsCopy(), EXTRA_JOB] });
    expect(crashRule(template).EventPattern).toEqual(pattern);
    const arn = 'arn:aws-us-gov:ecs:us-gov-west-1:123456789012:cluster/AVeryLongStackNameForRulesAndAlarms-ClusterEB0386A7-AbCdEfGhIjKl';
    expect(JSON.stringify({ ...pattern, detail: { ...pattern.detail, clusterArn: [arn] } }).length).toBeLessThan(2_048);
  });

  it('fires for a non-zero exit or a task that failed to start, not for a clean exit or the API', () => {
    const p = { ...pattern, detail: { ...pattern.detail, clusterArn: ['CLUSTER'] } };
    expect(matches(p, event({ group: job('billing-run'), stopCode: 'EssentialContainerExited', containers: [{ name: 'app', exitCode: 1 }] }))).toBe(true);
    expect(matches(p, event({ group: job('billing-run'), stopCode: 'EssentialContainerExited', containers: [{ name: 'app', exitCode: 137, reason: 'OutOfMemoryError: Container killed due to memory usage' }] }))).toBe(true);
    expect(matches(p, event({ group: job('report-aggregation'), stopCode: 'TaskFailedToStart', stoppedReason: 'CannotPullContainerError', containers: [{ name: 'app' }] }))).toBe(true);
    expect(matches(p, event({ group: job('billing-run'), stopCode: 'EssentialContainerExited', containers: [{ name: 'app', exitCode: 0 }] }))).toBe(false);
    expect(matches(p, event({ group: 'service:Api', stopCode: 'EssentialContainerExited', containers: [{ name: 'app', exitCode: 1 }] }))).toBe(false);
    expect(matches(p, { ...event({ group: job('billing-run'), containers: [{ name: 'app', exitCode: 1 }] }), detail: { clusterArn: 'CLUSTER', lastStatus: 'RUNNING', group: job('billing-run'), containers: [{ exitCode: 1 }] } })).toBe(false);
  });

  it('sends a readable message with the exit code and the reasons to the alert topic', () => {
    const [target] = crashRule(s.template).Targets;
    expect(target.Arn).toEqual({ Ref: expect.stringMatching(/^AlertsTopic/) });
    const paths = Object.values(target.InputTransformer.InputPathsMap);
    expect(paths).toEqual(expect.arrayContaining(['$.detail.group', '$.detail.containers[0].exitCode', '$.detail.stopCode', '$.detail.stoppedReason', '$.detail.taskArn']));
    const text = JSON.parse(target.InputTransformer.InputTemplate) as string;
    expect(text).toMatch(/^A scheduled job task stopped abnormally: </);
    expect(text).toContain('Exit code: <');
    expect(text).toContain('Runbook: README.md#job-task-crashed');
  });
});

describe('the jobs table drives the resources', () => {
  let base: Template;
  beforeAll(() => {
    // A copy equal to the shipped table synthesizes the same stack.
    expect(jobsCopy()).toEqual(JOBS);
    base = s.template;
  });

  it('adds exactly one rule, task definition, queue and set of alarms for one more job', () => {
    const { template } = synth({ jobs: [...jobsCopy(), EXTRA_JOB] });
    const before = counts(base);
    expect(counts(template)).toEqual({ rules: before.rules + 1, taskDefinitions: before.taskDefinitions + 1, queues: before.queues + 1, alarms: before.alarms + 4 });
    expect(ruleOf(template, EXTRA_JOB).ScheduleExpression).toBe(EXTRA_JOB.schedule);
    expect(taskDefinitionOf(template, EXTRA_JOB)).toBeDefined();
    expect(Object.keys(alarmsOf(template, EXTRA_JOB))).toHaveLength(4);
  });

  it('creates nothing for a disabled job, and leaves the other jobs\' logical ids alone', () => {
    const jobs = jobsCopy().map((j) => (j.name === 'data-cleanup' ? { ...j, enabled: false } : j));
    const { template } = synth({ jobs });
    const before = counts(base);
    expect(counts(template)).toEqual({ rules: before.rules - 1, taskDefinitions: before.taskDefinitions - 1, queues: before.queues - 1, alarms: before.alarms - 4 });
    expect(taskDefinitionOf(template, { name: 'data-cleanup' })).toBeUndefined();
    expect(alarmsOf(template, { name: 'data-cleanup' })).toEqual({});
    expect(Object.values(resources(template, 'AWS::Events::Rule')).map((r) => r.Properties.Name)).not.toContain(`${STACK_ID}-data-cleanup`);
    const ids = (t: Template) => new Set(Object.keys(t.toJSON().Resources).filter((id) => !/datacleanup/.test(id)));
    expect(ids(template)).toEqual(ids(base));
  });

  it('takes its metrics namespace from one setting, for the container and the alarms alike', () => {
    const { template } = synth({ metricsNamespace: 'Acme/Jobs' });
    const alarm = alarmsOf(template, { name: 'billing-run' }).failed!;
    expect(alarm.Namespace).toBe('Acme/Jobs');
    const container = taskDefinitionOf(template, { name: 'billing-run' })!.ContainerDefinitions[0];
    expect(container.Environment).toContainEqual({ Name: 'METRICS_NAMESPACE', Value: 'Acme/Jobs' });
  });
});

describe('a bad jobs table', () => {
  it('fails synth with every problem, each naming the job and the field', () => {
    const jobs: JobDefinition[] = [
      ...jobsCopy(),
      { ...EXTRA_JOB, schedule: 'cron(0 6 * * * *)' },
      { ...EXTRA_JOB, name: 'billing-run' },
      { ...EXTRA_JOB, name: 'big-one', cpu: 512, memoryMiB: 512 },
      { ...EXTRA_JOB, name: 'slow-one', schedule: 'rate(10 minutes)', timeoutSeconds: 900 },
      { ...EXTRA_JOB, name: 'monthly-one', schedule: 'cron(0 4 1 * ? *)' },
      { ...EXTRA_JOB, name: 'a-job-whose-name-is-rather-long-for-rule' },
    ];
    const message = errorMessage(() => new BackendStack(newApp(), 'AVeryLongStackNameForRules', { alertEmail: 'oncall@acme.io', jobs, now: NOW }));
    expect(message).toMatch(/^Stack AVeryLongStackNameForRules has \d+ problems:/);
    expect(message).toContain('job "usage-digest": schedule "cron(0 6 * * * *)" is invalid');
    expect(message).toContain('job "billing-run": name is a duplicate');
    expect(message).toContain('job "big-one": memoryMiB 512 is not a valid Fargate size for cpu 512');
    expect(message).toContain('job "slow-one": timeoutSeconds 900 does not fit the schedule rate(10 minutes)');
    expect(message).toMatch(/job "monthly-one": schedule cron\(0 4 1 \* \? \*\) has runs up to 3\d\.\d days apart, but a CloudWatch alarm can watch at most 7 days/);
    expect(message).toMatch(/job "a-job-whose-name-is-rather-long-for-rule": name makes the rule name "AVeryLongStackNameForRules-a-job-whose-name-is-rather-long-for-rule" 67 characters long; EventBridge allows 64/);
  });
});

/**
 * A small EventBridge pattern matcher for the features the crash rule uses: lists of exact
 * values, `anything-but`, `prefix`, `$or`, nested objects, and arrays of objects in the event (any
 * element may match).
 */
function matches(pattern: Record<string, any>, event: unknown): boolean {
  return Object.entries(pattern).every(([key, rule]) => {
    if (key === '$or') return (rule as Record<string, any>[]).some((alt) => matches(alt, event));
    const value = (event as Record<string, unknown> | undefined)?.[key];
    if (Array.isArray(value) && !Array.isArray(rule)) return value.some((v) => matches(rule, v));
    if (!Array.isArray(rule)) return value !== undefined && matches(rule, value);
    const values = Array.isArray(value) ? value : [value];
    return values.some((v) => v !== undefined && rule.some((r: unknown) => {
      if (typeof r !== 'object' || r === null) return r === v;
      if ('anything-but' in r) return !([] as unknown[]).concat((r as any)['anything-but']).includes(v);
      if ('prefix' in r) return typeof v === 'string' && v.startsWith((r as any).prefix);
      throw new Error(`the test matcher does not know ${JSON.stringify(r)}`);
    }));
  });
}
