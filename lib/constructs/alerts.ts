/**
 * The one place every alert goes: an encrypted SNS topic with an email subscription.
 */
import type * as events from 'aws-cdk-lib/aws-events';
import type { aws_events as eventsRefs } from 'aws-cdk-lib/interfaces';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { addToDeadLetterQueueResourcePolicy } from 'aws-cdk-lib/aws-events-targets';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { ArnFormat, Duration, Stack, Token } from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { onlyServicesGetGrants } from './guard.js';
import { throwIfProblems } from './validation.js';

/** The alertEmail that opts out of the email subscription: the topic is subscribed elsewhere. */
export const SUBSCRIBED_ELSEWHERE = 'none';

export interface AlertsProps {
  /**
   * The address that receives every alert; AWS mails it a confirmation link first.
   * `'none'` (SUBSCRIBED_ELSEWHERE) creates no subscription, for a topic subscribed by other means.
   */
  readonly email: string;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
/** RFC 2606's example domains: an address there reaches nobody. */
const RESERVED_DOMAIN = /@(.+\.)?(example\.(com|net|org)|example|invalid|test|localhost)$/i;
/** The domains of a pasted example (`oncall@yourcompany.com`): a placeholder, not an address. */
const PLACEHOLDER_DOMAIN = /@(.+\.)?(your|my)[-_]?(company|domain|org|organi[sz]ation|team|business|corp)\.[a-z.]+$/i;
// The example has no address in it: one that synth accepts would be deployed as pasted.
const HOW_TO_SET = `set it with \`cdk deploy -c alertEmail=<your on-call team's address>\` or in cdk.json's context, or to "${SUBSCRIBED_ELSEWHERE}" when the alert topic is subscribed elsewhere`;

/** Every problem with `props`. */
export function validateAlertsProps(props: Partial<AlertsProps>): string[] {
  const email = props.email;
  if (email === undefined || email === '') return [`alertEmail must be set, since every alarm and crash alert is mailed to it: ${HOW_TO_SET}`];
  if (Token.isUnresolved(email) || email === SUBSCRIBED_ELSEWHERE) return [];
  if (!EMAIL.test(email)) return [`alertEmail must be an email address, got ${JSON.stringify(email)}: ${HOW_TO_SET}`];
  if (RESERVED_DOMAIN.test(email)) return [`alertEmail is ${email}, a reserved example domain that reaches nobody: ${HOW_TO_SET}`];
  if (PLACEHOLDER_DOMAIN.test(email)) return [`alertEmail is ${email}, a placeholder from an example, not your address: ${HOW_TO_SET}`];
  return [];
}

/** The encryption-context key SNS sets when it asks KMS for a topic's data key. */
export const SNS_TOPIC_CONTEXT = 'kms:EncryptionContext:aws:sns:topicArn';

/** Every SNS topic of the stack's account and region. */
function alertTopicsOf(stack: Stack): string {
  return stack.formatArn({ service: 'sns', resource: '*', arnFormat: ArnFormat.NO_RESOURCE_NAME });
}

export class Alerts extends Construct {
  /** The alert topic. CloudWatch alarms, EventBridge rules and the jobs publish here. */
  public readonly topic: sns.Topic;
  /** The topic's customer-managed key. */
  public readonly key: kms.Key;

  constructor(scope: Construct, id: string, props: AlertsProps) {
    throwIfProblems('The alert topic', validateAlertsProps(props));
    super(scope, id);
    const stack = Stack.of(this);
    // Only this account's alarms and rules may publish to the topic (no confused deputy).
    const fromThisAccount = { StringEquals: { 'aws:SourceAccount': stack.account } };
    const alarms = `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:*`;

    this.key = new kms.Key(this, 'Key', {
      description: 'Encrypts the alert topic',
      enableKeyRotation: true,
    });
    onlyServicesGetGrants(this.key);
    // The AWS-managed SNS key cannot be used here: CloudWatch and EventBridge publish to an
    // encrypted topic only when the key's policy lets them, and only a customer key's policy can.
    this.key.addToResourcePolicy(new iam.PolicyStatement({
      sid: 'AlarmsAndRulesPublishToTheAlertTopic',
      principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com'), new iam.ServicePrincipal('events.amazonaws.com')],
      actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
      resources: ['*'],
      // SNS asks KMS for the data key on the publisher's behalf, with the topic's ARN as the
      // encryption context; whether aws:SourceAccount reaches the key policy on that path is not
      // documented, so the condition is on the context SNS always sends: topics of this account
      // only (naming this topic would be a cycle: the topic names the key). The topic policy
      // names each alarm and rule. docs/infrastructure.md, "Alerts", cites the passages.
      conditions: { StringLike: { [SNS_TOPIC_CONTEXT]: alertTopicsOf(stack) } },
    }));

    this.topic = new sns.Topic(this, 'Topic', {
      displayName: 'Alerts',
      masterKey: this.key,
      enforceSSL: true,
    });
    // The topic policy CloudFormation writes replaces SNS's default one (which let the account's
    // alarms publish), so CloudWatch needs its own statement or every alarm action is denied.
    this.topic.addToResourcePolicy(new iam.PolicyStatement({
      sid: 'AlarmsPublishToTheAlertTopic',
      principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
      actions: ['sns:Publish'],
      resources: [this.topic.topicArn],
      conditions: { ...fromThisAccount, ArnLike: { 'aws:SourceArn': alarms } },
    }));
    if (props.email !== SUBSCRIBED_ELSEWHERE) this.topic.addSubscription(new subscriptions.EmailSubscription(props.email));
  }
}

/**
 * An EventBridge rule target that publishes `message` to the alert topic. Unlike
 * `targets.SnsTopic`, which lets every EventBridge rule of any account publish, the topic
 * policy statement it adds names this rule (aws:SourceArn) and this account (aws:SourceAccount).
 */
/** What a last-resort alert rule does when it cannot publish: retry, then keep the event. */
export interface AlertTargetDelivery {
  /** Holds an event EventBridge could not publish after its retries. */
  readonly deadLetterQueue: sqs.IQueue;
  /** Publish attempts after the first. */
  readonly retryAttempts: number;
  readonly maxEventAge: Duration;
}

export class AlertTarget implements events.IRuleTarget {
  constructor(
    private readonly topic: sns.ITopic,
    private readonly message: events.RuleTargetInput,
    /** @default - EventBridge's default retries, no dead-letter queue */
    private readonly delivery?: AlertTargetDelivery,
  ) {}

  bind(rule: eventsRefs.IRuleRef): events.RuleTargetConfig {
    if (this.delivery) {
      addToDeadLetterQueueResourcePolicy(rule, this.delivery.deadLetterQueue);
      return {
        ...this.bindTopic(rule),
        deadLetterConfig: { arn: this.delivery.deadLetterQueue.queueArn },
        retryPolicy: { maximumRetryAttempts: this.delivery.retryAttempts, maximumEventAgeInSeconds: this.delivery.maxEventAge.toSeconds() },
      };
    }
    return this.bindTopic(rule);
  }

  private bindTopic(rule: eventsRefs.IRuleRef): events.RuleTargetConfig {
    this.topic.addToResourcePolicy(new iam.PolicyStatement({
      principals: [new iam.ServicePrincipal('events.amazonaws.com')],
      actions: ['sns:Publish'],
      resources: [this.topic.topicArn],
      conditions: {
        StringEquals: { 'aws:SourceAccount': Stack.of(rule).account },
        ArnEquals: { 'aws:SourceArn': rule.ruleRef.ruleArn },
      },
    }));
    return { arn: this.topic.topicArn, input: this.message, targetResource: this.topic };
  }
}
