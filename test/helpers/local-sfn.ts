/**
 * Executes a job's synthesized state machine, as `cdk synth` wrote it, with the
 * aws-local-stepfunctions interpreter. Its two service integrations are replaced by local
 * handlers: `ecs:runTask.sync` starts the real container command (`node dist/app/main.js <job>`)
 * with the environment the state's overrides pass, and `sns:publish` publishes with the real
 * @aws-sdk/client-sns to the local SNS endpoint.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { PublishCommand, SNSClient } from '@aws-sdk/client-sns';
import type { App, NestedStack } from 'aws-cdk-lib';
import { ExecutionError, StateMachine, type StateMachineDefinition } from 'aws-local-stepfunctions';
import { expect } from 'vitest';
import { STATE } from '../../lib/job-flow.js';
import { MAIN, start, type Proc } from './process.js';

export const REGION = 'us-east-1';
export const ACCOUNT = '123456789012';

type Template = { Resources: Record<string, { Type: string; Properties: Record<string, any> }> };

export interface SynthesizedJob {
  readonly template: Template;
  readonly definition: StateMachineDefinition & { States: Record<string, any> };
}

/**
 * The nested stack's template from the cloud assembly `app.synth()` wrote, and its state
 * machine's definition with every reference replaced by a readable stand-in: `ref:<LogicalId>`
 * for a resource of the template, `param:<Name>` for a parameter (what the parent passes).
 */
export function synthesizedJob(app: App, stack: NestedStack): SynthesizedJob {
  const assembly = app.synth();
  const template = JSON.parse(readFileSync(path.join(assembly.directory, stack.templateFile), 'utf8')) as Template & { Parameters?: Record<string, unknown> };
  const params = new Set(Object.keys(template.Parameters ?? {}));
  const pseudo: Record<string, string> = { 'AWS::Region': REGION, 'AWS::Partition': 'aws', 'AWS::AccountId': ACCOUNT, 'AWS::URLSuffix': 'amazonaws.com' };
  const resolve = (v: unknown): string => {
    if (typeof v === 'string') return v;
    const o = v as Record<string, any>;
    if ('Fn::Join' in o) return (o['Fn::Join'][1] as unknown[]).map(resolve).join(o['Fn::Join'][0] as string);
    if ('Ref' in o) return pseudo[o.Ref] ?? (params.has(o.Ref) ? `param:${o.Ref}` : `ref:${o.Ref}`);
    if ('Fn::GetAtt' in o) return `ref:${(o['Fn::GetAtt'] as string[]).join('.')}`;
    throw new Error(`cannot resolve ${JSON.stringify(v)}`);
  };
  const [machine] = Object.values(template.Resources).filter((r) => r.Type === 'AWS::StepFunctions::StateMachine');
  return { template, definition: JSON.parse(resolve(machine!.Properties.DefinitionString)) };
}

/** What a scenario does with each task attempt (1-based). */
export interface TaskBehaviour {
  /** Fail to start: throw this error (name and Cause) instead of starting the container. */
  readonly failToStart?: (attempt: number) => { error: string; cause: string } | undefined;
  /** Called once the container has started, e.g. to kill it mid-run. */
  readonly onStart?: (attempt: number, proc: Proc) => void | Promise<void>;
  /** The task's stop code and reason when the container exits by itself. */
  readonly stopped?: (attempt: number, exitCode: number) => { stopCode: string; stoppedReason: string } | undefined;
  /** The entry the container runs, e.g. a broken copy of the build. @default MAIN */
  readonly main?: string;
}

export interface LocalExecution {
  /** 'SUCCEEDED', or the error the execution failed with. */
  readonly status: 'SUCCEEDED' | 'FAILED';
  readonly error?: string;
  readonly cause?: string;
  /** Every task attempt: the container (when it started) and how it ended. */
  readonly attempts: { proc?: Proc; exitCode?: number; overrides: Record<string, string> }[];
  /** The names of the states entered, in order. */
  readonly states: string[];
  /** The interpreter's event log, for a failure's message. */
  readonly events: unknown[];
}

/** An Error the interpreter reports under `name`, with `cause` as the state's Cause. */
function stateError(name: string, cause: string): Error {
  const err = new Error(cause);
  err.name = name;
  return err;
}

let taskCounter = 0;

/**
 * A stopped task as DescribeTasks describes it, the shape runTask.sync puts in the Cause of
 * `States.TaskFailed` (and returns on success): `Containers[].ExitCode` (absent when the
 * container never ran or was stopped without one), `StopCode` (EssentialContainerExited,
 * SpotInterruption, TaskFailedToStart, UserInitiated, ...) and `StoppedReason`. See
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html and
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/stopped-task-error-codes.html;
 * Step Functions passes it with the API's member names in PascalCase, as in its examples.
 */
export function stoppedTask(o: { taskDefinitionArn: string; clusterArn: string; exitCode?: number; stopCode: string; stoppedReason: string; containerReason?: string }): Record<string, unknown> {
  taskCounter += 1;
  const taskArn = `arn:aws:ecs:${REGION}:${ACCOUNT}:task/jobs/${String(taskCounter).padStart(32, '0')}`;
  return {
    Attachments: [],
    ClusterArn: o.clusterArn,
    Containers: [{
      ContainerArn: `arn:aws:ecs:${REGION}:${ACCOUNT}:container/jobs/${taskCounter}`,
      Name: 'app',
      LastStatus: 'STOPPED',
      TaskArn: taskArn,
      ...(o.exitCode === undefined ? {} : { ExitCode: o.exitCode }),
      ...(o.containerReason ? { Reason: o.containerReason } : {}),
    }],
    DesiredStatus: 'STOPPED',
    LastStatus: 'STOPPED',
    LaunchType: 'FARGATE',
    StopCode: o.stopCode,
    StoppedReason: o.stoppedReason,
    TaskArn: taskArn,
    TaskDefinitionArn: o.taskDefinitionArn,
  };
}

