/**
 * The stack's S3 buckets: the export bucket (weekly-export writes CSV there) and the log
 * bucket (ALB access logs, the export bucket's server access logs, VPC flow logs).
 */
import { Duration, RemovalPolicy, Validations } from 'aws-cdk-lib';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { STORAGE_DEFAULTS } from '../defaults.js';

/**
 * The log bucket. S3-managed keys, because the ALB can deliver its access logs only to such a bucket.
 */
export function addLogBucket(scope: Construct, id: string, retentionDays: number = STORAGE_DEFAULTS.accessLogRetentionDays): s3.Bucket {
  const bucket = new s3.Bucket(scope, id, {
    encryption: s3.BucketEncryption.S3_MANAGED,
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    enforceSSL: true,
    objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
    lifecycleRules: [{ id: 'ExpireLogs', expiration: Duration.days(retentionDays), abortIncompleteMultipartUploadAfter: Duration.days(1) }],
    removalPolicy: RemovalPolicy.RETAIN,
  });
  Validations.of(bucket).acknowledge({
    id: 'AwsSolutions-S1',
    reason: 'This is the log bucket itself: logging its own access into itself would loop, and a second bucket for it would hold only noise.',
  });
  return bucket;
}

export interface ExportBucketOptions {
  /** Receives the bucket's server access logs. */
  readonly accessLogs: s3.IBucket;
  /** Exports older than this many days are deleted. @default 365 */
  readonly retentionDays?: number;
}

/** The export bucket: encrypted, private, TLS-only, with a lifecycle rule. */
export function addExportBucket(scope: Construct, id: string, options: ExportBucketOptions): s3.Bucket {
  return new s3.Bucket(scope, id, {
    encryption: s3.BucketEncryption.S3_MANAGED,
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    enforceSSL: true,
    objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
    versioned: false,
    serverAccessLogsBucket: options.accessLogs,
    serverAccessLogsPrefix: 'exports-bucket/',
    lifecycleRules: [{
      id: 'ExpireExports',
      expiration: Duration.days(options.retentionDays ?? STORAGE_DEFAULTS.exportRetentionDays),
      abortIncompleteMultipartUploadAfter: Duration.days(1),
    }],
    removalPolicy: RemovalPolicy.RETAIN,
  });
}
