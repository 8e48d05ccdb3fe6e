// @ts-check
/**
 * The migrations custom resource's Lambda code (the construct is lib/constructs/migrations.ts):
 * a deploy runs the NEW image's `migrate` command as a one-off Fargate task, and the stack
 * goes on (the API service's update among it) only once that task stopped with exit 0.
 *
 * The CDK Provider framework calls `onEvent` once, then `isComplete` every query interval
 * until it answers `IsComplete: true` or throws; a throw fails the resource, so the deploy
 * rolls back and the service still runs the old release. Plain JavaScript on purpose: the
 * Lambda runtime runs the file as it is (the AWS SDK v3 is part of the Node.js runtime), so
 * synth needs no bundler, and the tests import this same file.
 */
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { DescribeTasksCommand, ECSClient, ListTasksCommand, RunTaskCommand, StopTaskCommand } from '@aws-sdk/client-ecs';

/** Marks the tasks this resource starts, for `aws ecs list-tasks --started-by` in the runbook and for the stop on rollback. */
export const STARTED_BY = 'cfn-migrations';

/**
 * The environment variable holding how long a migrations task may run, in seconds. The construct
 * sets it below the Provider framework's own timeout, so the handler, not the framework, gives
 * up first and can stop the task: the framework's timeout fails the resource without a word to
 * ECS, and the task would run on and could commit after the stack rolled back.
 */
export const DEADLINE_ENV = 'MIGRATIONS_DEADLINE_SECONDS';

/**
 * @typedef {{ Cluster: string, TaskDefinition: string, ContainerName: string, Subnets: string[], SecurityGroups: string[] }} Properties
 * @typedef {{ RequestType: 'Create' | 'Update' | 'Delete', StackId: string, RequestId: string, PhysicalResourceId?: string, ResourceProperties: Properties, TaskArn?: string, Deadline?: string }} MigrationEvent
 */

/**
 * Starts the migrations task of the template's task definition (a Create or an Update). On
 * Delete (which a failed first deploy's rollback sends too) and on the Update a rollback sends,
 * it starts nothing and stops any migrations task still running, so none commits after the
 * rollback: the old release runs on the schema the new one migrated to, which expand and
 * contract keeps compatible (docs/operations.md), but not on a migration half-way.
 * @param {MigrationEvent} event
 */
export async function onEvent(event) {
  const physicalId = event.PhysicalResourceId ?? `migrations-${event.RequestId}`;
  if (event.RequestType === 'Delete') {
    await stopRunningMigrations(event.ResourceProperties.Cluster, 'the migrations resource is being deleted');
    return { PhysicalResourceId: physicalId };
  }
  if (event.RequestType === 'Update' && await isRollingBack(event.StackId)) {
    console.log('the stack is rolling back: the migrations are not run again');
    await stopRunningMigrations(event.ResourceProperties.Cluster, 'the stack is rolling back');
    return { PhysicalResourceId: physicalId };
  }
  const p = event.ResourceProperties;
  const ecs = new ECSClient({});
  try {
    const out = await ecs.send(new RunTaskCommand({
      cluster: p.Cluster,
      taskDefinition: p.TaskDefinition,
      launchType: 'FARGATE',
      count: 1,
      startedBy: STARTED_BY,
      networkConfiguration: { awsvpcConfiguration: { subnets: p.Subnets, securityGroups: p.SecurityGroups, assignPublicIp: 'DISABLED' } },
    }));
    const task = out.tasks?.[0];
    if (!task?.taskArn) {
      const why = (out.failures ?? []).map((f) => `${f.arn ?? p.TaskDefinition}: ${f.reason}${f.detail ? ` (${f.detail})` : ''}`).join('; ');
      throw new Error(`the migrations task did not start: ${why || 'RunTask returned no task'}`);
    }
    console.log(`started the migrations task ${task.taskArn} of ${p.TaskDefinition}`);
    const deadline = new Date(Date.now() + deadlineSeconds() * 1000).toISOString();
    return { PhysicalResourceId: physicalId, TaskArn: task.taskArn, Deadline: deadline, Data: { TaskArn: task.taskArn } };
  } finally {
    ecs.destroy();
  }
}

