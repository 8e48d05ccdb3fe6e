/**
 * Migrations before traffic: the template runs the new image's `migrate` task before the API
 * service's update, and the custom resource's own Lambda code (lib/lambda/run-migrations.mjs),
 * run here against local ECS and CloudFormation endpoints with the real SDK clients, fails the
 * deploy unless that task exits 0.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONTAINER, MIGRATION_DEFAULTS } from '../../lib/defaults.js';
import { DEADLINE_ENV, isComplete, onEvent, STARTED_BY, type MigrationEvent } from '../../lib/lambda/run-migrations.mjs';
import { AwsError, awsEnv, startFakeCloudFormation, startFakeJsonService, type FakeService } from '../helpers/aws-json.js';
import { resources, synth, type Synthesized } from './synth.js';

describe('the template', () => {
  let s: Synthesized;
  // A whole stack's synth: minutes on a loaded two-core machine.
  beforeAll(() => {
    s = synth();
  }, 600_000);

  const byId = (type: string) => resources(s.template, type);
  const migrationsTaskId = () => Object.keys(byId('AWS::ECS::TaskDefinition')).find((id) => id.startsWith('MigrationsTaskDef'))!;

  it('has a migrations task definition that runs `migrate` with the master credentials', () => {
    const container = byId('AWS::ECS::TaskDefinition')[migrationsTaskId()]!.Properties.ContainerDefinitions[0];
    expect(container.Command).toEqual([...CONTAINER.command, 'migrate']);
    const secrets = Object.fromEntries(container.Secrets.map((x: { Name: string; ValueFrom: unknown }) => [x.Name, JSON.stringify(x.ValueFrom)]));
    expect(Object.keys(secrets)).toEqual(expect.arrayContaining(['DB_HOST', 'DB_USER', 'DB_PASSWORD']));
    expect(secrets.DB_PASSWORD).toMatch(/DatabaseInstanceSecret/);
  });

  it('runs that task definition\'s revision from a custom resource, with a Node.js 22+ handler', () => {
    const [run] = Object.values(s.template.findResources('Custom::Migrations')) as { Properties: Record<string, any> }[];
    expect(run!.Properties.TaskDefinition).toEqual({ Ref: migrationsTaskId() });
    expect(run!.Properties.ContainerName).toBe(CONTAINER.name);
    const runtimes = Object.entries(byId('AWS::Lambda::Function'))
      .filter(([id]) => /^Migrations(Start|Check)/.test(id)).map(([, f]) => f.Properties.Runtime as string);
    expect(runtimes).toHaveLength(2);
    for (const r of runtimes) expect(Number(/^nodejs(\d+)/.exec(r)![1])).toBeGreaterThanOrEqual(22);
  });

  it('updates the API service only after the migrations, and the API tasks no longer migrate at start-up', () => {
    const [runId] = Object.keys(s.template.findResources('Custom::Migrations'));
    const [service] = Object.values(s.template.findResources('AWS::ECS::Service')) as { DependsOn?: string[] }[];
    expect(service!.DependsOn).toContain(runId);
    const api = Object.entries(byId('AWS::ECS::TaskDefinition')).find(([id]) => id.startsWith('Api'))![1];
    expect(api.Properties.ContainerDefinitions[0].Environment).toContainEqual({ Name: 'MIGRATE_ON_START', Value: 'false' });
  });

  it('registers each job\'s new revision only after the migrations', () => {
    const [runId] = Object.keys(s.template.findResources('Custom::Migrations'));
    const nested = Object.values(s.template.findResources('AWS::CloudFormation::Stack')) as { DependsOn?: string[] }[];
    expect(nested.length).toBeGreaterThan(0);
    for (const n of nested) expect(n.DependsOn).toContain(runId);
  });

  it('waits for the task at most MIGRATION_DEFAULTS.timeoutMinutes, polling every pollSeconds', () => {
    const [waiter] = Object.values(byId('AWS::StepFunctions::StateMachine')).filter((m) => JSON.stringify(m.Properties.DefinitionString).includes('framework-isComplete') || JSON.stringify(m.Properties.DefinitionString).includes('IntervalSeconds'));
    const definition = JSON.stringify(waiter!.Properties.DefinitionString);
    expect(definition).toContain(`\\"IntervalSeconds\\":${MIGRATION_DEFAULTS.pollSeconds}`);
    expect(definition).toContain(`\\"MaxAttempts\\":${(MIGRATION_DEFAULTS.timeoutMinutes * 60) / MIGRATION_DEFAULTS.pollSeconds}`);
  });

  it('gives the handler a deadline two polls before the waiter\'s, and lets it stop the task in this cluster only', () => {
    const [start] = Object.entries(byId('AWS::Lambda::Function')).filter(([id]) => id.startsWith('MigrationsStart')).map(([, f]) => f);
    expect(start!.Properties.Environment.Variables[DEADLINE_ENV]).toBe(String(MIGRATION_DEFAULTS.timeoutMinutes * 60 - 2 * MIGRATION_DEFAULTS.pollSeconds));
    const statements = Object.entries(byId('AWS::IAM::Policy'))
      .filter(([id]) => /^Migrations(Start|Check)/.test(id))
      .flatMap(([, p]) => p.Properties.PolicyDocument.Statement as { Sid: string; Action: string | string[]; Condition?: Record<string, any> }[]);
    const stops = statements.filter((st) => st.Sid === 'StopTheMigrationsTask');
    expect(stops).toHaveLength(2);
    const lists = statements.filter((st) => st.Sid === 'FindRunningMigrationsTasks');
    expect(lists).toHaveLength(1);
    for (const st of [...stops, ...lists]) expect(Object.keys(st.Condition!.ArnEquals)).toEqual(['ecs:cluster']);
  });
});

const CLUSTER = 'arn:aws:ecs:us-east-1:123456789012:cluster/backend';
const TASK_DEFINITION = 'arn:aws:ecs:us-east-1:123456789012:task-definition/backend-migrations:7';
const STACK_ID = 'arn:aws:cloudformation:us-east-1:123456789012:stack/EcsSaasBackend/1';
const TASK_ARN = 'arn:aws:ecs:us-east-1:123456789012:task/backend/0123456789abcdef';

function event(requestType: MigrationEvent['RequestType'], extra: Partial<MigrationEvent> = {}): MigrationEvent {
  return {
    RequestType: requestType,
    StackId: STACK_ID,
    RequestId: 'req-1',
    ResourceProperties: { Cluster: CLUSTER, TaskDefinition: TASK_DEFINITION, ContainerName: CONTAINER.name, Subnets: ['subnet-a', 'subnet-b'], SecurityGroups: ['sg-1'] },
    ...extra,
  };
}

describe('the custom resource\'s handler, against a local ECS endpoint', () => {
  /** What the local ECS answers: the task's status and exit code per DescribeTasks call, or a RunTask failure. */
  let script: { describes: { lastStatus: string; exitCode?: number; stoppedReason?: string }[]; runTaskFailure?: string } = { describes: [] };
  /** The migrations tasks the local ECS lists as not yet stopped. */
  let running: string[] = [];
  let ecs: FakeService;
  let cfn: FakeService;
  let stackStatus = 'UPDATE_IN_PROGRESS';
  const saved = { ...process.env };

  beforeAll(async () => {
    ecs = await startFakeJsonService('AmazonEC2ContainerServiceV20141113', '1.1', {
      RunTask: (body) => {
        if (script.runTaskFailure) return { tasks: [], failures: [{ arn: body.taskDefinition, reason: script.runTaskFailure }] };
        return { tasks: [{ taskArn: TASK_ARN, lastStatus: 'PROVISIONING', taskDefinitionArn: body.taskDefinition }], failures: [] };
      },
      ListTasks: (body) => ({ taskArns: body.startedBy === STARTED_BY && body.desiredStatus === 'RUNNING' ? running : [] }),
      StopTask: (body) => {
        running = running.filter((t) => t !== body.task);
        return { task: { taskArn: body.task, lastStatus: 'RUNNING', desiredStatus: 'STOPPED', stoppedReason: body.reason } };
      },
      DescribeTasks: (body) => {
        if (body.tasks[0] !== TASK_ARN) throw new AwsError('InvalidParameterException', 'unknown task');
        const next = script.describes.shift() ?? { lastStatus: 'RUNNING' };
        return {
          tasks: [{
            taskArn: TASK_ARN,
            lastStatus: next.lastStatus,
            ...(next.lastStatus === 'STOPPED' ? { stopCode: 'EssentialContainerExited', stoppedReason: next.stoppedReason ?? 'Essential container in task exited' } : {}),
            containers: [{ name: CONTAINER.name, ...(next.exitCode === undefined ? {} : { exitCode: next.exitCode }) }],
          }],
          failures: [],
        };
      },
    });
    // A stand-in whose status each test sets: DescribeStacks is how the handler tells a rollback apart.
    cfn = await startFakeCloudFormation({ [STACK_ID]: {} }, () => stackStatus);
    Object.assign(process.env, awsEnv({ cloudformation: cfn.url }), { AWS_ENDPOINT_URL_ECS: ecs.url, [DEADLINE_ENV]: '600' });
  });
  afterAll(async () => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    await Promise.all([ecs.close(), cfn.close()]);
  });

  /** onEvent, then isComplete until it answers true: what the Provider framework does. */
  async function deploy(e: MigrationEvent): Promise<{ polls: number }> {
    const started = await onEvent(e);
    let polls = 0;
    for (;;) {
      polls += 1;
      const done = await isComplete({ ...e, ...started });
      if (done.IsComplete) return { polls };
      expect(polls).toBeLessThan(20);
    }
  }

  it('runs the new revision once and completes when its container exits 0', async () => {
    ecs.requests.length = 0;
    script = { describes: [{ lastStatus: 'PROVISIONING' }, { lastStatus: 'RUNNING' }, { lastStatus: 'STOPPED', exitCode: 0 }] };
    expect(await deploy(event('Create'))).toEqual({ polls: 3 });
    const runs = ecs.requests.filter((r) => r.operation === 'RunTask');
    expect(runs).toHaveLength(1);
    expect(runs[0]!.body).toMatchObject({
      cluster: CLUSTER,
      taskDefinition: TASK_DEFINITION,
      launchType: 'FARGATE',
      startedBy: STARTED_BY,
      networkConfiguration: { awsvpcConfiguration: { subnets: ['subnet-a', 'subnet-b'], securityGroups: ['sg-1'], assignPublicIp: 'DISABLED' } },
    });
    expect(runs[0]!.authorization).toMatch(/^AWS4-HMAC-SHA256 /);
  });

  it('fails the deploy, naming the exit code and the log stream, when the migration exits 1', async () => {
    script = { describes: [{ lastStatus: 'RUNNING' }, { lastStatus: 'STOPPED', exitCode: 1 }] };
    await expect(deploy(event('Update', { PhysicalResourceId: 'migrations-req-0' }))).rejects.toThrow(
      /migrations task .*0123456789abcdef failed \(exit code 1, EssentialContainerExited: Essential container in task exited\); the deploy rolls back and the old release keeps serving\. Its log stream is migrate\/app\/0123456789abcdef/,
    );
  });

  it('fails the deploy when the task stopped before its container ran (no exit code)', async () => {
    script = { describes: [{ lastStatus: 'STOPPED', stoppedReason: 'CannotPullContainerError: pull access denied' }] };
    await expect(deploy(event('Update', { PhysicalResourceId: 'migrations-req-0' }))).rejects.toThrow(/exit code none, .*CannotPullContainerError/);
  });

  it('fails the deploy when RunTask refuses to start the task', async () => {
    script = { describes: [], runTaskFailure: 'RESOURCE:MEMORY' };
    await expect(deploy(event('Create'))).rejects.toThrow(/did not start: .*backend-migrations:7: RESOURCE:MEMORY/);
  });

  it('runs nothing on the Update a rollback sends, nor on Delete', async () => {
    ecs.requests.length = 0;
    stackStatus = 'UPDATE_ROLLBACK_IN_PROGRESS';
    try {
      expect(await deploy(event('Update', { PhysicalResourceId: 'migrations-req-0' }))).toEqual({ polls: 1 });
    } finally {
      stackStatus = 'UPDATE_IN_PROGRESS';
    }
    expect(await deploy(event('Delete', { PhysicalResourceId: 'migrations-req-0' }))).toEqual({ polls: 1 });
    expect(ecs.requests.map((r) => r.operation)).not.toContain('RunTask');
  });

  it('stops a migrations task still running when the stack rolls back, and on Delete', async () => {
    for (const [requestType, status] of [['Update', 'UPDATE_ROLLBACK_IN_PROGRESS'], ['Delete', 'ROLLBACK_IN_PROGRESS']] as const) {
      ecs.requests.length = 0;
      running = [TASK_ARN];
      stackStatus = status;
      try {
        await onEvent(event(requestType, { PhysicalResourceId: 'migrations-req-0' }));
      } finally {
        stackStatus = 'UPDATE_IN_PROGRESS';
      }
      expect(running, requestType).toEqual([]);
      const stops = ecs.requests.filter((r) => r.operation === 'StopTask');
      expect(stops.map((r) => r.body), requestType).toEqual([{ cluster: CLUSTER, task: TASK_ARN, reason: expect.stringMatching(/stopped by the deploy/) }]);
    }
  });

  it('stops the task and fails the deploy when it is still running at its deadline', async () => {
    ecs.requests.length = 0;
    script = { describes: [{ lastStatus: 'RUNNING' }, { lastStatus: 'RUNNING' }] };
    const started = await onEvent(event('Create'));
    expect(Date.parse(started.Deadline!) - Date.now()).toBeGreaterThan(500_000);
    expect(await isComplete({ ...event('Create'), ...started })).toEqual({ IsComplete: false });
    // The same task, its deadline passed.
    const late = { ...event('Create'), ...started, Deadline: new Date(Date.now() - 1000).toISOString() };
    await expect(isComplete(late)).rejects.toThrow(/0123456789abcdef was still running at its deadline, .*; it is stopped .*the deploy rolls back/);
    const stops = ecs.requests.filter((r) => r.operation === 'StopTask');
    expect(stops.map((r) => r.body)).toEqual([{ cluster: CLUSTER, task: TASK_ARN, reason: expect.stringMatching(/gave up on the migrations/) }]);
  });
});
