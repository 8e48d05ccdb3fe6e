/**
 * The safety net of the last-resort alerts, in the synthesized templates: the job
 * execution-status rule and the API's deployment-failed rule retry, keep what they cannot
 * publish in a dead-letter queue and alarm on both; each job's state machine alarms on its
 * failed, timed-out and aborted executions, so one broken alert path cannot silence every alert.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { JOBS } from '../../lib/jobs.js';
import { ALERT_MAX_EVENT_AGE, ALERT_RETRY_ATTEMPTS } from '../../lib/constructs/alert-safety-net.js';
import { jobTemplate, resources, STACK_ID, synth, type Synthesized } from './synth.js';

let s: Synthesized;
beforeAll(() => {
  s = synth();
});

const alarmNamed = (template: ReturnType<typeof jobTemplate>, name: string) =>
  Object.values(resources(template, 'AWS::CloudWatch::Alarm')).find((a) => a.Properties.AlarmName === name)?.Properties;

describe('the last-resort alert rules', () => {
  it.each([
    ['the job execution-status rule', 'job-execution-alerts', /Step Functions Execution Status Change/],
    ['the API deployment-failed rule', 'deployment-failed-alerts', /ECS Deployment State Change/],
  ])('%s retries, has a dead-letter queue, and alarms on failed invocations and dead letters', (_what, alarmPrefix, detailType) => {
    const rules = Object.values(resources(s.template, 'AWS::Events::Rule')).filter((r) => detailType.test(JSON.stringify(r.Properties.EventPattern)));
    expect(rules).toHaveLength(1);
    const [target] = rules[0]!.Properties.Targets;
    expect(target.RetryPolicy).toEqual({ MaximumRetryAttempts: ALERT_RETRY_ATTEMPTS, MaximumEventAgeInSeconds: ALERT_MAX_EVENT_AGE.toSeconds() });
    expect(target.DeadLetterConfig.Arn['Fn::GetAtt'][1]).toBe('Arn');
    const queueId = target.DeadLetterConfig.Arn['Fn::GetAtt'][0];
    expect(resources(s.template, 'AWS::SQS::Queue')[queueId]).toBeDefined();
    // EventBridge may send to it: the queue's policy names the rule.
    const policies = Object.values(resources(s.template, 'AWS::SQS::QueuePolicy')).filter((p) => JSON.stringify(p.Properties.Queues).includes(queueId));
    expect(JSON.stringify(policies)).toContain('events.amazonaws.com');

    const failed = alarmNamed(s.template, `${STACK_ID}-${alarmPrefix}-failed-invocations`);
    expect(failed).toMatchObject({ Namespace: 'AWS/Events', MetricName: 'FailedInvocations', Threshold: 1 });
    const dead = alarmNamed(s.template, `${STACK_ID}-${alarmPrefix}-dead-letters`);
    expect(dead).toMatchObject({ Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible', Threshold: 1 });
    for (const alarm of [failed!, dead!]) {
      expect(alarm.AlarmActions).toHaveLength(1);
      expect(alarm.AlarmDescription).toMatch(/Runbook: docs\/operations\.md#/);
    }
  });
});

describe('each job\'s state machine', () => {
  it.each(JOBS.filter((j) => j.enabled).map((j) => j.name))('%s alarms on ExecutionsFailed, ExecutionsTimedOut and ExecutionsAborted', (name) => {
    const template = jobTemplate(s, name);
    for (const [what, metric] of [['failed', 'ExecutionsFailed'], ['timed-out', 'ExecutionsTimedOut'], ['aborted', 'ExecutionsAborted']] as const) {
      const alarm = alarmNamed(template, `${STACK_ID}-${name}-executions-${what}`);
      expect(alarm, what).toMatchObject({ Namespace: 'AWS/States', MetricName: metric, Threshold: 1, Dimensions: [{ Name: 'StateMachineArn', Value: expect.anything() }] });
      expect(alarm!.AlarmActions).toHaveLength(1);
    }
  });
});
