/**
 * The one place every alert goes: an encrypted SNS topic with an email subscription.
 */
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { Annotations, Stack, Token } from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { throwIfProblems } from './validation.js';

export interface AlertsProps {
  /** The address that receives every alert; AWS mails it a confirmation link first. */
  readonly email: string;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
/** RFC 2606's example domains: the placeholder cdk.json ships with is one. */
const RESERVED_DOMAIN = /@(.+\.)?(example\.(com|net|org)|example|invalid|test|localhost)$/i;

/** Every problem with `props`. */
export function validateAlertsProps(props: Partial<AlertsProps>): string[] {
  if (props.email === undefined || props.email === '') return ['alertEmail must be set: every alarm and crash alert is mailed to it'];
  if (!Token.isUnresolved(props.email) && !EMAIL.test(props.email)) return [`alertEmail must be an email address, got ${JSON.stringify(props.email)}`];
  return [];
}

export class Alerts extends Construct {
  /** The alert topic. CloudWatch alarms, EventBridge rules and the jobs publish here. */
  public readonly topic: sns.Topic;
  /** The topic's customer-managed key. */
  public readonly key: kms.Key;

  constructor(scope: Construct, id: string, props: AlertsProps) {
    throwIfProblems('The alerts', validateAlertsProps(props));
    super(scope, id);

    this.key = new kms.Key(this, 'Key', {
      description: 'Encrypts the alert topic',
      enableKeyRotation: true,
    });
    // The AWS-managed SNS key cannot be used here: CloudWatch and EventBridge publish to an
    // encrypted topic only when the key's policy lets them, and only a customer key's policy can.
    this.key.addToResourcePolicy(new iam.PolicyStatement({
      sid: 'AlarmsAndRulesPublishToTheAlertTopic',
      principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com'), new iam.ServicePrincipal('events.amazonaws.com')],
      actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
      resources: ['*'],
    }));

    this.topic = new sns.Topic(this, 'Topic', {
      displayName: 'Alerts',
      masterKey: this.key,
      enforceSSL: true,
    });
    // The topic policy CloudFormation writes replaces SNS's default one (which let the account's
    // alarms publish), so CloudWatch needs its own statement or every alarm action is denied.
    const stack = Stack.of(this);
    this.topic.addToResourcePolicy(new iam.PolicyStatement({
      sid: 'AlarmsPublishToTheAlertTopic',
      principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
      actions: ['sns:Publish'],
      resources: [this.topic.topicArn],
      conditions: {
        StringEquals: { 'aws:SourceAccount': stack.account },
        ArnLike: { 'aws:SourceArn': `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:*` },
      },
    }));
    this.topic.addSubscription(new subscriptions.EmailSubscription(props.email));
    if (!Token.isUnresolved(props.email) && RESERVED_DOMAIN.test(props.email)) {
      Annotations.of(this).addWarningV2('ecs-saas-backend:alertEmailPlaceholder',
        `alertEmail is ${props.email}, a reserved example domain: no alert will reach anyone. Set alertEmail in cdk.json or with -c alertEmail=... before deploying.`);
    }
  }
}
