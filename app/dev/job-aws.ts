/**
 * `npm run job:aws -- <name> [--scheduled-time ISO] [--wait] [--stack NAME]`: starts an
 * execution of a job's state machine in AWS, the same one its schedule starts, for the given
 * scheduled time (default: now). It prints the execution's ARN and console link. With --wait it
 * follows the execution to its end, prints the task's log lines as they come (each attempt's),
 * and exits 0 when the execution succeeded, 1 when it did not.
 *
 * Nobody types an ARN: the state machine is `<stack>-<job>` (lib/constructs/scheduled-jobs.ts), found with
 * ListStateMachines; the tasks' log group is the stack's `LogGroup` output. The stack name is
 * cdk.json's `stackName` context (or --stack); credentials and region are the AWS SDK's usual
 * ones (AWS_PROFILE, AWS_REGION, ...). The SDK clients are loaded here only, never in the image.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { CloudWatchLogsClient, GetLogEventsCommand } from '@aws-sdk/client-cloudwatch-logs';
import {
  DescribeExecutionCommand,
  GetExecutionHistoryCommand,
  SFNClient,
  StartExecutionCommand,
  paginateListStateMachines,
  type HistoryEvent,
} from '@aws-sdk/client-sfn';
import { STAGES } from '../../lib/defaults.js';
import { executionConsoleUrl } from '../../lib/job-flow.js';
import { JOBS } from '../../lib/jobs.js';
import { EXIT, UsageError } from '../errors.js';
import { isoTimeProblem, parseIsoTime, refuseFutureTime, scheduledTimeSkewMs } from '../jobs/args.js';
import { awsSetupAdvice } from './aws-errors.js';
import { contextStackName } from './stack-name.js';

const USAGE = 'Usage: npm run job:aws -- <job> [--scheduled-time ISO] [--wait] [--stage dev|prod | --stack NAME]';
/** How often --wait asks Step Functions and CloudWatch Logs for news. */
const POLL_MS = 1_000;

export interface JobAwsArgs {
  readonly job: string;
  readonly scheduledTime: string;
  readonly wait: boolean;
  readonly stack: string;
}

/** The flags as given, in either form (`--stage prod`, `--stage=prod`), each at most once, and the job's name. */
function readAwsFlags(args: readonly string[]): { job?: string; flags: Map<string, string> } {
  const flags = new Map<string, string>();
  let job: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const [flag, inline] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (!arg.startsWith('--')) {
      if (job !== undefined) throw new UsageError(`One job at a time, got "${job}" and "${arg}". ${USAGE}`);
      job = arg;
      continue;
    }
    if (!VALUED_FLAGS.includes(flag) && flag !== '--wait') throw new UsageError(`Unknown flag "${arg}". Valid flags: --scheduled-time <ISO-8601>, --wait, --stage <${STAGES.join('|')}>, --stack <name>. ${USAGE}`);
    const value = flag === '--wait' ? (inline === undefined ? 'yes' : undefined) : (inline ?? args[++i]);
    if (value === undefined || value === '') throw new UsageError(`${flag} ${flag === '--wait' ? 'takes no value' : 'needs a value'}. ${USAGE}`);
    const earlier = flags.get(flag);
    if (earlier !== undefined) throw new UsageError(`${flag} is given twice${flag === '--wait' ? '' : ` (${JSON.stringify(earlier)} and ${JSON.stringify(value)})`}; an execution has one meaning, so give it once.`);
    flags.set(flag, value);
  }
  return { job, flags };
}

const VALUED_FLAGS = ['--scheduled-time', '--stack', '--stage'];

export function parseJobAwsArgs(args: readonly string[], now: Date = new Date()): JobAwsArgs {
  const enabled: string[] = JOBS.filter((j) => j.enabled).map((j) => j.name);
  const { job, flags } = readAwsFlags(args);
  const [stack, stage, time] = [flags.get('--stack'), flags.get('--stage'), flags.get('--scheduled-time')];
  if (stack !== undefined && stage !== undefined) throw new UsageError(`--stack "${stack}" and --stage "${stage}" both name the stack; give one. ${USAGE}`);
  if (stage !== undefined && !(STAGES as readonly string[]).includes(stage)) throw new UsageError(`--stage "${stage}" is not a stage; accepted: ${STAGES.join(', ')}. ${USAGE}`);
  if (job === undefined) throw new UsageError(`Which job? Enabled jobs: ${enabled.join(', ')}. ${USAGE}`);
  if (!enabled.includes(job)) throw new UsageError(`No enabled job "${job}" in lib/jobs.ts. Enabled jobs: ${enabled.join(', ')}.`, 'UNKNOWN_JOB');
  const scheduledTime = time === undefined ? now : parseIsoTime(time);
  if (scheduledTime === undefined) {
    throw new UsageError(`--scheduled-time "${time}" ${isoTimeProblem(time!)}; accepted: 2025-01-02T00:15:00Z, 2025-01-02T01:15:00+01:00, 2025-01-02`);
  }
  // The task would refuse it (exit 2) and the execution alert: refused here instead.
  refuseFutureTime({ scheduledTime, scheduledTimeSource: time === undefined ? 'now' : '--scheduled-time', force: false }, scheduledTimeSkewMs(), now);
  return { job, scheduledTime: scheduledTime.toISOString(), wait: flags.has('--wait'), stack: stack ?? contextStackName(stage) };
}

