/**
 * The safety net of a last-resort alert rule (a job's execution-status rule, the API's
 * deployment-failed rule): the rule's SNS target retries, keeps what it still cannot publish
 * in a dead-letter queue, and two alarms say so (failed invocations, dead letters). One
 * broken path (the topic's policy, its key) then cannot silence the alert without a trace.
 */
import { Duration, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as events from 'aws-cdk-lib/aws-events';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { JOB_DEFAULTS } from '../defaults.js';
import { AlertTarget } from './alerts.js';

export interface AlertSafetyNetProps {
  readonly rule: events.Rule;
  readonly topic: sns.ITopic;
  readonly message: events.RuleTargetInput;
  /** The alarms' names start with this. */
  readonly alarmNamePrefix: string;
  /** The runbook section the alarms link to. */
  readonly runbook: string;
}

/** An alert is worth publishing for a day; EventBridge retries with backoff within that. */
export const ALERT_RETRY_ATTEMPTS = 185;
export const ALERT_MAX_EVENT_AGE = Duration.hours(24);

export class AlertSafetyNet extends Construct {
  public readonly deadLetterQueue: sqs.Queue;
  public readonly failedInvocations: cloudwatch.Alarm;
  public readonly deadLetters: cloudwatch.Alarm;

  constructor(scope: Construct, id: string, props: AlertSafetyNetProps) {
    super(scope, id);
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(JOB_DEFAULTS.deadLetterRetentionDays),
    });
    Validations.of(this.deadLetterQueue).acknowledge({
      id: 'AwsSolutions-SQS3',
      reason: 'This queue is itself the dead-letter queue of an alert rule\'s target; its messages are read by a human (see the runbook), never re-driven automatically.',
    });
    props.rule.addTarget(new AlertTarget(props.topic, props.message, { deadLetterQueue: this.deadLetterQueue, retryAttempts: ALERT_RETRY_ATTEMPTS, maxEventAge: ALERT_MAX_EVENT_AGE }));

    const period = Duration.seconds(JOB_DEFAULTS.alarmPeriodSeconds);
    const atLeastOne = { threshold: 1, comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD, evaluationPeriods: 1, treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING };
    this.failedInvocations = new cloudwatch.Alarm(this, 'FailedInvocations', {
      alarmName: `${props.alarmNamePrefix}-failed-invocations`,
      alarmDescription: `The alert rule ${props.alarmNamePrefix} could not publish to its topic (it retries for ${ALERT_MAX_EVENT_AGE.toHours()} h, then keeps the event in its dead-letter queue). Runbook: ${props.runbook}`,
      metric: new cloudwatch.Metric({ namespace: 'AWS/Events', metricName: 'FailedInvocations', dimensionsMap: { RuleName: props.rule.ruleName }, statistic: cloudwatch.Stats.SUM, period }),
      ...atLeastOne,
    });
    this.deadLetters = new cloudwatch.Alarm(this, 'DeadLetters', {
      alarmName: `${props.alarmNamePrefix}-dead-letters`,
      alarmDescription: `An alert of ${props.alarmNamePrefix} was never published: it is in the rule's dead-letter queue. Runbook: ${props.runbook}`,
      metric: this.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ statistic: cloudwatch.Stats.MAXIMUM, period }),
      ...atLeastOne,
    });
    // The alarms publish as CloudWatch, not as the rule: a broken rule permission does not silence them.
    const action = new actions.SnsAction(props.topic);
    this.failedInvocations.addAlarmAction(action);
    this.deadLetters.addAlarmAction(action);
  }
}
