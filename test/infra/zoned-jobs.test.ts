/**
 * Jobs with a time zone: started by an EventBridge Scheduler schedule instead of a rule, with
 * everything the rule had (the scheduled time as the run key, retries, a dead-letter queue,
 * a least-privilege role, alarms on failed and dropped starts), and the default bus's rules
 * reported at synth.
 */
import { App, Duration, Stack } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import { Annotations, Match, type Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import { beforeAll, describe, expect, it } from 'vitest';
import { BENCH_TIME_ZONES, benchJobs } from '../../bench/jobs-table.js';
import { JOB_DEFAULTS } from '../../lib/defaults.js';
import { JOBS, type JobDefinition } from '../../lib/jobs.js';
import { SCHEDULED_TIME_ATTRIBUTE } from '../../lib/constructs/job-starter.js';
import { DEFAULT_BUS_RULE_QUOTA, defaultBusRules, reportDefaultBusRules } from '../../lib/constructs/rule-quota.js';
import { jobTemplate, resources, STACK_ID, synth, type Synthesized } from './synth.js';

const TABLE: readonly JobDefinition[] = JOBS;
const ZONED = TABLE.filter((j) => j.enabled && j.timeZone !== undefined);

function only(template: Template, type: string): Record<string, any> {
  const found = Object.values(resources(template, type));
  expect(found, type).toHaveLength(1);
  return found[0]!.Properties;
}

/** What the parent passes to a job's nested stack for `parameter`. */
function passed(s: Synthesized, name: string, parameter: string): unknown {
  const nested = s.stack.scheduledJobs.jobs.get(name)!.stack;
  const id = s.stack.resolve((nested.nestedStackResource as any).logicalId) as string;
  return s.template.toJSON().Resources[id].Properties.Parameters[parameter];
}

/** An IAM resource pattern as a RegExp over resolved names (`*` any characters). */
function iamPattern(joined: { 'Fn::Join': [string, unknown[]] }): RegExp {
  const text = joined['Fn::Join'][1].map((p) => (typeof p === 'string' ? p : '<ref>')).join('');
  return new RegExp(`^${text.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
}

let s: Synthesized;
beforeAll(() => {
  s = synth();
});

describe('a job with a time zone, as shipped', () => {
  it('is in the shipped table: weekly-export runs on Monday morning, Berlin time', () => {
    expect(ZONED.map((j) => [j.name, j.timeZone])).toEqual([['weekly-export', 'Europe/Berlin']]);
  });

  it('gets one Scheduler schedule in its zone, in a group of its own, and no rule', () => {
    for (const job of ZONED) {
      const t = jobTemplate(s, job.name);
      t.resourceCountIs('AWS::Events::Rule', 0);
      const schedule = only(t, 'AWS::Scheduler::Schedule');
      expect(schedule).toMatchObject({
        Name: `${STACK_ID}-${job.name}`,
        GroupName: `${STACK_ID}-${job.name}`,
        ScheduleExpression: job.schedule,
        ScheduleExpressionTimezone: job.timeZone,
        FlexibleTimeWindow: { Mode: 'OFF' },
        State: 'ENABLED',
      });
      expect(only(t, 'AWS::Scheduler::ScheduleGroup').Name).toBe(`${STACK_ID}-${job.name}`);
      const [machineId] = Object.keys(resources(t, 'AWS::StepFunctions::StateMachine'));
      expect(schedule.Target.Arn).toEqual({ Ref: machineId });
    }
  });

  it('passes Scheduler\'s scheduled time as the execution\'s scheduledTime, the run key', () => {
    for (const job of ZONED) {
      const { Target } = only(jobTemplate(s, job.name), 'AWS::Scheduler::Schedule');
      expect(JSON.parse(Target.Input)).toEqual({ scheduledTime: SCHEDULED_TIME_ATTRIBUTE });
      // Scheduler writes an ISO-8601 UTC time in place of the attribute (its guide's example).
      const filled = (Target.Input as string).replace(SCHEDULED_TIME_ATTRIBUTE, '2026-03-30T04:00:00Z');
      expect(JSON.parse(filled)).toEqual({ scheduledTime: '2026-03-30T04:00:00Z' });
    }
  });

  it('keeps the retries and a dead-letter queue that only the Scheduler role may write to', () => {
    for (const job of ZONED) {
      const t = jobTemplate(s, job.name);
      const { Target } = only(t, 'AWS::Scheduler::Schedule');
      expect(Target.RetryPolicy).toEqual({ MaximumRetryAttempts: JOB_DEFAULTS.retryAttempts, MaximumEventAgeInSeconds: JOB_DEFAULTS.maxEventAgeSeconds });
      expect(Target.DeadLetterConfig.Arn['Fn::GetAtt'][0]).toMatch(/DeadLetterQueue/);
      const queue = only(t, 'AWS::SQS::Queue');
      expect(queue).toMatchObject({ QueueName: `${STACK_ID}-${job.name}-schedule-dlq`, SqsManagedSseEnabled: true });
      expect(passed(s, job.name, Target.RoleArn.Ref)).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^JobsSchedulerRole/), 'Arn'] });
    }
    const [roleId, role] = Object.entries(resources(s.template, 'AWS::IAM::Role')).find(([id]) => id.startsWith('JobsSchedulerRole'))!;
    expect(role.Properties.AssumeRolePolicyDocument.Statement).toEqual([{
      Action: 'sts:AssumeRole',
      Effect: 'Allow',
      Principal: { Service: 'scheduler.amazonaws.com' },
      Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
    }]);
    const policy = Object.values(resources(s.template, 'AWS::IAM::Policy')).find((p) => p.Properties.Roles[0].Ref === roleId)!;
    const statements = policy.Properties.PolicyDocument.Statement as { Action: string; Resource: any }[];
    expect(statements.map((st) => st.Action)).toEqual(['states:StartExecution', 'sqs:SendMessage']);
    const queues = iamPattern(statements[1]!.Resource);
    for (const job of ZONED) expect(`arn:<ref>:sqs:<ref>:<ref>:${STACK_ID}-${job.name}-schedule-dlq`).toMatch(queues);
    // Not the queues of the jobs started by rules, nor any other queue of the stack's prefix.
    expect(`arn:<ref>:sqs:<ref>:<ref>:${STACK_ID}-billing-run`).not.toMatch(queues);
  });

  it('alarms on failed and dropped starts of its own schedule group, and on its dead letters', () => {
    for (const job of ZONED) {
      const alarms: Record<string, Record<string, any>> = Object.fromEntries(Object.values(resources(jobTemplate(s, job.name), 'AWS::CloudWatch::Alarm'))
        .map((a) => [a.Properties.AlarmName.slice(`${STACK_ID}-${job.name}-`.length), a.Properties]));
      expect(Object.keys(alarms).sort()).toEqual(['dead-letters', 'delivery', 'dropped', 'executions-aborted', 'executions-failed', 'executions-timed-out', 'missed-run']);
      const group = [{ Name: 'ScheduleGroup', Value: `${STACK_ID}-${job.name}` }];
      expect(alarms.delivery).toMatchObject({ Namespace: 'AWS/Scheduler', MetricName: 'TargetErrorCount', Dimensions: group, Threshold: 1 });
      expect(alarms.dropped).toMatchObject({ Namespace: 'AWS/Scheduler', MetricName: 'InvocationDroppedCount', Dimensions: group, Threshold: 1 });
      expect(alarms['dead-letters']).toMatchObject({ Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible' });
      for (const alarm of Object.values(alarms)) {
        expect(passed(s, job.name, alarm.AlarmActions[0].Ref)).toEqual({ Ref: expect.stringMatching(/^AlertsTopic/) });
        expect(alarm.AlarmDescription).toMatch(/Runbook: docs\/operations\.md#/);
      }
    }
  });
});

describe('a generated table of zoned jobs: daily, weekly and rate(), in five zones', () => {
  const jobs = benchJobs(30, { zoned: true });
  let zoned: Synthesized;
  beforeAll(() => {
    // Jobs that may all run at once need a database with the connections for them (lib/pool-budget.ts).
    zoned = synth({ jobs, database: { instanceType: 'm6g.2xlarge' } });
  }, 300_000);

  it('covers every kind and zone', () => {
    expect(new Set(jobs.map((j) => j.timeZone))).toEqual(new Set(BENCH_TIME_ZONES));
    expect(jobs.some((j) => /^cron\(\S+ \S+ \* \* \? \*\)$/.test(j.schedule))).toBe(true);
    expect(jobs.some((j) => / \? \* MON \*\)$/.test(j.schedule))).toBe(true);
    expect(jobs.some((j) => j.schedule.startsWith('rate('))).toBe(true);
  });

  it('synthesizes one schedule per job, in its zone, and adds no job rule to the default bus', () => {
    for (const job of jobs) {
      const t = jobTemplate(zoned, job.name);
      t.resourceCountIs('AWS::Events::Rule', 0);
      t.hasResourceProperties('AWS::Scheduler::Schedule', { ScheduleExpression: job.schedule, ScheduleExpressionTimezone: job.timeZone });
    }
    // The execution-status rule and the API's deployment rule only.
    expect(defaultBusRules(zoned.stack)).toHaveLength(2);
    expect(zoned.stack.defaultBusRules).toBe(2);
  });

  it('is clean under cdk-nag', () => {
    expect(new AwsSolutionsChecks().validateScope(zoned.app).violations).toEqual([]);
  });
});

describe('the default bus\'s rules, reported at synth', () => {
  it('counts one rule per job without a time zone plus the stack\'s own, as an info line', () => {
    const ruled = TABLE.filter((j) => j.enabled && j.timeZone === undefined).length;
    expect(s.stack.defaultBusRules).toBe(ruled + 2);
    Annotations.fromStack(s.stack).hasInfo(`/${STACK_ID}`, Match.stringLikeRegexp(`this stack adds ${ruled + 2} .*quota is ${DEFAULT_BUS_RULE_QUOTA}`));
  });

  it('warns once the stack alone passes the quota, and says what to do', () => {
    const stack = new Stack(new App(), 'Rules');
    const bus = new events.EventBus(stack, 'OwnBus');
    for (let i = 0; i <= DEFAULT_BUS_RULE_QUOTA; i++) new events.Rule(stack, `Rule${i}`, { schedule: events.Schedule.rate(Duration.hours(1)) });
    // A rule on another bus does not count.
    new events.Rule(stack, 'OnOwnBus', { eventBus: bus, eventPattern: { source: ['acme'] } });
    expect(reportDefaultBusRules(stack)).toBe(DEFAULT_BUS_RULE_QUOTA + 1);
    Annotations.fromStack(stack).hasWarning('/Rules', Match.stringLikeRegexp(`adds ${DEFAULT_BUS_RULE_QUOTA + 1} .*give jobs a time zone`));
  });
});