/** The task started by a TaskSubmitted event of runTask.sync: its ARN, from RunTask's answer. */
function submittedTaskArn(event: HistoryEvent): string | undefined {
  const output = event.taskSubmittedEventDetails?.output;
  if (!output) return undefined;
  try {
    return (JSON.parse(output) as { Tasks?: { TaskArn?: string }[] }).Tasks?.[0]?.TaskArn;
  } catch {
    return undefined;
  }
}

export async function runJobAws(args: JobAwsArgs, out: (line: string) => void): Promise<number> {
  const sfn = new SFNClient({});
  const name = `${args.stack}-${args.job}`;
  let stateMachineArn: string | undefined;
  for await (const page of paginateListStateMachines({ client: sfn }, {})) {
    stateMachineArn = page.stateMachines?.find((m) => m.name === name)?.stateMachineArn;
    if (stateMachineArn) break;
  }
  const region = await sfn.config.region();
  if (!stateMachineArn) {
    throw new UsageError(`No state machine named ${name} in ${region}: is the stack ${args.stack} deployed there (npx cdk deploy), and are AWS_REGION and the credentials those of its account?`);
  }

  // Unique, and readable in the console's list: the job, the scheduled time, a random tail.
  const executionName = `manual-${args.scheduledTime.replace(/[^0-9]/g, '').slice(0, 14)}-${randomBytes(4).toString('hex')}`;
  const { executionArn } = await sfn.send(new StartExecutionCommand({
    stateMachineArn,
    name: executionName,
    input: JSON.stringify({ scheduledTime: args.scheduledTime }),
  }));
  out(`started ${args.job} for ${args.scheduledTime}`);
  out(`execution: ${executionArn}`);
  out(`console:   ${executionConsoleUrl(region, executionArn!)}`);
  if (!args.wait) return EXIT.ok;

  const cfn = new CloudFormationClient({});
  const { Stacks } = await cfn.send(new DescribeStacksCommand({ StackName: args.stack }));
  const logGroupName = Stacks?.[0]?.Outputs?.find((o) => o.OutputKey === 'LogGroup')?.OutputValue;
  if (!logGroupName) throw new UsageError(`The stack ${args.stack} has no LogGroup output: deploy the current version (npx cdk deploy).`);
  const logs = new CloudWatchLogsClient({});

  // One log stream per task: awslogs names it <prefix>/<container>/<task id> (lib/constructs/scheduled-jobs.ts).
  const streams = new Map<string, string | undefined>();
  const seenEvents = new Set<string>();
  const follow = async () => {
    for (const [stream, token] of streams) {
      let next = token;
      for (;;) {
        let page;
        try {
          page = await logs.send(new GetLogEventsCommand({ logGroupName, logStreamName: stream, startFromHead: true, nextToken: next }));
        } catch (err) {
          // The stream appears once the container writes its first line.
          if ((err as Error).name === 'ResourceNotFoundException') break;
          throw err;
        }
        for (const e of page.events ?? []) out(e.message ?? '');
        if (page.nextForwardToken === next) break;
        next = page.nextForwardToken;
        if (!page.events?.length) break;
      }
      streams.set(stream, next);
    }
  };

  let historyToken: string | undefined;
  for (;;) {
    for (;;) {
      const page = await sfn.send(new GetExecutionHistoryCommand({ executionArn, nextToken: historyToken }));
      for (const event of page.events ?? []) {
        const id = String(event.id);
        if (seenEvents.has(id)) continue;
        seenEvents.add(id);
        const taskArn = event.type === 'TaskSubmitted' ? submittedTaskArn(event) : undefined;
        if (taskArn) {
          out(`task ${taskArn}`);
          streams.set(`job-${args.job}/app/${taskArn.split('/').pop()}`, undefined);
        }
      }
      if (!page.nextToken) break;
      historyToken = page.nextToken;
    }
    await follow();
    const execution = await sfn.send(new DescribeExecutionCommand({ executionArn }));
    if (execution.status !== 'RUNNING' && execution.status !== 'PENDING_REDRIVE') {
      await follow();
      if (execution.status === 'SUCCEEDED') {
        out(`${args.job} succeeded`);
        return EXIT.ok;
      }
      out(`${args.job} ${execution.status?.toLowerCase()}: ${[execution.error, execution.cause].filter(Boolean).join(': ')}`);
      return EXIT.failure;
    }
    await sleep(POLL_MS);
  }
}

async function main(argv: readonly string[]): Promise<void> {
  const args = parseJobAwsArgs(argv);
  process.exitCode = await runJobAws(args, (line) => process.stdout.write(`${line}\n`));
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof UsageError) {
    process.stderr.write(`${err.message}\n`);
    process.exitCode = EXIT.usage;
    return;
  }
  // No region or no credentials: what to set (exit 2, as for any other usage error).
  const advice = awsSetupAdvice(err);
  if (advice) {
    process.stderr.write(`${advice}\n`);
    process.exitCode = EXIT.usage;
    return;
  }
  // Another AWS error (permissions, throttling): its name and message, no stack.
  const e = err as Error;
  process.stderr.write(`job:aws failed: ${e.name}: ${e.message}\n`);
  process.exitCode = EXIT.failure;
});