/**
 * Done when the task stopped and its container exited 0; a throw (any other exit, a task
 * that stopped before its container ran, or one still running at its deadline, which is then
 * stopped) fails the deploy with the reason and the task's ARN.
 * @param {MigrationEvent} event
 */
export async function isComplete(event) {
  if (!event.TaskArn) return { IsComplete: true };
  const p = event.ResourceProperties;
  const ecs = new ECSClient({});
  try {
    const out = await ecs.send(new DescribeTasksCommand({ cluster: p.Cluster, tasks: [event.TaskArn] }));
    const task = out.tasks?.[0];
    if (!task) throw new Error(`the migrations task ${event.TaskArn} is not known to the cluster: ${JSON.stringify(out.failures ?? [])}`);
    if (task.lastStatus !== 'STOPPED') {
      if (!event.Deadline || Date.now() < Date.parse(event.Deadline)) return { IsComplete: false };
      const reason = `still running at its deadline, ${event.Deadline}`;
      await ecs.send(new StopTaskCommand({ cluster: p.Cluster, task: event.TaskArn, reason: `the deploy gave up on the migrations: ${reason}` }));
      throw new Error(`the migrations task ${event.TaskArn} was ${reason}; it is stopped (SIGTERM, so its transaction rolls back), the deploy rolls back and the old release keeps serving. Its log stream is migrate/${p.ContainerName}/${event.TaskArn.split('/').pop()}`);
    }
    const container = (task.containers ?? []).find((c) => c.name === p.ContainerName);
    const exitCode = container?.exitCode;
    if (exitCode === 0) {
      console.log(`the migrations task ${event.TaskArn} exited 0`);
      return { IsComplete: true };
    }
    const reason = [task.stopCode, task.stoppedReason, container?.reason].filter(Boolean).join(': ');
    throw new Error(`the migrations task ${event.TaskArn} failed (exit code ${exitCode ?? 'none'}${reason ? `, ${reason}` : ''}); the deploy rolls back and the old release keeps serving. Its log stream is migrate/${p.ContainerName}/${event.TaskArn.split('/').pop()}`);
  } finally {
    ecs.destroy();
  }
}

/** The handler's deadline for a migrations task, from DEADLINE_ENV. */
function deadlineSeconds() {
  const seconds = Number(process.env[DEADLINE_ENV]);
  if (!Number.isFinite(seconds) || seconds < 0) throw new Error(`${DEADLINE_ENV} must be a number of seconds, got ${JSON.stringify(process.env[DEADLINE_ENV])}`);
  return seconds;
}

/**
 * Stops every migrations task of the cluster that has not stopped yet (those this resource
 * started, by their startedBy).
 * @param {string} cluster
 * @param {string} why
 */
async function stopRunningMigrations(cluster, why) {
  const ecs = new ECSClient({});
  try {
    const listed = await ecs.send(new ListTasksCommand({ cluster, startedBy: STARTED_BY, desiredStatus: 'RUNNING' }));
    for (const task of listed.taskArns ?? []) {
      console.log(`stopping the migrations task ${task}: ${why}`);
      await ecs.send(new StopTaskCommand({ cluster, task, reason: `stopped by the deploy: ${why}` }));
    }
  } finally {
    ecs.destroy();
  }
}

/**
 * A rollback's Update carries the previous properties; the stack's status tells it apart.
 * @param {string} stackId
 */
async function isRollingBack(stackId) {
  const cfn = new CloudFormationClient({});
  try {
    const out = await cfn.send(new DescribeStacksCommand({ StackName: stackId }));
    return /ROLLBACK/.test(out.Stacks?.[0]?.StackStatus ?? '');
  } finally {
    cfn.destroy();
  }
}
