/**
 * What starts a job's execution on its schedule, with the scheduled time as its input (the
 * run key), retries, and a dead-letter queue for the starts that still failed:
 *
 * - a job without a time zone: an EventBridge rule, in UTC, on the account's default bus;
 * - a job with one: an EventBridge Scheduler schedule with ScheduleExpressionTimezone, in a
 *   schedule group of its own, because Scheduler's metrics (AWS/Scheduler) are per group, and
 *   the job's alarms need its own. Schedules are not rules: they do not count against the
 *   default bus's quota of rules (lib/constructs/rule-quota.ts).
 */
import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct } from 'constructs';
import type { JobDefinition } from '../jobs.js';

/** Scheduler's placeholder for the invocation's scheduled time, e.g. 2022-03-22T18:59:43Z (its guide, "Adding context attributes"). */
export const SCHEDULED_TIME_ATTRIBUTE = '<aws.scheduler.scheduled-time>';

/** The suffix of every job's dead-letter queue name (a zoned job's Scheduler role may send to these queues only); the name predates rules' queues having it. */
export const SCHEDULE_DLQ_SUFFIX = '-schedule-dlq';

export interface JobStarterOptions {
  readonly job: JobDefinition;
  /** The rule's, or the schedule's and its group's, name: `<prefix>-<job>`. */
  readonly name: string;
  readonly stateMachine: sfn.IStateMachine;
  readonly deadLetterQueue: sqs.IQueue;
  /** Retries of a failed StartExecution. */
  readonly retryAttempts: number;
  /** A start older than this is dropped (into the dead-letter queue). */
  readonly maxEventAge: Duration;
  /** The role a rule starts the execution with. */
  readonly eventsRoleArn: string;
  /** The role a schedule starts the execution with; required for a job with a time zone. */
  readonly schedulerRoleArn?: string;
}

export type JobStarter =
  | { readonly kind: 'rule'; readonly rule: events.Rule }
  | { readonly kind: 'schedule'; readonly schedule: scheduler.CfnSchedule; readonly group: scheduler.CfnScheduleGroup };

/** Whether the job is started by a Scheduler schedule (it has a time zone) rather than a rule. */
export function startsBySchedule(job: JobDefinition): boolean {
  return job.timeZone !== undefined;
}

export function addJobStarter(scope: Construct, o: JobStarterOptions): JobStarter {
  const description = `${o.job.name}: ${o.job.description}`.slice(0, 512);
  if (!startsBySchedule(o.job)) {
    const rule = new events.Rule(scope, 'Rule', {
      ruleName: o.name,
      description,
      schedule: events.Schedule.expression(o.job.schedule),
    });
    rule.addTarget(new targets.SfnStateMachine(o.stateMachine, {
      // The event's time is the run key. A field used as a JSON value, never inside a quoted
      // string: EventBridge writes it as JSON, so the input stays valid whatever it holds.
      input: events.RuleTargetInput.fromObject({ scheduledTime: events.EventField.time }),
      role: iam.Role.fromRoleArn(scope, 'EventsRole', o.eventsRoleArn, { mutable: false }),
      retryAttempts: o.retryAttempts,
      maxEventAge: o.maxEventAge,
      deadLetterQueue: o.deadLetterQueue,
    }));
    return { kind: 'rule', rule };
  }
  if (o.schedulerRoleArn === undefined) throw new Error(`job ${o.job.name} has a time zone but no Scheduler role was given`);
  const group = new scheduler.CfnScheduleGroup(scope, 'ScheduleGroup', { name: o.name });
  const schedule = new scheduler.CfnSchedule(scope, 'Schedule', {
    name: o.name,
    groupName: o.name,
    description,
    scheduleExpression: o.job.schedule,
    scheduleExpressionTimezone: o.job.timeZone,
    // The run key is the scheduled time: a flexible window would only delay the run.
    flexibleTimeWindow: { mode: 'OFF' },
    state: 'ENABLED',
    target: {
      arn: o.stateMachine.stateMachineArn,
      roleArn: o.schedulerRoleArn,
      // The attribute is always an ISO-8601 UTC time, so it is safe inside the quoted string.
      input: JSON.stringify({ scheduledTime: SCHEDULED_TIME_ATTRIBUTE }),
      retryPolicy: { maximumRetryAttempts: o.retryAttempts, maximumEventAgeInSeconds: o.maxEventAge.toSeconds() },
      deadLetterConfig: { arn: o.deadLetterQueue.queueArn },
    },
  });
  schedule.node.addDependency(group);
  return { kind: 'schedule', schedule, group };
}
