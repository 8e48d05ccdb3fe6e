/**
 * The scheduled jobs: for every enabled row of the jobs table, a Fargate task definition
 * and one EventBridge rule that runs it, with a retry policy and a dead-letter queue.
 *
 * Each job lives under a construct named after it, so adding, removing or disabling one job
 * never changes another job's logical ids.
 */
import { Duration, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { addAppTask, type AppRuntime } from './app-task.js';
import { nagText } from './nag.js';
import { CONTAINER, JOB_DEFAULTS, LIMITS } from './defaults.js';
import { JOBS, validateJobs, type JobDefinition } from './jobs.js';
import { missedRunProblems } from './missed-run.js';
import { parseSchedule, shortestIntervalMs } from './schedule.js';
import { InvalidSettingsError, Problems } from './validation.js';

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
  /** EventBridge retries of a failed RunTask. @default 3 */
  readonly retryAttempts?: number;
  /** The current time, for validating schedules. @default - now */
  readonly now?: Date;
  /** DB_POOL_MAX of each job task, from the connection budget (lib/pool-budget.ts). @default - the container's default */
  readonly dbPoolMax?: number;
}

/** One enabled job's resources. */
export interface ScheduledJob {
  readonly job: JobDefinition;
  readonly taskDefinition: ecs.FargateTaskDefinition;
  readonly container: ecs.ContainerDefinition;
  /** The rule that starts the task on the job's schedule. */
  readonly rule: events.Rule;
  /** Schedule events EventBridge could not deliver (RunTask failed after the retries). */
  readonly deadLetterQueue: sqs.Queue;
  /** The job's task role: publish to the alert topic, plus uploads to the export bucket when the job uses it. */
  readonly taskRole: iam.IRole;
}

/** The rule name and task family of a job: `<prefix>-<job>`. */
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
  /** The role EventBridge starts every job's task with. */
  public readonly eventsRole: iam.Role;
  /** Prefix of the rule names and task families, `<prefix>-<job>`. */
  public readonly namePrefix: string;

  constructor(scope: Construct, id: string, props: ScheduledJobsProps) {
    const jobs = props.jobs ?? JOBS;
    const namePrefix = props.namePrefix ?? Stack.of(scope).stackName;
    const problems = new Problems();
    problems.seconds('job stopTimeout', props.stopTimeout, LIMITS.stopTimeoutSeconds);
    problems.whole('retryAttempts', props.retryAttempts, 0, 185);
    problems.list.push(...validateScheduledJobs(jobs, { namePrefix, hasExportBucket: props.exportBucket !== undefined, now: props.now }));
    if (problems.list.length > 0) throw new InvalidSettingsError('The jobs table (lib/jobs.ts)', problems.list);
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
      description: 'Pulls the image, writes logs and reads the database secret for every scheduled job',
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
    this.eventsRole = new iam.Role(this, 'EventsRole', {
      assumedBy: new iam.ServicePrincipal('events.amazonaws.com'),
      description: 'EventBridge runs the scheduled jobs\' tasks',
    });
    // EcsTask grants RunTask on each task definition (in this cluster) and PassRole on its
    // roles; it also grants tagging of the tasks it starts, whose ARNs exist only once they run.
    Validations.of(this.eventsRole).acknowledge({
      id: `AwsSolutions-IAM5[Resource::${nagText(this, `arn:${Stack.of(this).partition}:ecs:${Stack.of(this).region}:*:task/${cluster.clusterName}/*`)}]`,
      reason: 'EventBridge tags the task it starts (propagateTags); a task\'s ARN exists only once it runs, so the grant covers the tasks of this one cluster.',
    });

    const stopTimeout = props.stopTimeout ?? Duration.seconds(JOB_DEFAULTS.stopTimeoutSeconds);
    const byName = new Map<string, ScheduledJob>();
    for (const job of enabled) {
      byName.set(job.name, this.addJob(job, props, { namePrefix, stopTimeout }));
    }
    this.jobs = byName;
  }

  private addJob(job: JobDefinition, props: ScheduledJobsProps, shared: { namePrefix: string; stopTimeout: Duration }): ScheduledJob {
    const scope = new Construct(this, job.name);
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

    const deadLetterQueue = new sqs.Queue(scope, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(JOB_DEFAULTS.deadLetterRetentionDays),
    });
    Validations.of(deadLetterQueue).acknowledge({
      id: 'AwsSolutions-SQS3',
      reason: 'This queue is itself the dead-letter queue of the job\'s EventBridge target; its messages are read by a human (see the runbook), never re-driven automatically.',
    });

    // A retried event older than the schedule's gap would start a run that overlaps the next one.
    const gapSeconds = shortestIntervalMs(parseSchedule(job.schedule), props.now) / 1_000;
    const maxEventAgeSeconds = Math.max(LIMITS.maxEventAgeSeconds.min, Math.min(JOB_DEFAULTS.maxEventAgeSeconds, gapSeconds, LIMITS.maxEventAgeSeconds.max));

    const rule = new events.Rule(scope, 'Rule', {
      ruleName: name,
      description: `${job.name}: ${job.description}`.slice(0, 512),
      schedule: events.Schedule.expression(job.schedule),
    });
    rule.addTarget(new targets.EcsTask({
      cluster: props.cluster,
      taskDefinition,
      taskCount: 1,
      subnetSelection: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      assignPublicIp: false,
      securityGroups: [this.securityGroup],
      platformVersion: ecs.FargatePlatformVersion.LATEST,
      propagateTags: ecs.PropagatedTagSource.TASK_DEFINITION,
      containerOverrides: [{
        containerName: CONTAINER.name,
        // The time the schedule fired, not the time the task started: a retried run still knows which run it is.
        environment: [{ name: 'SCHEDULED_TIME', value: events.EventField.time }],
      }],
      role: this.eventsRole,
      retryAttempts: props.retryAttempts ?? JOB_DEFAULTS.retryAttempts,
      maxEventAge: Duration.seconds(maxEventAgeSeconds),
      deadLetterQueue,
    }));
    if (job.spot) useFargateSpot(rule);

    return { job, taskDefinition, container, rule, deadLetterQueue, taskRole };
  }
}

/**
 * Runs the rule's ECS target on Fargate Spot. `events_targets.EcsTask` has no capacity
 * provider option, so this edits the rendered target: a capacity provider strategy replaces
 * the launch type (RunTask accepts one or the other, never both).
 */
export function useFargateSpot(rule: events.Rule, targetIndex = 0): void {
  const cfnRule = rule.node.defaultChild as events.CfnRule;
  cfnRule.addPropertyDeletionOverride(`Targets.${targetIndex}.EcsParameters.LaunchType`);
  cfnRule.addPropertyOverride(`Targets.${targetIndex}.EcsParameters.CapacityProviderStrategy`, [
    { CapacityProvider: 'FARGATE_SPOT', Weight: 1 },
  ]);
}

/**
 * sns:Publish on the topic and, for an encrypted topic, the two key actions SNS needs.
 * (topic.grantPublish would grant kms:GenerateDataKey*, a wildcard.)
 */
export function grantPublish(topic: sns.ITopic, grantee: iam.IGrantable): void {
  iam.Grant.addToPrincipal({ grantee, actions: ['sns:Publish'], resourceArns: [topic.topicArn] });
  topic.masterKey?.grant(grantee, 'kms:Decrypt', 'kms:GenerateDataKey');
}
