import { Match, Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { benchJobs } from '../../bench/jobs-table.js';
import { CONTAINER, JOB_DEFAULTS } from '../../lib/defaults.js';
import { ALREADY_ALERTED_ERRORS, EXECUTION_ERROR, TASK_START_ALLOWANCE_SECONDS, backstopSeconds, taskRetryBackoffs } from '../../lib/job-flow.js';
import { JOBS, taskRetriesOf, type JobDefinition } from '../../lib/jobs.js';
import { DEFAULT_METRICS_NAMESPACE, JOB_DIMENSION, JOB_METRICS } from '../../lib/metrics.js';
import { longestIntervalMs, parseSchedule } from '../../lib/schedule.js';
import { BackendStack } from '../../lib/constructs/stack.js';
import { shutdownTimeoutMs } from '../../lib/timing.js';
import { errorMessage, EXTRA_JOB, jobsCopy, jobTemplate, newApp, NOW, resources, STACK_ID, synth, type Synthesized } from './synth.js';

const ENABLED: readonly JobDefinition[] = JOBS.filter((j) => j.enabled);
/** The enabled jobs started by an EventBridge rule (no time zone); test/infra/zoned-jobs.test.ts covers the others. */
const RULED = ENABLED.filter((j) => j.timeZone === undefined);

function only(template: Template, type: string): Record<string, any> {
  const found = Object.values(resources(template, type));
  expect(found, type).toHaveLength(1);
  return found[0]!.Properties;
}

/** A job's state machine definition, its references written `<LogicalId>` (or `<Name>` for a parameter). */
function definitionOf(template: Template): Record<string, any> {
  const resolve = (v: unknown): string => {
    if (typeof v === 'string') return v;
    const o = v as Record<string, any>;
    if ('Fn::Join' in o) return (o['Fn::Join'][1] as unknown[]).map(resolve).join(o['Fn::Join'][0] as string);
    if ('Ref' in o) return `<${o.Ref}>`;
    if ('Fn::GetAtt' in o) return `<${(o['Fn::GetAtt'] as string[]).join('.')}>`;
    throw new Error(`cannot resolve ${JSON.stringify(v)}`);
  };
  return JSON.parse(resolve(only(template, 'AWS::StepFunctions::StateMachine').DefinitionString));
}

/** What the parent passes to a job's nested stack for `parameter`. */
function passed(s: Synthesized, name: string, parameter: string): unknown {
  const nested = s.stack.scheduledJobs.jobs.get(name)!.stack;
  const id = s.stack.resolve((nested.nestedStackResource as any).logicalId) as string;
  return s.template.toJSON().Resources[id].Properties.Parameters[parameter];
}

function alarmsOf(template: Template, job: Pick<JobDefinition, 'name'>): Record<string, Record<string, any>> {
  return Object.fromEntries(Object.values(resources(template, 'AWS::CloudWatch::Alarm'))
    .filter((a) => a.Properties.AlarmName.startsWith(`${STACK_ID}-${job.name}-`))
    .map((a) => [a.Properties.AlarmName.slice(`${STACK_ID}-${job.name}-`.length), a.Properties]));
}

/** EventBridge's input transformer, as it fills a template: each value written as JSON where its placeholder stands. */
function transform(inputTemplate: string, values: Record<string, unknown>): string {
  return inputTemplate.replace(/<([\w.-]+)>/g, (_, name: string) => JSON.stringify(values[name]));
}

/** The stack with the jobs table as shipped, shared by the tests that only read it. */
let s: Synthesized;
beforeAll(() => {
  s = synth();
});

describe('scheduled jobs, the jobs table as shipped', () => {
  it('puts each enabled job in a nested stack of its own: task definition, state machine, rule, dead-letter queue, six alarms', () => {
    expect(Object.keys(resources(s.template, 'AWS::CloudFormation::Stack'))).toHaveLength(ENABLED.length);
    expect(RULED.length).toBeGreaterThan(0);
    for (const job of RULED) {
      const t = jobTemplate(s, job.name);
      for (const type of ['AWS::ECS::TaskDefinition', 'AWS::StepFunctions::StateMachine', 'AWS::Events::Rule', 'AWS::SQS::Queue']) t.resourceCountIs(type, 1);
      // No alarm on the runner's Failed metric: its own alert is the one message of an exit 1.
      expect(Object.keys(alarmsOf(t, job)).sort()).toEqual(['dead-letters', 'delivery', 'executions-aborted', 'executions-failed', 'executions-timed-out', 'missed-run']);
      // No role per job: the state machine, the rule and the task use the parent's.
      t.resourceCountIs('AWS::IAM::Role', 0);
      t.resourceCountIs('AWS::IAM::Policy', 0);
      expect(only(t, 'AWS::Events::Rule').ScheduleExpression).toBe(job.schedule);
    }
    // The parent keeps the API's and the migrations' task definitions, the execution-status rule and the API's deployment rule.
    s.template.resourceCountIs('AWS::ECS::TaskDefinition', 2);
    s.template.resourceCountIs('AWS::Events::Rule', 2);
  });

  it('gives every job the same image on ARM64, its own cpu and memory, and the command `node dist/app/main.js <name>`', () => {
    const api = Object.values(resources(s.template, 'AWS::ECS::TaskDefinition'))[0]!.Properties;
    for (const job of ENABLED) {
      const taskDef = only(jobTemplate(s, job.name), 'AWS::ECS::TaskDefinition');
      expect(taskDef.Family).toBe(`${STACK_ID}-${job.name}`);
      expect(taskDef.Cpu).toBe(String(job.cpu));
      expect(taskDef.Memory).toBe(String(job.memoryMiB));
      expect(taskDef.RuntimePlatform).toEqual({ CpuArchitecture: 'ARM64', OperatingSystemFamily: 'LINUX' });
      const [container] = taskDef.ContainerDefinitions;
      expect(container.Command).toEqual(['node', 'dist/app/main.js', job.name]);
      // The image is the API's, passed in as a parameter or built from the same asset.
      expect(JSON.stringify(container.Image)).toMatch(/container-assets|referenceto/);
      expect(JSON.stringify(api.ContainerDefinitions[0].Image)).toMatch(/container-assets/);
      expect(container.StopTimeout).toBe(JOB_DEFAULTS.stopTimeoutSeconds);
      const env = Object.fromEntries(container.Environment.map((e: { Name: string; Value: unknown }) => [e.Name, e.Value]));
      expect(env.SHUTDOWN_TIMEOUT_MS).toBe(String(shutdownTimeoutMs(JOB_DEFAULTS.stopTimeoutSeconds)));
      expect(env.METRICS_NAMESPACE).toBe(DEFAULT_METRICS_NAMESPACE);
      expect('EXPORT_BUCKET' in env).toBe(job.usesExportBucket);
      expect(container.ReadonlyRootFilesystem).toBe(true);
      expect(container.User).toBe(CONTAINER.user);
    }
  });

  it('wires each rule to its job\'s state machine, through the shared events role', () => {
    for (const job of RULED) {
      const t = jobTemplate(s, job.name);
      const [target] = only(t, 'AWS::Events::Rule').Targets;
      const [machineId] = Object.keys(resources(t, 'AWS::StepFunctions::StateMachine'));
      expect(target.Arn).toEqual({ Ref: machineId });
      expect(passed(s, job.name, target.RoleArn.Ref)).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^JobsEventsRole/), 'Arn'] });
      expect(only(t, 'AWS::StepFunctions::StateMachine').StateMachineName).toBe(`${STACK_ID}-${job.name}`);
    }
    const [eventsRole] = Object.entries(resources(s.template, 'AWS::IAM::Role')).filter(([id]) => id.startsWith('JobsEventsRole'));
    expect(eventsRole![1].Properties.AssumeRolePolicyDocument.Statement[0].Principal).toEqual({ Service: 'events.amazonaws.com' });
    const policy = Object.values(resources(s.template, 'AWS::IAM::Policy')).find((p) => p.Properties.Roles[0].Ref === eventsRole![0])!;
    expect(policy.Properties.PolicyDocument.Statement).toEqual([{
      Action: 'states:StartExecution',
      Effect: 'Allow',
      Resource: { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':states:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, `:stateMachine:${STACK_ID}-*`]] },
    }]);
  });

  it('passes the event\'s time as the execution\'s scheduledTime, in valid JSON whatever the time field holds', () => {
    for (const job of RULED) {
      const [target] = only(jobTemplate(s, job.name), 'AWS::Events::Rule').Targets;
      expect(target.InputTransformer.InputPathsMap).toEqual({ time: '$.time' });
      for (const time of ['2026-01-05T00:15:00Z', 'a "quoted" \\ back\\slashed\nnew-lined <time>']) {
        expect(JSON.parse(transform(target.InputTransformer.InputTemplate, { time }))).toEqual({ scheduledTime: time });
      }
    }
  });

  it('keeps EventBridge\'s delivery retries and a dead-letter queue EventBridge may write to', () => {
    for (const job of RULED) {
      const t = jobTemplate(s, job.name);
      const [target] = only(t, 'AWS::Events::Rule').Targets;
      expect(target.RetryPolicy).toEqual({ MaximumRetryAttempts: JOB_DEFAULTS.retryAttempts, MaximumEventAgeInSeconds: JOB_DEFAULTS.maxEventAgeSeconds });
      expect(target.DeadLetterConfig.Arn['Fn::GetAtt'][0]).toMatch(/DeadLetterQueue/);
      const queuePolicy = only(t, 'AWS::SQS::QueuePolicy');
      expect(queuePolicy.PolicyDocument.Statement).toContainEqual(expect.objectContaining({
        Action: 'sqs:SendMessage',
        Principal: { Service: 'events.amazonaws.com' },
        Condition: { ArnEquals: { 'aws:SourceArn': expect.anything() } },
      }));
      expect(only(t, 'AWS::SQS::Queue')).toMatchObject({ SqsManagedSseEnabled: true, MessageRetentionPeriod: JOB_DEFAULTS.deadLetterRetentionDays * 86_400 });
    }
  });

  it('runs the task with runTask.sync in the private subnets, on FARGATE_SPOT for Spot jobs and FARGATE for the others', () => {
    expect(ENABLED.some((j) => j.spot) && ENABLED.some((j) => !j.spot)).toBe(true);
    for (const job of ENABLED) {
      const t = jobTemplate(s, job.name);
      const runTask = definitionOf(t).States.RunTask;
      expect(runTask.Resource).toBe('arn:<AWS::Partition>:states:::ecs:runTask.sync');
      const p = runTask.Parameters;
      if (job.spot) {
        expect(p.CapacityProviderStrategy).toEqual([{ CapacityProvider: 'FARGATE_SPOT', Weight: 1 }]);
        expect(p.LaunchType).toBeUndefined();
      } else {
        expect(p.LaunchType).toBe('FARGATE');
        expect(p.CapacityProviderStrategy).toBeUndefined();
      }
      // The family, no revision: a retry after a deploy runs the latest ACTIVE revision, not the deregistered one.
      expect(p.TaskDefinition).toBe(only(t, 'AWS::ECS::TaskDefinition').Family);
      expect(p.TaskDefinition).toBe(`${STACK_ID}-${job.name}`);
      const vpc = p.NetworkConfiguration.AwsvpcConfiguration;
      expect(vpc.AssignPublicIp).toBe('DISABLED');
      expect(vpc.Subnets.map((ref: string) => passed(s, job.name, ref.slice(1, -1)))).toEqual([
        { Ref: expect.stringMatching(/^VpcPrivateSubnet1/) }, { Ref: expect.stringMatching(/^VpcPrivateSubnet2/) },
      ]);
      expect(p.Overrides.ContainerOverrides).toEqual([{ Name: CONTAINER.name, Environment: [{ Name: 'SCHEDULED_TIME', 'Value.$': '$.scheduledTime' }, { Name: 'SFN_EXECUTION_ARN', 'Value.$': '$$.Execution.Id' }] }]);
      expect(runTask.TimeoutSeconds).toBe(backstopSeconds(job, JOB_DEFAULTS.stopTimeoutSeconds));
      expect(runTask.TimeoutSeconds).toBe(job.timeoutSeconds + TASK_START_ALLOWANCE_SECONDS + JOB_DEFAULTS.stopTimeoutSeconds);
      const start = definitionOf(t).States.Start.Parameters;
      expect(start.backoffSeconds).toEqual(taskRetryBackoffs(taskRetriesOf(job)));
      expect(definitionOf(t).States.MayRetry.Choices[0].NumericLessThanEquals).toBe(taskRetriesOf(job));
    }
    s.template.hasResourceProperties('AWS::ECS::ClusterCapacityProviderAssociations', { CapacityProviders: Match.arrayWith(['FARGATE', 'FARGATE_SPOT']) });
  });

  it('logs every execution event and traces with X-Ray (cdk-nag SF1, SF2)', () => {
    for (const job of ENABLED) {
      const machine = only(jobTemplate(s, job.name), 'AWS::StepFunctions::StateMachine');
      expect(machine.StateMachineType).toBe('STANDARD');
      expect(machine.LoggingConfiguration).toMatchObject({ Level: 'ALL', IncludeExecutionData: true });
      expect(machine.TracingConfiguration).toEqual({ Enabled: true });
    }
  });

  it('gives every state machine one role: RunTask on the job task definitions in this cluster, PassRole on their roles, .sync\'s managed rule, the alert topic', () => {
    // The jobs' state machines; the migrations resource's waiter (Provider framework) has a role of its own.
    const roles = Object.entries(resources(s.template, 'AWS::IAM::Role'))
      .filter(([id, r]) => !id.startsWith('Migrations') && r.Properties.AssumeRolePolicyDocument.Statement.some((st: any) => st.Principal?.Service === 'states.amazonaws.com'));
    expect(roles).toHaveLength(1);
    const [roleId] = roles[0]!;
    const roleParts = (prefix: string) => Object.keys(s.template.toJSON().Resources).filter((id) => id.startsWith(prefix)).sort();
    for (const job of ENABLED) {
      const machine = only(jobTemplate(s, job.name), 'AWS::StepFunctions::StateMachine');
      expect(passed(s, job.name, machine.RoleArn.Ref)).toEqual({ 'Fn::GetAtt': [roleId, 'Arn'] });
      // The nested stack waits for the roles' policies: a state machine is refused until its role may deliver logs.
      const nested = s.stack.scheduledJobs.jobs.get(job.name)!.stack;
      const dependsOn = s.template.toJSON().Resources[s.stack.resolve((nested.nestedStackResource as any).logicalId)].DependsOn as string[];
      expect(dependsOn).toEqual(expect.arrayContaining([...roleParts('JobsStateMachineRole'), ...roleParts('JobsEventsRole')]));
    }
    const statements = Object.values(resources(s.template, 'AWS::IAM::Policy'))
      .filter((p) => p.Properties.Roles.some((r: { Ref: string }) => r.Ref === roleId))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Record<string, any>[]);
    const bySid = (sid: string) => statements.find((st) => st.Sid === sid)!;
    const arn = (service: string, resource: string) => ({ 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, `:${service}:`, { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, `:${resource}`]] });

    expect(bySid('RunTheJobTasksInThisCluster')).toEqual({
      Sid: 'RunTheJobTasksInThisCluster',
      Effect: 'Allow',
      Action: 'ecs:RunTask',
      Resource: arn('ecs', `task-definition/${STACK_ID}-*:*`),
      Condition: { ArnEquals: { 'ecs:cluster': { 'Fn::GetAtt': [expect.stringMatching(/^Cluster/), 'Arn'] } } },
    });
    // The API's family is not <stack>-..., so the pattern leaves its task definition out.
    const families = Object.values(resources(s.template, 'AWS::ECS::TaskDefinition')).map((t) => t.Properties.Family ?? '');
    expect(families.filter((f: string) => f.startsWith(`${STACK_ID}-`))).toEqual([]);
    const passRoles = bySid('PassTheJobTaskRoles').Resource.map((r: any) => r['Fn::GetAtt'][0]).sort();
    expect(passRoles).toEqual([expect.stringMatching(/^JobsExecutionRole/), expect.stringMatching(/^JobsExportTaskRole/), expect.stringMatching(/^JobsTaskRole/)].sort((a, b) => String(a).localeCompare(String(b))));
    expect(passRoles).toHaveLength(3);
    expect([bySid('WatchAndStopTheJobTasks').Action].flat().sort()).toEqual(['ecs:DescribeTasks', 'ecs:StopTask']);
    expect(JSON.stringify(bySid('WatchAndStopTheJobTasks').Resource)).toContain(':task/');
    expect([bySid('ManagedRuleOfRunTaskSync').Action].flat().sort()).toEqual(['events:DescribeRule', 'events:PutRule', 'events:PutTargets']);
    expect(bySid('ManagedRuleOfRunTaskSync').Resource).toEqual(arn('events', 'rule/StepFunctionsGetEventsForECSTaskRule'));
    expect(statements).toContainEqual(expect.objectContaining({ Action: 'sns:Publish', Resource: { Ref: expect.stringMatching(/^AlertsTopic/) } }));
    // Nothing else: every action on "*" is a log delivery or X-Ray action, which accept no resource.
    for (const st of statements.filter((x) => x.Resource === '*')) {
      for (const action of [st.Action].flat()) expect(action).toMatch(/^(logs:\w+Deliver\w*|logs:(PutResourcePolicy|DescribeResourcePolicies|DescribeLogGroups)|xray:\w+)$/);
    }
    expect(statements.flatMap((st) => [st.Action].flat()).filter((a: string) => a.startsWith('ecs:')).sort()).toEqual(['ecs:DescribeTasks', 'ecs:RunTask', 'ecs:StopTask']);
  });

  it('sets each missed-run alarm to the schedule\'s longest gap plus the grace period, missing data breaching', () => {
    for (const job of ENABLED) {
      const alarm = alarmsOf(jobTemplate(s, job.name), job)['missed-run']!;
      const wanted = longestIntervalMs(parseSchedule(job.schedule, job.timeZone), NOW) / 1_000 + job.missedRunGraceMinutes * 60;
      expect(alarm.TreatMissingData).toBe('breaching');
      expect(alarm.ComparisonOperator).toBe('LessThanThreshold');
      expect(alarm.Namespace).toBe(DEFAULT_METRICS_NAMESPACE);
      expect(alarm.MetricName).toBe(JOB_METRICS.succeeded);
      if (wanted <= 7 * 86_400) {
        expect(alarm.EvaluationPeriods).toBe(1);
        expect(alarm.Period).toBe(wanted);
        expect(alarm.MetricName).toBe(JOB_METRICS.succeeded);
        expect(alarm.Dimensions).toEqual([{ Name: JOB_DIMENSION, Value: job.name }]);
      }
    }
  });

  it('keeps every alarm within CloudWatch\'s seven-day window (test/infra/missed-run.test.ts replays the missed-run ones)', () => {
    // CloudWatch's rule: Period × EvaluationPeriods ≤ 7 days.
    for (const template of [s.template, ...ENABLED.map((j) => jobTemplate(s, j.name))]) {
      for (const alarm of Object.values(resources(template, 'AWS::CloudWatch::Alarm'))) {
        const period = alarm.Properties.Period ?? alarm.Properties.Metrics.find((m: any) => m.MetricStat).MetricStat.Period;
        expect(period * alarm.Properties.EvaluationPeriods).toBeLessThanOrEqual(7 * 86_400);
      }
    }
  });

  it('alarms on the rule\'s FailedInvocations and the dead-letter queue, all to the alert topic', () => {
    for (const job of RULED) {
      const alarms = alarmsOf(jobTemplate(s, job.name), job);
      expect(alarms.delivery).toMatchObject({ Namespace: 'AWS/Events', MetricName: 'FailedInvocations', Dimensions: [{ Name: 'RuleName', Value: expect.anything() }] });
      expect(alarms['dead-letters']).toMatchObject({ Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible' });
      for (const alarm of Object.values(alarms)) {
        expect(passed(s, job.name, alarm.AlarmActions[0].Ref)).toEqual({ Ref: expect.stringMatching(/^AlertsTopic/) });
        expect(alarm.AlarmDescription).toMatch(/Runbook: docs\/operations\.md#/);
      }
    }
  });

  it('draws one dashboard whose widgets SEARCH over every job, so its size does not grow with the table', () => {
    const [dashboard] = Object.values(resources(s.template, 'AWS::CloudWatch::Dashboard'));
    const body = JSON.stringify(dashboard!.Properties.DashboardBody);
    for (const metric of [JOB_METRICS.duration, JOB_METRICS.succeeded, JOB_METRICS.failed, JOB_METRICS.heartbeat]) {
      expect(body).toContain(`SEARCH('{${DEFAULT_METRICS_NAMESPACE},${JOB_DIMENSION}} MetricName=\\\\\\"${metric}\\\\\\"'`);
    }
  });
});

describe('the execution-status rule (what replaces the ECS crash rule)', () => {
  let rule: Record<string, any>;
  beforeAll(() => {
    rule = Object.values(resources(s.template, 'AWS::Events::Rule')).find((r) => r.Properties.EventPattern?.source?.[0] === 'aws.states')!.Properties;
  });
  const event = (detail: Record<string, unknown>) => ({
    source: 'aws.states',
    'detail-type': 'Step Functions Execution Status Change',
    detail: { stateMachineArn: `arn:aws:states:us-east-1:123456789012:stateMachine:${STACK_ID}-billing-run`, executionArn: 'arn:...', ...detail },
  });
  const pattern = () => {
    const p = structuredClone(rule.EventPattern);
    p.detail.stateMachineArn = [{ prefix: `arn:aws:states:us-east-1:123456789012:stateMachine:${STACK_ID}-` }];
    return p;
  };

  it('matches this stack\'s job state machines by one prefix of their ARNs', () => {
    expect(rule.EventPattern['detail-type']).toEqual(['Step Functions Execution Status Change']);
    expect(rule.EventPattern.detail.stateMachineArn).toEqual([{ prefix: { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':states:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, `:stateMachine:${STACK_ID}-`]] } }]);
    expect(matches(pattern(), event({ status: 'TIMED_OUT', stateMachineArn: 'arn:aws:states:us-east-1:123456789012:stateMachine:Other-billing-run' }))).toBe(false);
  });

  it('pages for an execution no alert covers, and not for one already alerted: nothing twice, nothing unalerted', () => {
    const p = pattern();
    expect(ALREADY_ALERTED_ERRORS).toEqual([EXECUTION_ERROR.alerted, EXECUTION_ERROR.failed]);
    expect(matches(p, event({ status: 'FAILED', error: EXECUTION_ERROR.alerted }))).toBe(false);
    expect(matches(p, event({ status: 'FAILED', error: EXECUTION_ERROR.failed }))).toBe(false);
    expect(matches(p, event({ status: 'SUCCEEDED' }))).toBe(false);
    expect(matches(p, event({ status: 'RUNNING' }))).toBe(false);
    expect(matches(p, event({ status: 'FAILED', error: EXECUTION_ERROR.alertFailed }))).toBe(true);
    expect(matches(p, event({ status: 'FAILED', error: 'States.Runtime' }))).toBe(true);
    expect(matches(p, event({ status: 'FAILED' }))).toBe(true);
    expect(matches(p, event({ status: 'TIMED_OUT' }))).toBe(true);
    expect(matches(p, event({ status: 'ABORTED' }))).toBe(true);
  });

  it('sends the topic valid JSON whatever the event\'s fields hold', () => {
    const [target] = rule.Targets;
    expect(target.Arn).toEqual({ Ref: expect.stringMatching(/^AlertsTopic/) });
    const weird = 'a "quoted" \\ back\\slashed\nnew-lined {value} <status>';
    const values = Object.fromEntries(Object.keys(target.InputTransformer.InputPathsMap).map((k) => [k, weird]));
    const message = JSON.parse(transform(target.InputTransformer.InputTemplate, values));
    expect(message).toMatchObject({ status: weird, error: weird, cause: weird, execution: weird, runbook: 'docs/operations.md#job-execution-failed' });
    expect(message.alert).toContain(`npm run job:aws -- JOB --scheduled-time SCHEDULED_TIME --stack ${STACK_ID}`);
    expect(Object.values(target.InputTransformer.InputPathsMap)).toEqual(expect.arrayContaining(['$.detail.status', '$.detail.error', '$.detail.cause', '$.detail.executionArn']));
  });

  it('leaves no rule on ECS task state changes: a task the state machine retries must not page', () => {
    const patterns = Object.values(resources(s.template, 'AWS::Events::Rule')).map((r) => r.Properties.EventPattern?.['detail-type']?.[0]);
    expect(patterns).not.toContain('ECS Task State Change');
  });
});

describe('the jobs table drives the resources', () => {
  it('adds one nested stack for one more job, and changes nothing of the others', () => {
    const more = synth({ jobs: [...jobsCopy(), EXTRA_JOB] });
    expect(more.stack.scheduledJobs.jobs.size).toBe(ENABLED.length + 1);
    expect(only(jobTemplate(more, EXTRA_JOB.name), 'AWS::Events::Rule').ScheduleExpression).toBe(EXTRA_JOB.schedule);
    expectOthersUnchanged(s, more, EXTRA_JOB.name);
  });

  it('removes a disabled job\'s nested stack, and changes nothing of the others', () => {
    const fewer = synth({ jobs: jobsCopy().map((j) => (j.name === 'data-cleanup' ? { ...j, enabled: false } : j)) });
    expect(fewer.stack.scheduledJobs.jobs.has('data-cleanup')).toBe(false);
    expectOthersUnchanged(fewer, s, 'data-cleanup');
  });

  it('takes its metrics namespace from one setting, for the container and the alarms alike', () => {
    const ns = synth({ metricsNamespace: 'Acme/Jobs' });
    const t = jobTemplate(ns, 'billing-run');
    expect(alarmsOf(t, { name: 'billing-run' })['missed-run']!.Namespace).toBe('Acme/Jobs');
    expect(only(t, 'AWS::ECS::TaskDefinition').ContainerDefinitions[0].Environment).toContainEqual({ Name: 'METRICS_NAMESPACE', Value: 'Acme/Jobs' });
  });
});

/**
 * `larger` is `smaller` plus the job `name`: the parent's resources keep their logical ids
 * (one nested stack more), and every other job's nested stack is the same, template and inputs.
 */
function expectOthersUnchanged(smaller: Synthesized, larger: Synthesized, name: string): void {
  const ids = (x: Synthesized) => Object.keys(x.template.toJSON().Resources);
  const added = ids(larger).filter((id) => !ids(smaller).includes(id));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatch(new RegExp(`^Jobs${name.replace(/-/g, '')}NestedStack`));
  expect(ids(smaller).filter((id) => !ids(larger).includes(id))).toEqual([]);
  for (const job of smaller.stack.scheduledJobs.jobs.keys()) {
    expect(jobTemplate(larger, job).toJSON(), job).toEqual(jobTemplate(smaller, job).toJSON());
    const resource = (x: Synthesized) => x.template.toJSON().Resources[x.stack.resolve((x.stack.scheduledJobs.jobs.get(job)!.stack.nestedStackResource as any).logicalId)];
    expect(resource(larger).Properties.Parameters, job).toEqual(resource(smaller).Properties.Parameters);
  }
}

describe('200 jobs', () => {
  it('synthesize into templates that each stay within CloudFormation\'s limits', () => {
    // 200 jobs that may all run at once need a database with the connections for them (lib/pool-budget.ts).
    const big = synth({ jobs: benchJobs(200), database: { instanceType: 'm6g.2xlarge' } });
    const templates = [big.template.toJSON(), ...[...big.stack.scheduledJobs.jobs.values()].map((j) => Template.fromStack(j.stack).toJSON())];
    expect(templates).toHaveLength(201);
    for (const t of templates) {
      expect(Object.keys(t.Resources).length).toBeLessThanOrEqual(500);
      expect(Object.keys(t.Outputs ?? {}).length).toBeLessThanOrEqual(200);
      expect(Object.keys(t.Parameters ?? {}).length).toBeLessThanOrEqual(200);
      expect(Object.keys(t.Mappings ?? {}).length).toBeLessThanOrEqual(200);
      expect(JSON.stringify(t).length).toBeLessThanOrEqual(1_000_000);
    }
    const parent = templates[0]!;
    console.log(`200 jobs: parent ${Object.keys(parent.Resources).length} resources, ${JSON.stringify(parent).length} bytes; largest nested ${Math.max(...templates.slice(1).map((t) => Object.keys(t.Resources).length))} resources`);
  }, 300_000);
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
      { ...EXTRA_JOB, name: 'retrying-one', taskRetries: 9 },
      { ...EXTRA_JOB, name: 'a-job-whose-name-is-rather-long-for-rule' },
    ];
    const message = errorMessage(() => new BackendStack(newApp(), 'AVeryLongStackNameForRules', { alertEmail: 'oncall@acme.io', jobs, now: NOW }));
    // Every problem here is the table's: the message names lib/jobs.ts, not the stack's settings.
    expect(message).toMatch(/^The jobs table \(lib\/jobs\.ts\) has \d+ problems:/);
    expect(message).not.toContain('Stack AVeryLongStackNameForRules');
    expect(message).toContain('job "usage-digest": schedule "cron(0 6 * * * *)" is invalid');
    expect(message).toContain('job "billing-run": name is a duplicate');
    expect(message).toContain('job "big-one": memoryMiB 512 is not a valid Fargate size for cpu 512');
    expect(message).toContain('job "slow-one": timeoutSeconds 900 does not fit the schedule rate(10 minutes)');
    expect(message).toMatch(/job "monthly-one": schedule cron\(0 4 1 \* \? \*\) has runs up to 3\d\.\d days apart, and with missedRunGraceMinutes \(30\) no CloudWatch alarm \(at most 7 days\) can cover it/);
    expect(message).toContain('job "retrying-one": taskRetries must be a whole number from 0 to 5, got 9');
    expect(message).toMatch(/job "a-job-whose-name-is-rather-long-for-rule": name makes the rule name "AVeryLongStackNameForRules-a-job-whose-name-is-rather-long-for-rule" 67 characters long; EventBridge allows 64/);
  });
});

/**
 * A small EventBridge pattern matcher for the features the rules use: lists of exact values,
 * `anything-but`, `prefix`, `exists`, `$or`, nested objects.
 */
function matches(pattern: Record<string, any>, event: unknown): boolean {
  return Object.entries(pattern).every(([key, rule]) => {
    if (key === '$or') return (rule as Record<string, any>[]).some((alt) => matches(alt, event));
    const value = (event as Record<string, unknown> | undefined)?.[key];
    if (!Array.isArray(rule)) return value !== undefined && matches(rule, value);
    if (rule.length === 1 && typeof rule[0] === 'object' && rule[0] !== null && 'exists' in rule[0]) return (value !== undefined) === rule[0].exists;
    return value !== undefined && rule.some((r: unknown) => {
      if (typeof r !== 'object' || r === null) return r === value;
      if ('anything-but' in r) return !([] as unknown[]).concat((r as any)['anything-but']).includes(value);
      if ('prefix' in r) return typeof value === 'string' && value.startsWith((r as any).prefix);
      throw new Error(`the test matcher does not know ${JSON.stringify(r)}`);
    });
  });
}
