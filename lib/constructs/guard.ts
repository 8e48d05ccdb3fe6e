/**
 * The AWS Control Tower proactive controls, as cfn-guard rules run by
 * @cdklabs/cdk-validator-cfnguard at synth (`npm run check:guard`).
 *
 * What could be fixed is fixed where the resource is made. What remains is acknowledged
 * here, in one table, each with the reason it does not apply to this stack: a new finding
 * then fails the check until someone fixes it or adds a row.
 */
import { CfnResource, Stack, Token, Validations, type IPolicyValidationPluginBeta1 } from 'aws-cdk-lib';
import type * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as rds from 'aws-cdk-lib/aws-rds';
import type { IConstruct } from 'constructs';

/** The plugin's name: an acknowledgement's id is `<plugin>::<rule name>`. */
export const GUARD_PLUGIN = 'cdk-validator-cfnguard';

export interface GuardAcknowledgement {
  /** The Control Tower control, for the reader. */
  readonly control: string;
  /** The guard rule's name, as the plugin's report spells it. */
  readonly rule: string;
  /** The CloudFormation type of the resources it applies to. */
  readonly type: string;
  /** Why the control does not apply. */
  readonly reason: string;
  /** Applies only to the resources this accepts. @default - every resource of the type */
  readonly when?: (resource: CfnResource) => boolean;
}

const listenerForwardsHttp = (r: CfnResource) => (r as elbv2.CfnListener).protocol === 'HTTP'
  && !JSON.stringify(Stack.of(r).resolve((r as elbv2.CfnListener).defaultActions)).includes('"redirect"');

const DEV_STAGE_PROTECTION = 'Off on purpose in the dev stage (or with context deletionProtection=false): a failed first deploy must roll back, and a teardown finish, without a manual step. The prod stage turns it on and passes.';
const albAttribute = (r: CfnResource, key: string) => (Stack.of(r).resolve((r as elbv2.CfnLoadBalancer).loadBalancerAttributes) as { key: string; value: string }[] | undefined)
  ?.find((a) => a.key === key)?.value;

export const GUARD_ACKNOWLEDGEMENTS: readonly GuardAcknowledgement[] = [
  {
    control: 'CT.ELASTICLOADBALANCING.PR.5', rule: 'elbv2_deletion_protection_enabled_check', type: 'AWS::ElasticLoadBalancingV2::LoadBalancer',
    reason: DEV_STAGE_PROTECTION,
    when: (r) => albAttribute(r, 'deletion_protection.enabled') !== 'true',
  },
  {
    control: 'CT.RDS.PR.13', rule: 'rds_instance_deletion_protection_enabled_check', type: 'AWS::RDS::DBInstance',
    reason: DEV_STAGE_PROTECTION,
    when: (r) => Stack.of(r).resolve((r as rds.CfnDBInstance).deletionProtection) !== true,
  },
  {
    control: 'CT.RDS.PR.1', rule: 'rds_instance_multi_az_support_check', type: 'AWS::RDS::DBInstance',
    reason: 'Single-AZ keeps the dev stage cheap (a second instance doubles the database bill); backups still protect its data. The prod stage is Multi-AZ and passes.',
    when: (r) => Stack.of(r).resolve((r as rds.CfnDBInstance).multiAz) !== true,
  },
  {
    control: 'CT.CLOUDWATCH.PR.2', rule: 'cloudwatch_log_group_retention_period_check', type: 'AWS::Logs::LogGroup',
    reason: 'A retention under a year is chosen on purpose: the dev stage\'s default (a week: it holds no customer history worth the storage) or an explicit logRetentionDays. The prod stage keeps them 365 days and passes.',
    when: (r) => ((r as logs.CfnLogGroup).retentionInDays ?? Infinity) < 365,
  },
  {
    control: 'CT.ELASTICLOADBALANCING.PR.1', rule: 'alb_http_to_https_redirection_check', type: 'AWS::ElasticLoadBalancingV2::Listener',
    reason: 'Without a certificate (context domainName or certificateArn; prod needs one unless allowHttp=true) HTTP is the only listener there is to serve the API; with one, port 80 redirects to HTTPS and this passes.',
    when: listenerForwardsHttp,
  },
  {
    control: 'CT.ELASTICLOADBALANCING.PR.6', rule: 'elbv2_logging_enabled_check', type: 'AWS::ElasticLoadBalancingV2::LoadBalancer',
    reason: 'Access logs need the region\'s log-delivery account in the bucket policy, which an environment-agnostic synth cannot know; with context account and region they are on and this passes.',
    when: (r) => Token.isUnresolved(Stack.of(r).region),
  },
  {
    control: 'CT.LAMBDA.PR.3', rule: 'lambda_inside_vpc_check', type: 'AWS::Lambda::Function',
    reason: 'The only functions are deploy-time custom resource handlers: the CDK\'s own (e.g. removing the default security group\'s rules, setting the database log groups\' retention) and the migrations resource\'s, which starts and watches the migrations task; they call AWS APIs only and touch no data in the VPC (the task they start runs in the private subnets).',
  },
  {
    control: 'CT.RDS.PR.2', rule: 'rds_instance_enhanced_monitoring_enabled_check', type: 'AWS::RDS::DBInstance',
    reason: 'RDS\'s standard one-minute CloudWatch metrics cover the alarms and the runbook; enhanced monitoring (an extra role and per-second OS metrics) is for tuning sessions and can be turned on then.',
  },
  {
    control: 'CT.RDS.PR.20', rule: 'rds_instance_no_default_ports_check', type: 'AWS::RDS::DBInstance',
    reason: 'The instance sits in isolated subnets and its security group admits only the API and job tasks; a non-standard port would add no protection and break the default tooling.',
  },
  {
    control: 'CT.RDS.PR.30', rule: 'rds_storage_encrypted_kms_key_check', type: 'AWS::RDS::DBInstance',
    reason: 'Storage is encrypted with the AWS managed aws/rds key. A customer key matters for sharing snapshots across accounts, which this stack never does, and would have to outlive every retained snapshot.',
  },
  {
    control: 'CT.RDS.PR.7', rule: 'rds_instance_iam_authentication_enabled_check', type: 'AWS::RDS::DBInstance',
    reason: 'The tasks authenticate with the password ECS injects from Secrets Manager over verified TLS; turning IAM authentication on without using it would only pretend to satisfy the control.',
  },
  {
    control: 'CT.S3.PR.10', rule: 's3_bucket_default_encryption_kms_check', type: 'AWS::S3::Bucket',
    reason: 'The log bucket must use S3-managed keys: the load balancer delivers access logs to no other kind. The export bucket uses them too, so exports need no key grants; both deny plain HTTP and public access.',
  },
  {
    control: 'CT.S3.PR.11', rule: 's3_bucket_versioning_enabled_check', type: 'AWS::S3::Bucket',
    reason: 'Logs are written once and expire by lifecycle; an export is regenerated by rerunning its job. Versioning would only keep every expired object\'s last version.',
  },
  {
    control: 'CT.S3.PR.2', rule: 's3_bucket_logging_enabled_check', type: 'AWS::S3::Bucket',
    reason: 'This is the log bucket itself: logging its own access into itself would loop, and a second bucket for it would hold only noise. The export bucket logs here and passes.',
    when: (r) => r.node.path.endsWith('/LogBucket/Resource'),
  },
  {
    control: 'CT.S3.PR.4', rule: 's3_event_notifications_enabled_check', type: 'AWS::S3::Bucket',
    reason: 'Nothing consumes these buckets\' events: exports are fetched by people, logs by Athena or the console.',
  },
  {
    control: 'CT.S3.PR.9', rule: 's3_bucket_object_lock_enabled_check', type: 'AWS::S3::Bucket',
    reason: 'Both buckets expire their objects by lifecycle rules (logs after 90 days, exports after a year), which Object Lock retention would block.',
  },
  {
    control: 'CT.SQS.PR.1', rule: 'sqs_dlq_check', type: 'AWS::SQS::Queue',
    reason: 'These queues are themselves dead-letter queues of EventBridge targets; a human reads them (see the runbook), nothing re-drives them.',
    when: (r) => r.node.path.includes('/DeadLetterQueue/'),
  },
];

