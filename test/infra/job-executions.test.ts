/**
 * The scenarios of a job's execution, proven without AWS: the state machine definition that
 * synth writes runs in aws-local-stepfunctions (test/helpers/local-sfn.ts), each task attempt is
 * the real container command against the test database, and every alert goes to the local SNS
 * endpoint. Each scenario checks the execution's result, the alerts and the rows.
 */
import { applicationName } from '../../app/db.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { App, Duration, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sns from 'aws-cdk-lib/aws-sns';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockKey } from '../../app/lock.js';
import { EXECUTION_ERROR, RETRY_PATH, SUCCESS_PATH, rerunCommand, stateTransitions } from '../../lib/job-flow.js';
import { JOBS, taskRetriesOf, type JobDefinition } from '../../lib/jobs.js';
import { ScheduledJobs, type ScheduledJobsProps } from '../../lib/constructs/scheduled-jobs.js';
import { createTestDatabase, eventually, newClient, type TestDatabase } from '../helpers/db.js';
import { expectNothingLeft, expectOneInvoicePerActiveAccount, jobEnv, jobRuns, NIGHTLY_TIME, seed } from '../helpers/jobs.js';
import { executeLocally, synthesizedJob, type SynthesizedJob } from '../helpers/local-sfn.js';
import { snsEnv, startFakeSns, type FakeSns } from '../helpers/sns.js';
import { CDK_CONTEXT, NO_BUILTIN_VALIDATION, NOW } from './synth.js';

const BILLING = JOBS.find((j) => j.name === 'billing-run')!;
// Small batches stretch billing-run over a few seconds, so that a signal lands mid-run.
const SLOW = { JOB_BATCH_SIZE: '5', SHUTDOWN_TIMEOUT_MS: '3000' };

/** `job` alone in a stack of its own, synthesized; the state machine's definition from the assembly. */
function synthesize(job: JobDefinition, props: Partial<ScheduledJobsProps> = {}): SynthesizedJob {
  const app = new App({ context: CDK_CONTEXT, ...NO_BUILTIN_VALIDATION });
  const stack = new Stack(app, 'Test');
  const vpc = new ec2.Vpc(stack, 'Vpc', { natGateways: 1 });
  const cluster = new ecs.Cluster(stack, 'Cluster', { vpc, enableFargateCapacityProviders: true });
  const jobs = new ScheduledJobs(stack, 'Jobs', {
    cluster,
    runtime: { image: ecs.ContainerImage.fromRegistry('app'), logGroup: new logs.LogGroup(stack, 'Logs'), environment: {}, secrets: {} },
    alertTopic: new sns.Topic(stack, 'Topic'),
    jobs: [job],
    namePrefix: 'Test',
    now: NOW,
    ...props,
  });
  return synthesizedJob(app, jobs.jobs.get(job.name)!.stack);
}

let db: TestDatabase;
let fakeSns: FakeSns;
let billing: SynthesizedJob;
const env = () => jobEnv(db, { ...SLOW, ...snsEnv(fakeSns) });
const alertsSince = (n: number) => fakeSns.messages.slice(n);

beforeAll(async () => {
  billing = synthesize(BILLING);
  [db, fakeSns] = await Promise.all([createTestDatabase(), startFakeSns()]);
  await seed(db, 2_000);
});
afterAll(async () => {
  await fakeSns?.close();
  await db?.drop();
});

