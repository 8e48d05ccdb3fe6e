/**
 * `npm run job:aws`: the real command (dist/app/dev/job-aws.js) in a child process, with the
 * real @aws-sdk/client-sfn, client-cloudwatch-logs and client-cloudformation pointed at local
 * endpoints that speak each service's protocol (test/helpers/aws-json.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { executionConsoleUrl } from '../../lib/job-flow.js';
import { AwsError, awsEnv, startFakeCloudFormation, startFakeJsonService, type FakeService } from '../helpers/aws-json.js';
import { start } from '../helpers/process.js';

const COMMAND = [process.execPath, path.resolve('dist/app/dev/job-aws.js')];
const STACK = 'EcsSaasBackend-dev';
const MACHINE = `arn:aws:states:us-east-1:123456789012:stateMachine:${STACK}-billing-run`;
const LOG_GROUP = `${STACK}-Logs0B6081B1-AbCdEf`;
const TASKS = ['arn:aws:ecs:us-east-1:123456789012:task/jobs/0a1b2c3d', 'arn:aws:ecs:us-east-1:123456789012:task/jobs/4e5f6a7b'];

interface Script {
  /** The execution's status at each DescribeExecution, the last one repeated. */
  readonly statuses: readonly ('RUNNING' | 'SUCCEEDED' | 'FAILED')[];
  /** The poll (0-based) at which each task is submitted. */
  readonly submittedAt: readonly number[];
  readonly error?: string;
  readonly cause?: string;
}

let fakes: FakeService[] = [];
afterEach(async () => {
  await Promise.all(fakes.map((f) => f.close()));
  fakes = [];
});

async function fakeAws(script: Script) {
  let polls = 0;
  let started: { name: string; input: string } | undefined;
  const executionArn = () => `arn:aws:states:us-east-1:123456789012:execution:${STACK}-billing-run:${started!.name}`;
  const sfn = await startFakeJsonService('AWSStepFunctions', '1.0', {
    // Two pages: the command must follow nextToken to find its machine.
    ListStateMachines: (b) => (b.nextToken === 'page-2'
      ? { stateMachines: [{ name: `${STACK}-billing-run`, stateMachineArn: MACHINE, type: 'STANDARD', creationDate: 1_767_225_600 }] }
      : { stateMachines: [{ name: 'Other-billing-run', stateMachineArn: 'arn:aws:states:us-east-1:123456789012:stateMachine:Other-billing-run', type: 'STANDARD', creationDate: 1_767_225_600 }], nextToken: 'page-2' }),
    StartExecution: (b) => {
      started = { name: b.name, input: b.input };
      return { executionArn: executionArn(), startDate: Date.now() / 1_000 };
    },
    GetExecutionHistory: () => ({
      events: [
        { id: 1, type: 'ExecutionStarted', timestamp: Date.now() / 1_000 },
        ...script.submittedAt.flatMap((at, i) => (at <= polls
          ? [{ id: 10 + i, type: 'TaskSubmitted', timestamp: Date.now() / 1_000, taskSubmittedEventDetails: { resourceType: 'ecs', resource: 'runTask.sync', output: JSON.stringify({ Tasks: [{ TaskArn: TASKS[i] }], Failures: [] }) } }]
          : [])),
      ],
    }),
    DescribeExecution: () => {
      const status = script.statuses[Math.min(polls, script.statuses.length - 1)];
      polls += 1;
      return { executionArn: executionArn(), stateMachineArn: MACHINE, status, startDate: Date.now() / 1_000, ...(script.error ? { error: script.error, cause: script.cause } : {}) };
    },
  });
  const lines = (task: number) => [`{"level":"info","msg":"task ${task + 1} line 1"}`, `{"level":"info","msg":"task ${task + 1} line 2 \\"quoted\\""}`];
  const logs = await startFakeJsonService('Logs_20140328', '1.1', {
    GetLogEvents: (b) => {
      expect(b.logGroupName).toBe(LOG_GROUP);
      const task = TASKS.findIndex((t) => b.logStreamName === `job-billing-run/app/${t.split('/').pop()}`);
      if (task < 0) throw new AwsError('ResourceNotFoundException', `The specified log stream does not exist: ${b.logStreamName}`);
      if (b.nextToken === 'f/end') return { events: [], nextForwardToken: 'f/end', nextBackwardToken: 'b/0' };
      return { events: lines(task).map((message, i) => ({ timestamp: Date.now(), message, ingestionTime: Date.now() + i })), nextForwardToken: 'f/end', nextBackwardToken: 'b/0' };
    },
  });
  const cfn = await startFakeCloudFormation({ [STACK]: { LogGroup: LOG_GROUP, ClusterName: 'jobs' } });
  fakes.push(sfn, logs, cfn);
  return { sfn, logs, cfn, started: () => started, env: awsEnv({ sfn: sfn.url, logs: logs.url, cloudformation: cfn.url }) };
}

async function jobAws(args: string[], env: Record<string, string>) {
  const proc = start(args, env, COMMAND);
  const { code } = await proc.exited;
  return { code, stdout: proc.stdout(), stderr: proc.stderr() };
}