/** Acknowledges, on each matching resource under `scope`, the rules of GUARD_ACKNOWLEDGEMENTS. */
export function acknowledgeGuardFindings(scope: IConstruct): void {
  for (const construct of scope.node.findAll()) {
    if (!CfnResource.isCfnResource(construct)) continue;
    for (const ack of GUARD_ACKNOWLEDGEMENTS) {
      if (ack.type !== construct.cfnResourceType || (ack.when && !ack.when(construct))) continue;
      Validations.of(construct).acknowledge({ id: `${GUARD_PLUGIN}::${ack.rule}`, reason: `${ack.control}: ${ack.reason}` });
    }
  }
}

/**
 * The cfn-guard validation plugin with the Control Tower rules. Its violations carry no
 * severity, and once any finding is acknowledged the CDK counts only "error" ones as failing;
 * so each is marked an error here, or the rest would pass unseen.
 */
export async function guardPlugin(): Promise<IPolicyValidationPluginBeta1> {
  const { CfnGuardValidator } = await import('@cdklabs/cdk-validator-cfnguard');
  // The report of a whole stack exceeds Node's default 1 MiB child-process buffer.
  const guard = new CfnGuardValidator({ controlTowerRulesEnabled: true, maxBuffer: 64 * 1024 * 1024 });
  return {
    name: guard.name,
    version: guard.version,
    ruleIds: guard.ruleIds,
    validate(context) {
      const report = guard.validate(context);
      return { ...report, violations: report.violations.map((v) => ({ ...v, severity: v.severity ?? 'error' })) };
    },
  };
}

/**
 * CT.KMS.PR.3: only AWS services, on behalf of a resource, may create grants on `key` (EBS,
 * RDS and the like do so); no principal may hand out the key's use by a grant of its own.
 */
export function onlyServicesGetGrants(key: kms.Key): void {
  key.addToResourcePolicy(new iam.PolicyStatement({
    sid: 'OnlyAwsServicesCreateGrants',
    effect: iam.Effect.DENY,
    principals: [new iam.AnyPrincipal()],
    actions: ['kms:CreateGrant'],
    resources: ['*'],
    conditions: { BoolIfExists: { 'kms:GrantIsForAWSResource': 'false', 'aws:PrincipalIsAWSService': 'false' } },
  }));
}