describe('a job\'s execution, from the synthesized definition', () => {
  it('1. billing-run SIGKILLed mid-run: a new task resumes from the checkpoint; one invoice per active account, no alert', async () => {
    const alerts = fakeSns.messages.length;
    const run = await executeLocally(billing, { scheduledTime: NIGHTLY_TIME }, env(), {
      onStart: async (attempt, proc) => {
        if (attempt !== 1) return;
        await proc.waitForLog((l) => l.msg.includes('attempt 1 started'));
        await sleep(300 + Math.random() * 500);
        proc.kill('SIGKILL');
      },
    });
    expect({ status: run.status, error: run.error, cause: run.cause }, JSON.stringify(run.events, null, 1).slice(0, 6000)).toEqual({ status: 'SUCCEEDED', error: undefined, cause: undefined });
    expect(run.attempts.map((a) => a.exitCode)).toEqual([137, 0]);
    // Each task gets its run's scheduled time, and its execution's ARN for the run's trace.
    expect(run.attempts.map((a) => a.overrides)).toEqual([0, 1].map(() => ({ SCHEDULED_TIME: NIGHTLY_TIME, SFN_EXECUTION_ARN: expect.stringMatching(/^arn:aws:states:[^:]+:\d{12}:execution:[^:]+:[\w-]+$/) })));
    const second = run.attempts[1]!.proc!;
    expect(second.logs.find((l) => l.msg.startsWith('resuming from the checkpoint'))?.msg).toBe('resuming from the checkpoint of attempt 1 (abandoned)');
    await expectOneInvoicePerActiveAccount(db);
    expect((await jobRuns(db, 'billing-run')).map((r) => r.status)).toEqual(['abandoned', 'succeeded']);
    expect(alertsSince(alerts)).toEqual([]);
    await expectNothingLeft(db);
  });

  it('7. exit 0 "already done": the execution succeeds, with one task and nothing written', async () => {
    const rows = (await jobRuns(db)).length;
    const alerts = fakeSns.messages.length;
    const run = await executeLocally(billing, { scheduledTime: NIGHTLY_TIME }, env());
    expect({ status: run.status, error: run.error, cause: run.cause }, JSON.stringify(run.events, null, 1).slice(0, 6000)).toEqual({ status: 'SUCCEEDED', error: undefined, cause: undefined });
    expect(run.attempts).toHaveLength(1);
    expect(run.states).toEqual(SUCCESS_PATH);
    expect(run.attempts[0]!.proc!.logs.some((l) => l.msg.startsWith('already done'))).toBe(true);
    expect(await jobRuns(db)).toHaveLength(rows);
    expect(alertsSince(alerts)).toEqual([]);
  });

  it('2. SIGTERM mid-run (a Spot interruption): exit 3, then a new task resumes and succeeds', async () => {
    const time = '2025-03-09T00:15:00.000Z';
    const alerts = fakeSns.messages.length;
    const run = await executeLocally(billing, { scheduledTime: time }, env(), {
      onStart: async (attempt, proc) => {
        if (attempt !== 1) return;
        await proc.waitForLog((l) => l.msg.includes('attempt 1 started'));
        await sleep(300 + Math.random() * 500);
        proc.kill('SIGTERM');
      },
      stopped: (attempt) => (attempt === 1 ? { stopCode: 'SpotInterruption', stoppedReason: 'Your Spot Task was interrupted.' } : undefined),
    });
    expect({ status: run.status, error: run.error, cause: run.cause }, JSON.stringify(run.events, null, 1).slice(0, 6000)).toEqual({ status: 'SUCCEEDED', error: undefined, cause: undefined });
    expect(run.attempts.map((a) => a.exitCode)).toEqual([3, 0]);
    // The states `npm run jobs` prices a retry by are the ones an exit 3 goes through.
    expect(run.states).toEqual([...SUCCESS_PATH.slice(0, 2), ...RETRY_PATH, SUCCESS_PATH[2]]);
    expect(run.states).toHaveLength(stateTransitions(1));
    expect(run.attempts[1]!.proc!.logs.find((l) => l.msg.startsWith('resuming from the checkpoint'))?.msg).toBe('resuming from the checkpoint of attempt 1 (interrupted)');
    await expectOneInvoicePerActiveAccount(db, '2025-03-08');
    expect((await jobRuns(db, 'billing-run')).filter((r) => r.scheduled_time.toISOString() === time).map((r) => r.status)).toEqual(['interrupted', 'succeeded']);
    expect(alertsSince(alerts)).toEqual([]);
  });

  it('3. exit 1: no new task; the runner\'s own alert is the only one', async () => {
    const time = '2025-03-08T00:15:00.000Z';
    const alerts = fakeSns.messages.length;
    const run = await executeLocally(billing, { scheduledTime: time }, { ...env(), JOB_FAULT_INJECTION: 'fail-attempts=all' });
    expect(run).toMatchObject({ status: 'FAILED', error: EXECUTION_ERROR.failed });
    expect(run.attempts.map((a) => a.exitCode)).toEqual([1]);
    const sent = alertsSince(alerts);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.subject).toBe(`[job failed] billing-run scheduled ${time}`);
    expect(sent[0]!.message).toMatch(/^The scheduled job billing-run failed for good\./);
    const rows = (await jobRuns(db, 'billing-run')).filter((r) => r.scheduled_time.toISOString() === time);
    expect(rows.map((r) => r.status)).toEqual(Array(BILLING.retries + 1).fill('failed'));
  });

  it('4. a task that never starts: taskRetries + 1 attempts, then exactly one alert naming the RunTask failure', async () => {
    const time = '2025-03-07T00:15:00.000Z';
    const alerts = fakeSns.messages.length;
    const rows = (await jobRuns(db)).length;
    const run = await executeLocally(billing, { scheduledTime: time }, env(), {
      failToStart: (attempt) => (attempt === 1
        ? { error: 'AmazonECS.Unknown', cause: 'RunTask failures: [{"reason":"Capacity is unavailable at this time. Please try again later or in a different availability zone"}]' }
        : {
          error: 'States.TaskFailed',
          cause: JSON.stringify({
            Containers: [{ Name: 'app', LastStatus: 'STOPPED' }],
            LastStatus: 'STOPPED',
            StopCode: 'TaskFailedToStart',
            StoppedReason: 'CannotPullContainerError: pull image manifest has been retried 5 time(s): "quoted", {braced} and a\nnewline',
          }),
        }),
    });
    const attempts = taskRetriesOf(BILLING) + 1;
    expect(run).toMatchObject({ status: 'FAILED', error: EXECUTION_ERROR.alerted });
    expect(run.attempts).toHaveLength(attempts);
    expect(run.attempts.every((a) => a.proc === undefined)).toBe(true);
    const sent = alertsSince(alerts);
    expect(sent).toHaveLength(1);
    const [alert] = sent;
    expect(alert!.subject).toBe(`[job failed] billing-run scheduled ${time}`);
    expect(alert!.message).toContain(`The scheduled job billing-run failed: its task did not finish in ${attempts} attempts (taskRetries: ${attempts - 1})`);
    expect(alert!.message).toContain('attempt 1: the task did not start: AmazonECS.Unknown: RunTask failures: [{"reason":"Capacity is unavailable');
    expect(alert!.message).toContain('attempt 2: no exit code, stop code TaskFailedToStart: CannotPullContainerError: pull image manifest has been retried 5 time(s): "quoted", {braced} and a\nnewline');
    expect(alert!.message).toContain(`attempt ${attempts}: no exit code, stop code TaskFailedToStart`);
    expect(alert!.message).toMatch(/Execution: {6}https:\/\/us-east-1\.console\.aws\.amazon\.com\/states\/home\?region=us-east-1#\/v2\/executions\/details\/arn:aws:states:us-east-1:123456789012:execution:/);
    expect(alert!.message).toContain(`  ${rerunCommand('billing-run', time, 'Test')}\n`);
    expect(await jobRuns(db)).toHaveLength(rows);
  });

  it('5. exit 2 (a malformed scheduled time): one alert naming the error, no retry', async () => {
    const alerts = fakeSns.messages.length;
    const rows = (await jobRuns(db)).length;
    const run = await executeLocally(billing, { scheduledTime: 'yesterday' }, env());
    expect(run).toMatchObject({ status: 'FAILED', error: EXECUTION_ERROR.alerted });
    expect(run.attempts.map((a) => a.exitCode)).toEqual([2]);
    expect(run.attempts[0]!.proc!.stderr()).toContain('SCHEDULED_TIME');
    const sent = alertsSince(alerts);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.subject).toBe('[job failed] billing-run scheduled yesterday');
    expect(sent[0]!.message).toContain('The scheduled job billing-run failed: exit code 2, a usage or configuration error: nothing was done, and it was not retried.');
    expect(sent[0]!.message).toContain('attempt 1: exit code 2, stop code EssentialContainerExited: Essential container in task exited');
    expect(await jobRuns(db)).toHaveLength(rows);
  });

  it('an alert that cannot be published ends the execution with Job.AlertFailed, which the execution-status rule pages for', async () => {
    const down = await startFakeSns();
    await down.close();
    const run = await executeLocally(billing, { scheduledTime: 'yesterday' }, { ...env(), AWS_ENDPOINT_URL_SNS: down.url });
    expect(run).toMatchObject({ status: 'FAILED', error: EXECUTION_ERROR.alertFailed });
    // The publish was tried, and retried, before the execution gave up on it.
    expect(run.states.filter((s) => s === 'Alert')).toHaveLength(1);
    expect(run.events.filter((e: any) => e.type === 'StateRetried' && e.state.name === 'Alert')).toHaveLength(3);
  });
});

