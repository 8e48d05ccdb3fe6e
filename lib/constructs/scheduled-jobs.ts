/**
 * The scheduled jobs: for every enabled row of the jobs table, a Fargate task definition, a
 * Step Functions state machine that runs it until it finishes (lib/constructs/job-state-machine.ts), and
 * what starts an execution on the job's schedule, with a retry policy and a dead-letter queue:
 * an EventBridge rule, or for a job with a time zone an EventBridge Scheduler schedule
 * (lib/constructs/job-starter.ts).
 *
 * Each job's resources live in a nested stack of their own, named after the job: a stack holds
 * at most 500 resources, and a job brings about ten. Adding, removing or disabling one job adds
 * or removes one nested stack and never touches another job's logical ids. What the jobs share
 * (roles, the security group, the execution log group) stays in the parent stack, so that it is
 * made once, and the nested stacks receive it as parameters.
 */
import { Aws, Duration, Fn, NestedStack, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as events from 'aws-cdk-lib/aws-events';
import type * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { addAppTask, type AppRuntime } from './app-task.js';
import { nagText } from './nag.js';
import { CONTAINER, JOB_DEFAULTS, LIMITS, OBSERVABILITY_DEFAULTS } from '../defaults.js';
import { RUNBOOK, TASK_START_ALLOWANCE_SECONDS } from '../job-flow.js';
import { jobStateMachineDefinition } from './job-state-machine.js';
import { addJobStarter, SCHEDULE_DLQ_SUFFIX, startsBySchedule } from './job-starter.js';
import { JOBS, scheduleOf, validateJobs, type JobDefinition } from '../jobs.js';
import { missedRunProblems } from './missed-run.js';
import { shortestIntervalMs } from '../schedule.js';
import { InvalidSettingsError, JOBS_TABLE, Problems } from './validation.js';

export interface ScheduledJobsProps {
  /** The cluster (and so the VPC) the jobs run in. */
  readonly cluster: ecs.ICluster;
  /** The image, log group, shared environment and database secrets. */
  readonly runtime: AppRuntime;
  /** Jobs page a human through this topic; their task roles may publish to it. */
  readonly alertTopic: sns.ITopic;
  /** The jobs table. @default JOBS from lib/jobs.ts */
  readonly jobs?: readonly JobDefinition[];
  /** Where jobs with `usesExportBucket` write. @default - none; required when an enabled job uses it */
  readonly exportBucket?: s3.IBucket;
  /** Prefix of the rule names and task families, `<prefix>-<job>`. @default - the stack name */
  readonly namePrefix?: string;
  /** SIGTERM to SIGKILL for a job's container. @default Duration.seconds(120) */
  readonly stopTimeout?: Duration;
  /** EventBridge retries of a failed StartExecution. @default 3 */
  readonly retryAttempts?: number;
  /** Time a job's task may take to start before its runner counts its timeout; part of the backstop (0 to twice the default). @default Duration.seconds(300) */
  readonly taskStartAllowance?: Duration;
  /** Retention of the state machines' execution logs. @default 30 days */
  readonly executionLogRetention?: logs.RetentionDays;
  /** Encrypts the execution logs (the tasks' log key, so one key policy covers every log group). @default - CloudWatch Logs' own encryption */
  readonly executionLogKey?: kms.IKey;
  /** What deleting the stack does to the execution logs. @default RemovalPolicy.RETAIN */
  readonly executionLogRemovalPolicy?: RemovalPolicy;
  /** The current time, for validating schedules. @default - now */
  readonly now?: Date;
  /** DB_POOL_MAX of each job task, from the connection budget (lib/pool-budget.ts). @default - the container's default */
  readonly dbPoolMax?: number;
}

/** One enabled job's resources. */
export interface ScheduledJob {
  readonly job: JobDefinition;
  /** The nested stack that holds the job's resources (and its alarms). */
  readonly stack: NestedStack;
  readonly taskDefinition: ecs.FargateTaskDefinition;
  readonly container: ecs.ContainerDefinition;
  /** Runs the task until it finishes, retries what is safe to retry, alerts once. */
  readonly stateMachine: sfn.StateMachine;
  /** The rule that starts an execution on the job's schedule; undefined for a job with a time zone. */
  readonly rule: events.Rule | undefined;
  /** The Scheduler schedule that does so for a job with a time zone, and its own group (its metrics' dimension). */
  readonly schedule: { readonly schedule: scheduler.CfnSchedule; readonly group: scheduler.CfnScheduleGroup } | undefined;
  /** Schedule events EventBridge could not deliver (StartExecution failed after the retries). */
  readonly deadLetterQueue: sqs.Queue;
  /** The job's task role: publish to the alert topic, plus uploads to the export bucket when the job uses it. */
  readonly taskRole: iam.IRole;
}

/** The rule name, task family and state machine name of a job: `<prefix>-<job>`. */
export function jobResourceName(prefix: string, job: Pick<JobDefinition, 'name'>): string {
  return `${prefix}-${job.name}`;
}

/**
 * Every problem with the jobs table, and with running it here: the table's own checks
 * (lib/jobs.ts validateJobs) plus those of the infrastructure, reported together.
 */
export function validateScheduledJobs(
  jobs: readonly JobDefinition[],
  options: { readonly namePrefix: string; readonly hasExportBucket: boolean; readonly now?: Date },
): string[] {
  const problems = [...validateJobs(jobs, options.now), ...missedRunProblems(jobs, options.now)];
  for (const job of jobs) {
    const where = `job ${JSON.stringify(job.name)}`;
    const ruleName = jobResourceName(options.namePrefix, job);
    if (ruleName.length > LIMITS.ruleNameLength) {
      problems.push(`${where}: name makes the rule name ${JSON.stringify(ruleName)} ${ruleName.length} characters long; EventBridge allows ${LIMITS.ruleNameLength} (shorten the job or the stack name)`);
    }
    if (job.enabled && job.usesExportBucket && !options.hasExportBucket) {
      problems.push(`${where}: usesExportBucket is true but the stack has no export bucket`);
    }
  }
  return problems;
}

export class ScheduledJobs extends Construct {
  /** The enabled jobs' resources, by job name. */
  public readonly jobs: ReadonlyMap<string, ScheduledJob>;
  /** The job tasks' security group: no inbound traffic; the database admits it. */
  public readonly securityGroup: ec2.SecurityGroup;
  /** The execution role every job's task definition shares (image pull, logs, database secret). */
  public readonly executionRole: iam.Role;
  /** The task role of the jobs: publish to the alert topic, nothing else. */
  public readonly taskRole: iam.Role;
  /** The task role of the jobs with `usesExportBucket`: the same, plus uploads to the export bucket; undefined without such a job. */
  public readonly exportTaskRole: iam.Role | undefined;
  /** The role EventBridge starts every job's execution with. */
  public readonly eventsRole: iam.Role;
  /** The role EventBridge Scheduler starts the zoned jobs' executions with; undefined without such a job. */
  public readonly schedulerRole: iam.Role | undefined;
  /** The one role of every job's state machine: run the job tasks, pass their roles, publish the alert. */
  public readonly stateMachineRole: iam.Role;
  /** Where every job's state machine logs its executions. */
  public readonly executionLogGroup: logs.LogGroup;
  /** Prefix of the rule names and task families, `<prefix>-<job>`. */
  public readonly namePrefix: string;

  constructor(scope: Construct, id: string, props: ScheduledJobsProps) {
    const jobs: readonly JobDefinition[] = props.jobs ?? JOBS;
    const namePrefix = props.namePrefix ?? Stack.of(scope).stackName;
    const problems = new Problems();
    problems.seconds('job stopTimeout', props.stopTimeout, LIMITS.stopTimeoutSeconds);
    problems.whole('retryAttempts', props.retryAttempts, 0, 185);
    problems.seconds('taskStartAllowance', props.taskStartAllowance, { min: 0, max: TASK_START_ALLOWANCE_SECONDS * 2 });
    problems.list.push(...validateScheduledJobs(jobs, { namePrefix, hasExportBucket: props.exportBucket !== undefined, now: props.now }));
    if (problems.list.length > 0) throw new InvalidSettingsError(JOBS_TABLE, problems.list);
    super(scope, id);
    this.namePrefix = namePrefix;

    const { cluster } = props;
    this.securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: cluster.vpc,
      description: 'Scheduled job tasks: no inbound traffic',
      allowAllOutbound: true,
    });
    this.executionRole = new iam.Role(this, 'ExecutionRole', {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'Pulls the image, writes logs and reads the login role\'s database secret for every scheduled job',
    });

    // Roles are shared by jobs with the same needs rather than made per job: a stack holds at
    // most 500 resources, and per-job roles and policies would cost four of them per job.
    const tasks = new iam.ServicePrincipal('ecs-tasks.amazonaws.com');
    this.taskRole = new iam.Role(this, 'TaskRole', { assumedBy: tasks, description: 'Scheduled jobs: publish to the alert topic' });
    grantPublish(props.alertTopic, this.taskRole);
    const enabled = jobs.filter((j) => j.enabled);
    if (props.exportBucket && enabled.some((j) => j.usesExportBucket)) {
      this.exportTaskRole = new iam.Role(this, 'ExportTaskRole', { assumedBy: tasks, description: 'Scheduled jobs with usesExportBucket: publish alerts, upload exports' });
      grantPublish(props.alertTopic, this.exportTaskRole);
      // Uploads only (an export is one PutObject); grantPut would add legal holds, retention and tagging.
      const objects = props.exportBucket.arnForObjects('*');
      iam.Grant.addToPrincipal({ grantee: this.exportTaskRole, actions: ['s3:PutObject'], resourceArns: [objects] });
      Validations.of(this.exportTaskRole).acknowledge({
        id: `AwsSolutions-IAM5[Resource::${nagText(this, objects)}]`,
        reason: 'An export job writes one object per run under a key it derives from the run (e.g. the week); the grant covers objects of the export bucket only, and only uploads.',
      });
    } else {
      this.exportTaskRole = undefined;
    }
    const stack = Stack.of(this);
    const arn = (service: string, resource: string) => `arn:${stack.partition}:${service}:${stack.region}:${stack.account}:${resource}`;
    const acknowledgeResource = (role: iam.Role, resource: string, reason: string) =>
      Validations.of(role).acknowledge({ id: `AwsSolutions-IAM5[Resource::${nagText(this, resource)}]`, reason });

    this.eventsRole = new iam.Role(this, 'EventsRole', {
      assumedBy: new iam.ServicePrincipal('events.amazonaws.com'),
      description: 'EventBridge starts the scheduled jobs\' executions',
    });
    const stateMachines = arn('states', `stateMachine:${jobResourceName(namePrefix, { name: '' })}*`);
    this.eventsRole.addToPrincipalPolicy(new iam.PolicyStatement({ actions: ['states:StartExecution'], resources: [stateMachines] }));
    const stateMachinesReason = 'The state machines live in the jobs\' nested stacks; one pattern of their names (<stack>-<job>) stays the same size for 200 jobs, where their ARNs would pass IAM\'s policy size limit.';
    acknowledgeResource(this.eventsRole, stateMachines, stateMachinesReason);

    if (enabled.some(startsBySchedule)) {
      // Scheduler assumes the role for schedules of this account only (its guide, "Confused deputy prevention").
      this.schedulerRole = new iam.Role(this, 'SchedulerRole', {
        assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', { conditions: { StringEquals: { 'aws:SourceAccount': stack.account } } }),
        description: 'EventBridge Scheduler starts the executions of the scheduled jobs with a time zone',
      });
      this.schedulerRole.addToPrincipalPolicy(new iam.PolicyStatement({ actions: ['states:StartExecution'], resources: [stateMachines] }));
      // Unlike a rule's, a schedule's dead-letter queue is written with the schedule's role.
      const deadLetterQueues = arn('sqs', `${jobResourceName(namePrefix, { name: '' })}*${SCHEDULE_DLQ_SUFFIX}`);
      this.schedulerRole.addToPrincipalPolicy(new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [deadLetterQueues] }));
      acknowledgeResource(this.schedulerRole, stateMachines, stateMachinesReason);
      acknowledgeResource(this.schedulerRole, deadLetterQueues,
        'The zoned jobs\' dead-letter queues live in their nested stacks and are named <stack>-<job>-schedule-dlq; one pattern of those names, for the same reason as the state machines\'.');
    } else {
      this.schedulerRole = undefined;
    }

    this.executionLogGroup = new logs.LogGroup(this, 'ExecutionLogs', {
      // The vendedlogs prefix keeps the log group's resource policy, which Step Functions writes, short.
      // The suffix is the first part of the stack's id, new on every create: a stack torn down and
      // deployed again under the same name then does not meet the group it retained.
      logGroupName: Fn.join('', [`/aws/vendedlogs/states/${namePrefix}-jobs-`, stackIdPart()]),
      retention: props.executionLogRetention ?? (OBSERVABILITY_DEFAULTS.logRetentionDays as logs.RetentionDays),
      encryptionKey: props.executionLogKey,
      removalPolicy: props.executionLogRemovalPolicy,
    });

    this.stateMachineRole = new iam.Role(this, 'StateMachineRole', {
      assumedBy: new iam.ServicePrincipal('states.amazonaws.com'),
      description: 'Every scheduled job\'s state machine: runs the job tasks in this cluster, publishes their alerts',
    });
    const jobTaskDefinitions = arn('ecs', `task-definition/${jobResourceName(namePrefix, { name: '' })}*:*`);
    this.stateMachineRole.addToPrincipalPolicy(new iam.PolicyStatement({
      sid: 'RunTheJobTasksInThisCluster',
      actions: ['ecs:RunTask'],
      resources: [jobTaskDefinitions],
      conditions: { ArnEquals: { 'ecs:cluster': cluster.clusterArn } },
    }));
    this.stateMachineRole.addToPrincipalPolicy(new iam.PolicyStatement({
      sid: 'PassTheJobTaskRoles',
      actions: ['iam:PassRole'],
      resources: [this.executionRole, this.taskRole, ...(this.exportTaskRole ? [this.exportTaskRole] : [])].map((r) => r.roleArn),
    }));
    // What runTask.sync needs besides RunTask: it watches the task through a managed EventBridge
    // rule, describes the task, and stops it when the state times out or the execution is stopped.
    const clusterTasks = arn('ecs', `task/${cluster.clusterName}/*`);
    this.stateMachineRole.addToPrincipalPolicy(new iam.PolicyStatement({
      sid: 'WatchAndStopTheJobTasks',
      actions: ['ecs:StopTask', 'ecs:DescribeTasks'],
      resources: [clusterTasks],
    }));
    this.stateMachineRole.addToPrincipalPolicy(new iam.PolicyStatement({
      sid: 'ManagedRuleOfRunTaskSync',
      actions: ['events:PutTargets', 'events:PutRule', 'events:DescribeRule'],
      resources: [arn('events', 'rule/StepFunctionsGetEventsForECSTaskRule')],
    }));
    grantPublish(props.alertTopic, this.stateMachineRole);
    this.stateMachineRole.addToPrincipalPolicy(new iam.PolicyStatement({
      sid: 'ExecutionLogsAndTraces',
      actions: [
        'logs:CreateLogDelivery', 'logs:GetLogDelivery', 'logs:UpdateLogDelivery', 'logs:DeleteLogDelivery', 'logs:ListLogDeliveries',
        'logs:PutResourcePolicy', 'logs:DescribeResourcePolicies', 'logs:DescribeLogGroups',
        'xray:PutTraceSegments', 'xray:PutTelemetryRecords', 'xray:GetSamplingRules', 'xray:GetSamplingTargets',
      ],
      resources: ['*'],
    }));
    acknowledgeResource(this.stateMachineRole, jobTaskDefinitions,
      'RunTask on the job task definitions only (their families are <stack>-<job>), every revision (each deploy makes one), and only in this cluster (the ecs:cluster condition).');
    acknowledgeResource(this.stateMachineRole, clusterTasks,
      'runTask.sync describes and stops the task it started; a task\'s ARN exists only once it runs, so the grant covers the tasks of this one cluster.');
    acknowledgeResource(this.stateMachineRole, '*',
      'Log delivery (execution logging) and X-Ray actions accept no resource but "*" (see the Step Functions guide, "IAM policies for logging to CloudWatch Logs" and "X-Ray").');

    const stopTimeout = props.stopTimeout ?? Duration.seconds(JOB_DEFAULTS.stopTimeoutSeconds);
    const byName = new Map<string, ScheduledJob>();
    for (const job of enabled) {
      byName.set(job.name, this.addJob(job, props, {
        namePrefix,
        stopTimeout,
        startAllowance: props.taskStartAllowance ?? Duration.seconds(TASK_START_ALLOWANCE_SECONDS),
      }));
    }
    this.jobs = byName;
  }

  private addJob(job: JobDefinition, props: ScheduledJobsProps, shared: { namePrefix: string; stopTimeout: Duration; startAllowance: Duration }): ScheduledJob {
    const scope = new NestedStack(this, job.name, { description: `Scheduled job ${job.name}: its task definition, state machine, rule and alarms` });
    // The roles come in as ARNs, so CloudFormation would not wait for their policies: Step
    // Functions refuses a state machine whose role cannot yet deliver its logs.
    scope.nestedStackResource!.node.addDependency(this.stateMachineRole, this.eventsRole, ...(this.schedulerRole ? [this.schedulerRole] : []));
    const name = jobResourceName(shared.namePrefix, job);

    const taskRole = job.usesExportBucket && this.exportTaskRole ? this.exportTaskRole : this.taskRole;
    const { taskDefinition, container } = addAppTask(scope, {
      runtime: props.runtime,
      cpu: job.cpu,
      memoryMiB: job.memoryMiB,
      stopTimeout: shared.stopTimeout,
      family: name,
      executionRole: this.executionRole,
      taskRole,
      streamPrefix: `job-${job.name}`,
      // Every EMF line is a metric the alarms read; a dropped `Succeeded` would page a human.
      logMode: ecs.AwsLogDriverMode.BLOCKING,
      command: [...CONTAINER.command, job.name],
      environment: {
        ALERT_TOPIC_ARN: props.alertTopic.topicArn,
        ...(props.dbPoolMax === undefined ? {} : { DB_POOL_MAX: String(props.dbPoolMax) }),
        ...(job.usesExportBucket && props.exportBucket
          ? { EXPORT_BUCKET: props.exportBucket.bucketName, EXPORT_DIR: CONTAINER.exportDir }
          : {}),
      },
    });

    const stateMachine = new sfn.StateMachine(scope, 'StateMachine', {
      stateMachineName: name,
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromString(Stack.of(scope).toJsonString(jobStateMachineDefinition({
        job,
        clusterArn: props.cluster.clusterArn,
        taskDefinitionFamily: taskDefinition.family,
        subnetIds: props.cluster.vpc.selectSubnets({ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }).subnetIds,
        securityGroupIds: [this.securityGroup.securityGroupId],
        topicArn: props.alertTopic.topicArn,
        stopTimeoutSeconds: shared.stopTimeout.toSeconds(),
        startAllowanceSeconds: shared.startAllowance.toSeconds(),
        runbook: RUNBOOK.runFailed,
        stackName: shared.namePrefix,
      }))),
      // Shared and complete (the parent grants it); an imported role takes no per-job policies.
      role: iam.Role.fromRoleArn(scope, 'StateMachineRole', this.stateMachineRole.roleArn, { mutable: false }),
      logs: { destination: this.executionLogGroup, level: sfn.LogLevel.ALL, includeExecutionData: true },
      tracingEnabled: true,
    });

    const deadLetterQueue = new sqs.Queue(scope, 'DeadLetterQueue', {
      // A schedule's role's grant goes by the name. A rule's queue has the same one, so a job that
      // gains or loses a time zone keeps its queue and the messages in it (the name fits SQS's 80
      // characters whenever the rule's fits EventBridge's 64).
      queueName: `${name}${SCHEDULE_DLQ_SUFFIX}`,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(JOB_DEFAULTS.deadLetterRetentionDays),
    });
    Validations.of(deadLetterQueue).acknowledge({
      id: 'AwsSolutions-SQS3',
      reason: 'This queue is itself the dead-letter queue of the job\'s EventBridge target or schedule; its messages are read by a human (see the runbook), never re-driven automatically.',
    });

    // A retried event older than the schedule's gap would start a run that overlaps the next one.
    const gapSeconds = shortestIntervalMs(scheduleOf(job), props.now) / 1_000;
    const maxEventAgeSeconds = Math.max(LIMITS.maxEventAgeSeconds.min, Math.min(JOB_DEFAULTS.maxEventAgeSeconds, gapSeconds, LIMITS.maxEventAgeSeconds.max));

    const starter = addJobStarter(scope, {
      job,
      name,
      stateMachine,
      deadLetterQueue,
      retryAttempts: props.retryAttempts ?? JOB_DEFAULTS.retryAttempts,
      maxEventAge: Duration.seconds(maxEventAgeSeconds),
      eventsRoleArn: this.eventsRole.roleArn,
      schedulerRoleArn: this.schedulerRole?.roleArn,
    });
    const rule = starter.kind === 'rule' ? starter.rule : undefined;
    const schedule = starter.kind === 'schedule' ? { schedule: starter.schedule, group: starter.group } : undefined;

    return { job, stack: scope, taskDefinition, container, stateMachine, rule, schedule, deadLetterQueue, taskRole };
  }
}

/**
 * sns:Publish on the topic and, for an encrypted topic, the two key actions SNS needs.
 * (topic.grantPublish would grant kms:GenerateDataKey*, a wildcard.)
 */
export function grantPublish(topic: sns.ITopic, grantee: iam.IGrantable): void {
  iam.Grant.addToPrincipal({ grantee, actions: ['sns:Publish'], resourceArns: [topic.topicArn] });
  topic.masterKey?.grant(grantee, 'kms:Decrypt', 'kms:GenerateDataKey');
}

/** The first group of the stack id's UUID (8 hex digits), which CloudFormation makes anew for each stack it creates. */
function stackIdPart(): string {
  return Fn.select(0, Fn.split('-', Fn.select(2, Fn.split('/', Aws.STACK_ID))));
}
