/**
 * Retention for a new RDS instance's exported logs.
 *
 * RDS creates each exported log's group itself, at its first line, as
 * /aws/rds/instance/<identifier>/<log>, with no retention: the logs would never expire, and
 * the stack would not know them. A LogRetention custom resource (the CDK's, the one
 * `cloudwatchLogsRetention` uses) creates the group when it is missing, or adopts the one RDS
 * made, and sets its retention. It needs only the identifier CloudFormation generated, so the
 * instance is not touched. An AWS::Logs::LogGroup would need that name before the instance
 * exists: a fixed `instanceIdentifier`, which replaces a deployed instance and leaves a fixed
 * name behind a failed create; and on a deployed stack the group exists already, which fails
 * the log group's create (docs/infrastructure.md, "The database's logs").
 */
import { ArnFormat, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as rds from 'aws-cdk-lib/aws-rds';
import type { Construct } from 'constructs';
import { nagText } from './nag.js';

export interface DatabaseLogsOptions {
  /** The exported logs, as in `cloudwatchLogsExports`. */
  readonly logs: readonly string[];
  /** How long each group keeps its lines. @default logs.RetentionDays.ONE_MONTH */
  readonly retention?: logs.RetentionDays;
  /** The data's removal: kept with a retained database's snapshot, deleted with a disposable one. */
  readonly retain: boolean;
}

/** Adds one LogRetention per exported log (ids `LogRetention-<log>`) to `scope`. */
export function retainDatabaseLogs(scope: Construct, instance: rds.DatabaseInstance, options: DatabaseLogsOptions): ReadonlyMap<string, logs.LogRetention> {
  const retentions = new Map<string, logs.LogRetention>();
  for (const name of options.logs) {
    retentions.set(name, new logs.LogRetention(scope, `LogRetention-${name}`, {
      logGroupName: `/aws/rds/instance/${instance.instanceIdentifier}/${name}`,
      retention: options.retention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: options.retain ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY,
    }));
  }

  // The CDK makes one LogRetention function per stack, a child of the stack under a fixed id.
  const stack = Stack.of(scope);
  const fn = stack.node.children.find((c) => c.node.id.startsWith('LogRetention'))!;
  Validations.of(fn).acknowledge({
    id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
    reason: 'The AWS managed policy for a Lambda function\'s own logs; it grants nothing else.',
  });
  Validations.of(fn).acknowledge({
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason: 'The CDK grants its LogRetention function logs:PutRetentionPolicy and DeleteRetentionPolicy on "*"; they change a group\'s retention only.',
  });
  if (!options.retain) {
    for (const name of options.logs) {
      const arn = stack.formatArn({ service: 'logs', resource: 'log-group', resourceName: `/aws/rds/instance/${instance.instanceIdentifier}/${name}:*`, arnFormat: ArnFormat.COLON_RESOURCE_NAME });
      Validations.of(fn).acknowledge({
        id: `AwsSolutions-IAM5[Resource::${nagText(scope, arn)}]`,
        reason: 'logs:DeleteLogGroup of the instance\'s own log group, when the stack deletes a disposable database; the :* covers its log streams.',
      });
    }
  }
  return retentions;
}
