/**
 * Migrations before traffic: each deploy runs the new image's `migrate` command once, as a
 * one-off Fargate task, and the API service (which depends on this construct) is updated only
 * after that task exited 0. A failed migration fails the resource, so CloudFormation rolls the
 * stack back before the service was touched, and the old release keeps serving.
 *
 * A CloudFormation custom resource whose properties include the migrations task definition's
 * ARN: a new image makes a new revision, so CloudFormation sends an Update and the handler
 * (lib/lambda/run-migrations.mjs) runs that revision's task and waits for it to stop.
 */
import { fileURLToPath } from 'node:url';
import { CustomResource, Duration, type RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as cr from 'aws-cdk-lib/custom-resources';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type * as kms from 'aws-cdk-lib/aws-kms';
import { Construct } from 'constructs';
import { addAppTask, type AppRuntime } from './app-task.js';
import { nagText } from './nag.js';
import { CONTAINER, MIGRATION_DEFAULTS } from '../defaults.js';
import { DEADLINE_ENV } from '../lambda/run-migrations.mjs';

/** The handler's folder: only its own file goes into the Lambda's code asset. */
const HANDLER_DIR = fileURLToPath(new URL('../lambda', import.meta.url));

export interface MigrationsProps {
  /** The cluster the task runs in (its VPC's private subnets). */
  readonly cluster: ecs.ICluster;
  /** The image, log group and shared environment. */
  readonly runtime: AppRuntime;
  /** Environment on top of the shared one. @default - only the shared environment */
  readonly environment?: Readonly<Record<string, string>>;
  /** Secrets on top of the runtime's: the master user's credentials, and the login role's to create it. @default - only the runtime's */
  readonly secrets?: Readonly<Record<string, ecs.Secret>>;
  /** Longest a deploy waits for the migrations task; then the deploy fails. @default Duration.minutes(30) */
  readonly timeout?: Duration;
  /** Retention of the handlers' and the waiter's own logs. @default logs.RetentionDays.ONE_MONTH */
  readonly logRetention?: logs.RetentionDays;
  /** Encrypts those logs. @default - CloudWatch Logs' own encryption */
  readonly logKey?: kms.IKey;
  /** What a stack deletion does with those logs. @default RemovalPolicy.RETAIN */
  readonly logRemovalPolicy?: RemovalPolicy;
}

export class Migrations extends Construct {
  /** The `migrate` task definition: the same image and settings as the API's tasks. */
  public readonly taskDefinition: ecs.FargateTaskDefinition;
  /** The migrations task's security group; the stack lets it reach the database. */
  public readonly securityGroup: ec2.SecurityGroup;
  /** The custom resource: whatever must wait for the migrations depends on it. */
  public readonly resource: CustomResource;

  constructor(scope: Construct, id: string, props: MigrationsProps) {
    super(scope, id);
    const cluster = props.cluster;

    const task = addAppTask(this, {
      runtime: props.runtime,
      cpu: MIGRATION_DEFAULTS.cpu,
      memoryMiB: MIGRATION_DEFAULTS.memoryMiB,
      stopTimeout: Duration.seconds(MIGRATION_DEFAULTS.stopTimeoutSeconds),
      streamPrefix: MIGRATION_DEFAULTS.streamPrefix,
      logMode: ecs.AwsLogDriverMode.BLOCKING,
      command: [...CONTAINER.command, 'migrate'],
      environment: props.environment,
      secrets: props.secrets,
    });
    this.taskDefinition = task.taskDefinition;

    this.securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: cluster.vpc,
      description: 'The migrations task: out to the database (and the image and secrets), nothing in',
      allowAllOutbound: true,
    });

    const logGroup = new logs.LogGroup(this, 'HandlerLogs', { retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH, encryptionKey: props.logKey, removalPolicy: props.logRemovalPolicy });
    const code = lambda.Code.fromAsset(HANDLER_DIR);
    const handler = (handlerId: string, entry: string, description: string, environment?: Record<string, string>) => new lambda.Function(this, handlerId, {
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      code,
      handler: `run-migrations.${entry}`,
      description,
      // Each call is one ECS API request; the waiting happens between calls.
      timeout: Duration.minutes(1),
      logGroup,
      environment,
    });
    const totalTimeout = props.timeout ?? Duration.minutes(MIGRATION_DEFAULTS.timeoutMinutes);
    const pollSeconds = MIGRATION_DEFAULTS.pollSeconds;
    // Two polls before the framework's own timeout, which fails the resource without stopping the task.
    const deadlineSeconds = totalTimeout.toSeconds() - 2 * pollSeconds;
    if (deadlineSeconds <= 0) throw new Error(`The migrations timeout must be longer than ${2 * pollSeconds} seconds, got ${totalTimeout.toSeconds()}`);
    const onEvent = handler('Start', 'onEvent', 'Starts the migrations task of the deployed image; stops it on rollback or delete', { [DEADLINE_ENV]: String(deadlineSeconds) });
    const isComplete = handler('Check', 'isComplete', 'Tells whether the migrations task stopped, fails the deploy unless it exited 0, and stops it at its deadline');

    const taskDefinitionArns = Stack.of(this).formatArn({
      service: 'ecs',
      resource: 'task-definition',
      resourceName: `${this.taskDefinition.family}:*`,
    });
    onEvent.addToRolePolicy(new iam.PolicyStatement({
      sid: 'RunTheMigrationsTask',
      actions: ['ecs:RunTask'],
      resources: [taskDefinitionArns],
      conditions: { ArnEquals: { 'ecs:cluster': cluster.clusterArn } },
    }));
    onEvent.addToRolePolicy(new iam.PolicyStatement({
      sid: 'PassTheMigrationsTaskRoles',
      actions: ['iam:PassRole'],
      resources: [this.taskDefinition.obtainExecutionRole().roleArn, this.taskDefinition.taskRole.roleArn],
    }));
    onEvent.addToRolePolicy(new iam.PolicyStatement({
      sid: 'TellARollbackApart',
      actions: ['cloudformation:DescribeStacks'],
      resources: [Stack.of(this).stackId],
    }));
    const clusterTasks = Stack.of(this).formatArn({ service: 'ecs', resource: 'task', resourceName: `${cluster.clusterName}/*` });
    isComplete.addToRolePolicy(new iam.PolicyStatement({
      sid: 'WatchTheMigrationsTask',
      actions: ['ecs:DescribeTasks'],
      resources: [clusterTasks],
    }));
    const inThisCluster = { ArnEquals: { 'ecs:cluster': cluster.clusterArn } };
    for (const fn of [onEvent, isComplete]) {
      fn.addToRolePolicy(new iam.PolicyStatement({
        sid: 'StopTheMigrationsTask',
        actions: ['ecs:StopTask'],
        resources: [clusterTasks],
        conditions: inThisCluster,
      }));
    }
    onEvent.addToRolePolicy(new iam.PolicyStatement({
      sid: 'FindRunningMigrationsTasks',
      actions: ['ecs:ListTasks'],
      // ListTasks names a container instance, which Fargate tasks have none of: the cluster condition scopes it.
      resources: ['*'],
      conditions: inThisCluster,
    }));

    const provider = new cr.Provider(this, 'Provider', {
      onEventHandler: onEvent,
      isCompleteHandler: isComplete,
      queryInterval: Duration.seconds(pollSeconds),
      totalTimeout,
      logGroup,
      disableWaiterStateMachineLogging: false,
      waiterStateMachineLogOptions: { destination: logGroup, level: sfn.LogLevel.ALL },
    });
    // The framework's waiter has no tracing setting; its role gets X-Ray's actions (which accept only "*").
    const waiter = provider.node.findChild('waiter-state-machine');
    (waiter.node.findChild('Resource') as sfn.CfnStateMachine).tracingConfiguration = { enabled: true };
    (waiter.node.findChild('Role') as iam.Role).addToPrincipalPolicy(new iam.PolicyStatement({
      sid: 'Traces',
      actions: ['xray:PutTraceSegments', 'xray:PutTelemetryRecords', 'xray:GetSamplingRules', 'xray:GetSamplingTargets'],
      resources: ['*'],
    }));

    this.resource = new CustomResource(this, 'Run', {
      serviceToken: provider.serviceToken,
      resourceType: 'Custom::Migrations',
      properties: {
        Cluster: cluster.clusterArn,
        // A new image is a new revision: the ARN changes, and CloudFormation sends an Update.
        TaskDefinition: this.taskDefinition.taskDefinitionArn,
        ContainerName: CONTAINER.name,
        Subnets: cluster.vpc.selectSubnets({ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }).subnetIds,
        SecurityGroups: [this.securityGroup.securityGroupId],
      },
    });
    // The task must find its way out (NAT, for the image and the secrets) when it starts.
    for (const subnet of cluster.vpc.privateSubnets) this.resource.node.addDependency(subnet.internetConnectivityEstablished);
    const executionPolicy = this.taskDefinition.executionRole?.node.tryFindChild('DefaultPolicy');
    if (executionPolicy) this.resource.node.addDependency(executionPolicy);

    const basicExecution = 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]';
    const managedLogs = 'The AWS managed policy for a Lambda function\'s own logs; it grants nothing else.';
    for (const scope of [onEvent, isComplete, provider]) Validations.of(scope).acknowledge({ id: basicExecution, reason: managedLogs });
    Validations.of(onEvent).acknowledge({
      id: `AwsSolutions-IAM5[Resource::${nagText(this, taskDefinitionArns)}]`,
      reason: 'RunTask of the migrations task family only, every revision (each deploy makes one), and only in this cluster (the ecs:cluster condition).',
    });
    Validations.of(isComplete).acknowledge({
      id: `AwsSolutions-IAM5[Resource::${nagText(this, clusterTasks)}]`,
      reason: 'A task\'s ARN exists only once it runs, so DescribeTasks and StopTask cover the tasks of this one cluster.',
    });
    Validations.of(onEvent).acknowledge({
      id: `AwsSolutions-IAM5[Resource::${nagText(this, clusterTasks)}]`,
      reason: 'A task\'s ARN exists only once it runs, so StopTask covers the tasks of this one cluster (the ecs:cluster condition too).',
    });
    Validations.of(onEvent).acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'ListTasks names a container instance, which Fargate tasks do not have; the ecs:cluster condition limits it to this cluster.',
    });
    // The Provider framework's own functions and waiter state machine (aws-cdk-lib custom-resources).
    const invokes = [onEvent, isComplete, provider.node.findChild('framework-isComplete'), provider.node.findChild('framework-onTimeout')]
      .map((fn) => `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId((fn as lambda.Function).node.defaultChild as lambda.CfnFunction)}.Arn>:*]`);
    for (const id of invokes) {
      Validations.of(provider).acknowledge({ id, reason: 'The Provider framework invokes these functions, any version or alias of each (the :* suffix); it names each one.' });
    }
    Validations.of(provider).acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'Log delivery (the waiter\'s execution logging) and X-Ray actions accept no resource but "*" (see the Step Functions guide, "IAM policies for logging to CloudWatch Logs" and "X-Ray").',
    });
  }
}