/**
 * Runs one execution of `job`'s definition with `input`, the container against `env` (the test
 * database, the local SNS endpoint), each task attempt shaped by `behaviour`.
 */
export async function executeLocally(job: SynthesizedJob, input: Record<string, unknown>, env: Record<string, string | undefined>, behaviour: TaskBehaviour = {}): Promise<LocalExecution> {
  const attempts: LocalExecution['attempts'] = [];
  const runTaskState = job.definition.States[STATE.runTask]!;
  const backstopMs = (runTaskState.TimeoutSeconds as number) * 1_000;

  const runTask = async (params: any): Promise<any> => {
    const attempt = attempts.length + 1;
    const overrides = Object.fromEntries(
      (params.Overrides.ContainerOverrides[0].Environment as { Name: string; Value: string }[]).map((e) => [e.Name, e.Value]),
    );
    const record: LocalExecution['attempts'][number] = { overrides };
    attempts.push(record);
    const failure = behaviour.failToStart?.(attempt);
    if (failure) throw stateError(failure.error, failure.cause);

    // The command is the task definition's. The state names its family, as RunTask takes it:
    // ECS then runs the family's latest ACTIVE revision, here the one in the template.
    const family = String(params.TaskDefinition);
    const taskDefinition = Object.values(job.template.Resources).find((r) => r.Type === 'AWS::ECS::TaskDefinition' && r.Properties.Family === family);
    if (!taskDefinition) throw stateError('AmazonECS.ClientException', `TaskDefinition not found: ${family} is not a family of the template (a revision-pinned reference fails once a deploy deregisters it)`);
    const command = taskDefinition.Properties.ContainerDefinitions[0].Command as string[];
    expect(command.slice(0, 2)).toEqual(['node', 'dist/app/main.js']);
    const proc = start(command.slice(2), { ...env, ...overrides }, [process.execPath, behaviour.main ?? MAIN]);
    record.proc = proc;
    // What Step Functions does when the state times out: StopTask, which is a SIGTERM.
    const stopper = setTimeout(() => proc.kill('SIGTERM'), backstopMs);
    try {
      await behaviour.onStart?.(attempt, proc);
      const { code } = await proc.exited;
      record.exitCode = code;
      const stopped = behaviour.stopped?.(attempt, code) ?? { stopCode: 'EssentialContainerExited', stoppedReason: 'Essential container in task exited' };
      const task = stoppedTask({ taskDefinitionArn: String(params.TaskDefinition), clusterArn: String(params.Cluster), exitCode: code, ...stopped });
      if (code === 0) return task;
      throw stateError('States.TaskFailed', JSON.stringify(task));
    } finally {
      clearTimeout(stopper);
    }
  };

  const publish = async (params: any): Promise<any> => {
    // The SDK as the state machine's role would use it, pointed at the local endpoint the container uses too.
    const client = new SNSClient({
      region: REGION,
      endpoint: env.AWS_ENDPOINT_URL_SNS,
      credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID!, secretAccessKey: env.AWS_SECRET_ACCESS_KEY! },
    });
    try {
      const out = await client.send(new PublishCommand({ TopicArn: env.ALERT_TOPIC_ARN, Subject: params.Subject, Message: params.Message }));
      return { MessageId: out.MessageId! };
    } finally {
      client.destroy();
    }
  };

  const machine = new StateMachine(job.definition, { validationOptions: { checkArn: false } });
  const jsonInput = input as Parameters<typeof machine.run>[0];
  const executionName = `run-${Date.now()}`;
  const execution = machine.run(jsonInput, {
    overrides: {
      taskResourceLocalHandlers: { [STATE.runTask]: runTask, [STATE.alert]: publish },
      // The backoffs are seconds to minutes in AWS; the tests check the order of things, not the wait.
      waitTimeOverrides: { [STATE.backoff]: 10 },
      retryIntervalOverrides: { [STATE.alert]: 10 },
    },
    context: {
      Execution: {
        Id: `arn:aws:states:${REGION}:${ACCOUNT}:execution:Test-${job.definition.Comment?.split(':')[0]}:${executionName}`,
        Name: executionName,
        Input: jsonInput,
        StartTime: new Date().toISOString(),
      },
    },
  });
  const events: unknown[] = [];
  const states: string[] = [];
  const logged = (async () => {
    for await (const event of execution.eventLogs) {
      events.push(event);
      if (event.type === 'StateEntered') states.push(event.state.name);
    }
  })();
  try {
    await execution.result;
    await logged;
    return { status: 'SUCCEEDED', attempts, states, events };
  } catch (err) {
    if (!(err instanceof ExecutionError)) throw err;
    await logged;
    const failure = err.cause as Error;
    return { status: 'FAILED', error: failure.name, cause: failure.message, attempts, states, events };
  }
}
