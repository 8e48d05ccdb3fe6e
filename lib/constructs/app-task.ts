/**
 * The application's Fargate task definition, as both the web service and every job run it:
 * one image on ARM64, hardened the same way, logging to CloudWatch, with the container's
 * SHUTDOWN_TIMEOUT_MS derived from the same stopTimeout ECS enforces.
 */
import { Size, Validations, type Duration } from 'aws-cdk-lib';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { CONTAINER } from '../defaults.js';
import { shutdownTimeoutMs } from '../timing.js';

/** What every task of the application shares. */
export interface AppRuntime {
  /** The image built from the repository's Dockerfile. */
  readonly image: ecs.ContainerImage;
  /** Where every task logs (and where its EMF metric lines become metrics). */
  readonly logGroup: logs.ILogGroup;
  /** Environment every task gets: LOG_LEVEL, METRICS_NAMESPACE, DB_SSL and the like. */
  readonly environment: Readonly<Record<string, string>>;
  /** Secrets every task gets: the database connection fields. */
  readonly secrets: Readonly<Record<string, ecs.Secret>>;
}

export interface AppTaskProps {
  readonly runtime: AppRuntime;
  /** Fargate CPU units. */
  readonly cpu: number;
  /** Fargate memory, MiB. */
  readonly memoryMiB: number;
  /** SIGTERM to SIGKILL; SHUTDOWN_TIMEOUT_MS is derived from it. */
  readonly stopTimeout: Duration;
  /** The awslogs stream prefix, e.g. `api` or the job's name. */
  readonly streamPrefix: string;
  /** Blocking keeps every log line (and so every metric); non-blocking never stalls the process on logging. */
  readonly logMode: ecs.AwsLogDriverMode;
  /** @default - awslogs' default buffer (1 MiB), used only in non-blocking mode */
  readonly logBufferBytes?: number;
  /** Environment on top of the shared one. @default - only the shared environment */
  readonly environment?: Readonly<Record<string, string>>;
  /** Secrets on top of the shared ones. @default - only the shared secrets */
  readonly secrets?: Readonly<Record<string, ecs.Secret>>;
  /** The container's command. @default - the image's CMD, the HTTP server */
  readonly command?: readonly string[];
  /** A container port to publish. @default - none */
  readonly port?: number;
  /** The task definition family. @default - generated from the construct path */
  readonly family?: string;
  /** @default - a new role */
  readonly executionRole?: iam.IRole;
  /** The role the application runs with. @default - a new role with no permissions */
  readonly taskRole?: iam.IRole;
}

export interface AppTask {
  readonly taskDefinition: ecs.FargateTaskDefinition;
  readonly container: ecs.ContainerDefinition;
}

const SCRATCH_VOLUME = 'scratch';

/** Adds a task definition (id `TaskDef`) with the application container (named `CONTAINER.name`) to `scope`. */
export function addAppTask(scope: Construct, props: AppTaskProps): AppTask {
  const taskDefinition = new ecs.FargateTaskDefinition(scope, 'TaskDef', {
    cpu: props.cpu,
    memoryLimitMiB: props.memoryMiB,
    family: props.family,
    executionRole: props.executionRole,
    taskRole: props.taskRole,
    runtimePlatform: {
      cpuArchitecture: ecs.CpuArchitecture.ARM64,
      operatingSystemFamily: ecs.OperatingSystemFamily.LINUX,
    },
    // A bind mount on Fargate's task storage: the only writable path, since the root filesystem is read-only.
    volumes: [{ name: SCRATCH_VOLUME }],
  });

  const container = taskDefinition.addContainer('App', {
    containerName: CONTAINER.name,
    image: props.runtime.image,
    command: props.command ? [...props.command] : undefined,
    essential: true,
    // A hard limit equal to the task's: the one container may use it all, and no more.
    memoryLimitMiB: props.memoryMiB,
    user: CONTAINER.user,
    readonlyRootFilesystem: true,
    stopTimeout: props.stopTimeout,
    // tini as PID 1 reaps zombies and forwards SIGTERM to node.
    linuxParameters: new ecs.LinuxParameters(scope, 'LinuxParameters', { initProcessEnabled: true }),
    environment: {
      ...props.runtime.environment,
      SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs(props.stopTimeout.toSeconds())),
      ...props.environment,
    },
    secrets: { ...props.runtime.secrets, ...props.secrets },
    portMappings: props.port === undefined ? undefined : [{ containerPort: props.port, name: 'http' }],
    logging: ecs.LogDrivers.awsLogs({
      logGroup: props.runtime.logGroup,
      streamPrefix: props.streamPrefix,
      mode: props.logMode,
      maxBufferSize: props.logMode === ecs.AwsLogDriverMode.NON_BLOCKING && props.logBufferBytes !== undefined
        ? Size.bytes(props.logBufferBytes)
        : undefined,
    }),
  });
  container.addMountPoints({ sourceVolume: SCRATCH_VOLUME, containerPath: CONTAINER.scratchPath, readOnly: false });

  Validations.of(taskDefinition).acknowledge({
    id: 'AwsSolutions-ECS2',
    reason: 'The plain environment holds only non-secret settings (port, timeouts, log level, topic and bucket names); the database credentials are injected as ECS secrets from Secrets Manager.',
  });
  // The execution role is shared by the jobs, so acknowledge once per role (on the role itself).
  Validations.of(taskDefinition.obtainExecutionRole()).acknowledge({
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason: 'ecr:GetAuthorizationToken accepts no resource but "*"; every other grant of the execution role names its repository, log group or secret.',
  });
  return { taskDefinition, container };
}