describe('the endings without an alert of their own', () => {
  it('8. SIGTERM during a statement longer than the stop grace: cancelled, exit 3, a new task resumes and succeeds; no alert', async () => {
    // Another minute of the night of test 1: the same period, a run key of its own.
    const time = '2025-03-10T00:20:00.000Z';
    const alerts = fakeSns.messages.length;
    const blocker = newClient({ connectionString: db.url });
    await blocker.connect();
    try {
      // The batch's INSERT waits on this lock: a statement that never ends by itself.
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE invoices IN SHARE MODE');
      const run = await executeLocally(billing, { scheduledTime: time }, env(), {
        onStart: async (attempt, proc) => {
          if (attempt !== 1) return;
          const waiting = await eventually(async () => (await db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND backend_xid IS NOT NULL AND application_name = '${applicationName('job:billing-run')}'`)).length > 0, 20_000);
          expect(waiting).toBe(true);
          proc.kill('SIGTERM');
          await proc.exited;
          await blocker.query('ROLLBACK');
        },
        stopped: (attempt) => (attempt === 1 ? { stopCode: 'SpotInterruption', stoppedReason: 'Your Spot Task was interrupted.' } : undefined),
      });
      expect({ status: run.status, error: run.error }, JSON.stringify(run.events, null, 1).slice(0, 6000)).toEqual({ status: 'SUCCEEDED', error: undefined });
      expect(run.attempts.map((a) => a.exitCode)).toEqual([3, 0]);
      expect(run.attempts[0]!.proc!.logs.some((l) => /^the handler did not stop within its grace; cancelled the statements/.test(l.msg))).toBe(true);
      expect((await jobRuns(db, 'billing-run')).filter((r) => r.scheduled_time.toISOString() === time).map((r) => r.status)).toEqual(['interrupted', 'succeeded']);
      await expectOneInvoicePerActiveAccount(db);
      expect(alertsSince(alerts)).toEqual([]);
    } finally {
      await blocker.end();
    }
  });

  it('9. a crash at module load: exit 4 on every task (nothing alerted yet), then exactly one alert from the execution', async () => {
    const { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } = await import('node:fs');
    const path = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(path.join(tmpdir(), 'bad-build-'));
    try {
      cpSync('dist', path.join(dir, 'dist'), { recursive: true });
      symlinkSync(path.resolve('node_modules'), path.join(dir, 'node_modules'));
      writeFileSync(path.join(dir, 'package.json'), readFileSync('package.json'));
      const configJs = path.join(dir, 'dist/app/config.js');
      writeFileSync(configJs, `throw new Error('broken build: config.js');\n${readFileSync(configJs, 'utf8')}`);
      const time = '2025-03-04T00:15:00.000Z';
      const alerts = fakeSns.messages.length;
      const rows = (await jobRuns(db)).length;
      const run = await executeLocally(billing, { scheduledTime: time }, env(), { main: path.join(dir, 'dist/app/main.js') });
      const attempts = taskRetriesOf(BILLING) + 1;
      expect(run).toMatchObject({ status: 'FAILED', error: EXECUTION_ERROR.alerted });
      expect(run.attempts.map((a) => a.exitCode)).toEqual(Array(attempts).fill(4));
      const sent = alertsSince(alerts);
      expect(sent).toHaveLength(1);
      expect(sent[0]!.message).toContain(`its task did not finish in ${attempts} attempts`);
      expect(sent[0]!.message).toContain('attempt 1: exit code 4');
      expect(await jobRuns(db)).toHaveLength(rows);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('10. an out-of-memory kill (137, OutOfMemoryError): a new task resumes from the checkpoint and succeeds; no alert', async () => {
    const time = '2025-03-10T00:25:00.000Z';
    const alerts = fakeSns.messages.length;
    const run = await executeLocally(billing, { scheduledTime: time }, env(), {
      onStart: async (attempt, proc) => {
        if (attempt !== 1) return;
        await proc.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0);
        // The kernel's OOM killer sends SIGKILL; ECS then reports exit 137 and OutOfMemoryError.
        proc.kill('SIGKILL');
      },
      stopped: (attempt) => (attempt === 1 ? { stopCode: 'EssentialContainerExited', stoppedReason: 'OutOfMemoryError: Container killed due to memory usage' } : undefined),
    });
    expect({ status: run.status, error: run.error }, JSON.stringify(run.events, null, 1).slice(0, 6000)).toEqual({ status: 'SUCCEEDED', error: undefined });
    expect(run.attempts.map((a) => a.exitCode)).toEqual([137, 0]);
    expect(run.attempts[1]!.proc!.logs.some((l) => l.msg.startsWith('resuming from the checkpoint of attempt 1 (abandoned)'))).toBe(true);
    expect((await jobRuns(db, 'billing-run')).filter((r) => r.scheduled_time.toISOString() === time).map((r) => r.status)).toEqual(['abandoned', 'succeeded']);
    await expectOneInvoicePerActiveAccount(db);
    expect(alertsSince(alerts)).toEqual([]);
  });
});

describe('the backstop timeout', () => {
  it('6. stops a task still running at the job\'s timeout plus its grace, and sends one alert', async () => {
    // A table whose billing-run times out after 1 s, with 1 s to start and 2 s to stop: a backstop of 4 s.
    const short = synthesize({ ...BILLING, timeoutSeconds: 1 }, { stopTimeout: Duration.seconds(2), taskStartAllowance: Duration.seconds(1) });
    expect(short.definition.States.RunTask.TimeoutSeconds).toBe(4);
    // The container runs the real table (45 min), and waits (overlap: wait) for the job lock held here: it hangs.
    const holder = newClient({ connectionString: db.url });
    await holder.connect();
    await holder.query('SELECT pg_advisory_lock($1)', [lockKey('job:billing-run')]);
    try {
      const time = '2025-03-06T00:15:00.000Z';
      const alerts = fakeSns.messages.length;
      const started = Date.now();
      const run = await executeLocally(short, { scheduledTime: time }, env());
      expect(run).toMatchObject({ status: 'FAILED', error: EXECUTION_ERROR.alerted });
      expect(Date.now() - started).toBeGreaterThanOrEqual(4_000);
      expect(run.attempts).toHaveLength(1);
      // Stopped: SIGTERM, as StopTask sends it.
      const { code } = await run.attempts[0]!.proc!.exited;
      expect([0, 3]).toContain(code);
      const sent = alertsSince(alerts);
      expect(sent).toHaveLength(1);
      expect(sent[0]!.message).toContain('The scheduled job billing-run failed: its task passed the backstop timeout of 4 s and was stopped.');
      expect(sent[0]!.message).toContain('attempt 1: still running after 4 s (the backstop: timeout 1 s + start and stop grace); Step Functions stopped the task');
      expect((await jobRuns(db, 'billing-run')).filter((r) => r.scheduled_time.toISOString() === time && r.status === 'succeeded')).toEqual([]);
    } finally {
      await holder.end();
    }
    expect(await eventually(async () => (await db.advisoryLocks()) === 0, 5_000)).toBe(true);
  });
});