describe('npm run job:aws', () => {
  it('starts an execution of the job\'s state machine, found by name, and prints its ARN and console link', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const out = await jobAws(['billing-run', '--scheduled-time', '2025-03-10T01:15:00+01:00'], aws.env);
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    const started = aws.sfn.requests.find((r) => r.operation === 'StartExecution')!;
    expect(started.body.stateMachineArn).toBe(MACHINE);
    expect(JSON.parse(started.body.input)).toEqual({ scheduledTime: '2025-03-10T00:15:00.000Z' });
    expect(started.body.name).toMatch(/^manual-20250310001500-[0-9a-f]{8}$/);
    const arn = `arn:aws:states:us-east-1:123456789012:execution:${STACK}-billing-run:${started.body.name}`;
    expect(out.stdout.split('\n')).toEqual([
      'started billing-run for 2025-03-10T00:15:00.000Z',
      `execution: ${arn}`,
      `console:   ${executionConsoleUrl('us-east-1', arn)}`,
      '',
    ]);
    // Signed by the SDK, in Step Functions' protocol; no wait: nothing else asked.
    expect(aws.sfn.requests.map((r) => r.operation)).toEqual(['ListStateMachines', 'ListStateMachines', 'StartExecution']);
    for (const r of aws.sfn.requests) {
      expect(r.authorization).toMatch(/^AWS4-HMAC-SHA256 Credential=AKIDTEST\/\d{8}\/us-east-1\/states\/aws4_request/);
      expect(r.contentType).toBe('application/x-amz-json-1.0');
    }
    expect(aws.logs.requests).toEqual([]);
  });

  it('uses the current time when no --scheduled-time is given', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const before = Date.now();
    expect((await jobAws(['billing-run'], aws.env)).code).toBe(0);
    const time = Date.parse(JSON.parse(aws.started()!.input).scheduledTime);
    expect(time).toBeGreaterThanOrEqual(before - 1_000);
    expect(time).toBeLessThanOrEqual(Date.now());
  });

  it('with --wait, prints each task\'s log lines as they come and exits 0 when the execution succeeds', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING', 'RUNNING', 'RUNNING', 'SUCCEEDED'], submittedAt: [0, 2] });
    const out = await jobAws(['billing-run', '--scheduled-time', '2025-03-10T00:15:00Z', '--wait'], aws.env);
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    expect(out.stdout.split('\n').slice(3)).toEqual([
      `task ${TASKS[0]}`,
      '{"level":"info","msg":"task 1 line 1"}',
      '{"level":"info","msg":"task 1 line 2 \\"quoted\\""}',
      `task ${TASKS[1]}`,
      '{"level":"info","msg":"task 2 line 1"}',
      '{"level":"info","msg":"task 2 line 2 \\"quoted\\""}',
      'billing-run succeeded',
      '',
    ]);
    expect(aws.cfn.requests).toEqual([expect.objectContaining({ operation: 'DescribeStacks', body: expect.objectContaining({ StackName: STACK }) })]);
    expect(aws.cfn.requests[0]!.authorization).toMatch(/\/cloudformation\/aws4_request/);
    for (const r of aws.logs.requests) {
      expect(r.contentType).toBe('application/x-amz-json-1.1');
      expect(r.authorization).toMatch(/\/logs\/aws4_request/);
    }
  });

  it('with --wait, exits 1 with the execution\'s error when it fails', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING', 'FAILED'], submittedAt: [0], error: 'Job.Alerted', cause: 'The job failed; its alert says how each attempt ended.' });
    const out = await jobAws(['billing-run', '--wait'], aws.env);
    expect(out.code).toBe(1);
    expect(out.stdout).toContain('billing-run failed: Job.Alerted: The job failed; its alert says how each attempt ended.\n');
  });

  it('refuses, with exit 2 and no request, an unknown job, a malformed time or an unknown flag', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const unknown = await jobAws(['billing'], aws.env);
    expect(unknown).toMatchObject({ code: 2, stdout: '' });
    expect(unknown.stderr).toBe('No enabled job "billing" in lib/jobs.ts. Enabled jobs: billing-run, report-aggregation, data-cleanup, weekly-export.\n');
    const time = await jobAws(['billing-run', '--scheduled-time', '2025-03-10T00:15:00'], aws.env);
    expect(time.code).toBe(2);
    expect(time.stderr).toMatch(/^--scheduled-time "2025-03-10T00:15:00" has no UTC offset: add Z for UTC/);
    const flag = await jobAws(['billing-run', '--force'], aws.env);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toMatch(/^Unknown flag "--force"/);
    expect(aws.sfn.requests).toEqual([]);
  });

  it.each([
    [['billing-run', '--stage', 'dev', '--stage=prod'], '--stage is given twice ("dev" and "prod"); an execution has one meaning, so give it once.'],
    [['billing-run', '--scheduled-time', '2025-03-10T00:15:00Z', '--scheduled-time', '2025-03-11T00:15:00Z'], '--scheduled-time is given twice ("2025-03-10T00:15:00Z" and "2025-03-11T00:15:00Z"); an execution has one meaning, so give it once.'],
    [['billing-run', '--wait', '--wait'], '--wait is given twice; an execution has one meaning, so give it once.'],
    [['billing-run', '--stack', 'Staging', '--stage', 'prod'], '--stack "Staging" and --stage "prod" both name the stack; give one.'],
    [['billing-run', '--scheduled-time', '2999-01-01T00:00:00Z'], '--scheduled-time 2999-01-01T00:00:00.000Z is in the future'],
    [['billing-run', '--wait=yes'], '--wait takes no value.'],
  ])('%j: one meaning or exit 2, with no request', async (args, message) => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const out = await jobAws(args, aws.env);
    expect(out).toMatchObject({ code: 2, stdout: '' });
    expect(out.stderr.startsWith(message)).toBe(true);
    expect(aws.sfn.requests).toEqual([]);
  });

  it('takes --flag=value as --flag value', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const out = await jobAws(['billing-run', '--stage=prod', '--scheduled-time=2025-03-10T00:15:00Z'], aws.env);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/^No state machine named EcsSaasBackend-prod-billing-run in us-east-1/);
  });

  it('says which state machine it looked for when the stack is not deployed there (exit 2)', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const out = await jobAws(['billing-run', '--stack', 'Staging'], aws.env);
    expect(out.code).toBe(2);
    expect(out.stderr).toBe('No state machine named Staging-billing-run in us-east-1: is the stack Staging deployed there (npx cdk deploy), and are AWS_REGION and the credentials those of its account?\n');
    expect(aws.sfn.requests.map((r) => r.operation)).toEqual(['ListStateMachines', 'ListStateMachines']);
  });

  it('finds the stage\'s stack: --stage prod looks in EcsSaasBackend-prod; an unknown stage is a usage error', async () => {
    const aws = await fakeAws({ statuses: ['RUNNING'], submittedAt: [] });
    const prod = await jobAws(['billing-run', '--stage', 'prod'], aws.env);
    expect(prod.code).toBe(2);
    expect(prod.stderr).toMatch(/^No state machine named EcsSaasBackend-prod-billing-run in us-east-1: is the stack EcsSaasBackend-prod deployed there/);
    const bad = await jobAws(['billing-run', '--stage', 'staging'], aws.env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^--stage "staging" is not a stage; accepted: dev, prod\./);
  });

  it('reports an AWS error by its name, without a stack trace (exit 1)', async () => {
    const sfn = await startFakeJsonService('AWSStepFunctions', '1.0', {
      ListStateMachines: () => {
        throw new AwsError('AccessDeniedException', 'User: arn:aws:iam::123456789012:user/ci is not authorized to perform: states:ListStateMachines');
      },
    });
    fakes.push(sfn);
    const out = await jobAws(['billing-run'], awsEnv({ sfn: sfn.url }));
    expect(out.code).toBe(1);
    expect(out.stderr).toBe('job:aws failed: AccessDeniedException: User: arn:aws:iam::123456789012:user/ci is not authorized to perform: states:ListStateMachines\n');
  });

  describe('without an AWS set-up, says in one line what to set (exit 2), with no stack trace and no SDK warning', () => {
    // A home with no ~/.aws: nothing for the SDK to find but what each test sets.
    const home = mkdtempSync(path.join(tmpdir(), 'no-aws-'));
    afterAll(() => rmSync(home, { recursive: true, force: true }));
    const bare = (env: Record<string, string>) => ({ HOME: home, AWS_CONFIG_FILE: path.join(home, 'config'), AWS_SHARED_CREDENTIALS_FILE: path.join(home, 'credentials'), ...env });

    it.each([
      ['no region', {}, 'No AWS region: set AWS_REGION (for example AWS_REGION=eu-west-1), or AWS_PROFILE to a profile in ~/.aws/config that has a region.'],
      ['no credentials', { AWS_REGION: 'us-east-1' }, 'No AWS credentials: set AWS_PROFILE to a profile in ~/.aws/config (then `aws sso login` if it signs in with SSO), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.'],
      ['a profile that has none', { AWS_REGION: 'us-east-1', AWS_PROFILE: 'team-dev' }, /^No AWS credentials for the profile "team-dev": run `aws sso login --profile team-dev` if it signs in with SSO, else check its entry in ~\/\.aws\/config and ~\/\.aws\/credentials \(the SDK said: .*\)\.$/],
    ] as const)('%s', async (_, env, expected) => {
      const sfn = await startFakeJsonService('AWSStepFunctions', '1.0', { ListStateMachines: () => ({ stateMachines: [] }) });
      fakes.push(sfn);
      const out = await jobAws(['billing-run'], bare({ AWS_ENDPOINT_URL_SFN: sfn.url, ...env }));
      expect(out.code).toBe(2);
      const lines = out.stderr.trimEnd().split('\n');
      expect(lines, out.stderr).toHaveLength(1);
      if (typeof expected === 'string') expect(lines[0]).toBe(expected);
      else expect(lines[0]).toMatch(expected);
      expect(out.stdout).toBe('');
      // Nothing was sent: the SDK signs no request without both.
      expect(sfn.requests).toEqual([]);
    }, 170_000);
  });
});
