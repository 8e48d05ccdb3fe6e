/**
 * The whole backend in one stack: network, cluster, database, the API behind its load
 * balancer, the scheduled jobs, their alarms and dashboard, the alert topic and the buckets.
 */
import { fileURLToPath } from 'node:url';
import { CfnOutput, Stack, type StackProps } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Platform } from 'aws-cdk-lib/aws-ecr-assets';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import pino from 'pino';
import { Alerts, validateAlertsProps } from './alerts.js';
import type { AppRuntime } from './app-task.js';
import { addExportBucket, addLogBucket } from './buckets.js';
import { Database, validateDatabaseProps, type DatabaseProps } from './database.js';
import { DATABASE_DEFAULTS, NETWORK_DEFAULTS, OBSERVABILITY_DEFAULTS, STORAGE_DEFAULTS } from './defaults.js';
import { JobMonitoring } from './job-monitoring.js';
import { JOBS, type JobDefinition } from './jobs.js';
import { stackPoolBudget, type PoolBudget } from './pool-budget.js';
import { ScheduledJobs, validateScheduledJobs } from './scheduled-jobs.js';
import { ServiceMonitoring } from './service-monitoring.js';
import { InvalidSettingsError, Problems } from './validation.js';
import { validateWebServiceProps, WebService, type WebServiceProps } from './web-service.js';

/** The repository root: the Docker build context, with the Dockerfile and .dockerignore. */
export const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));

/** CloudWatch Logs accepts only these retention periods, in days. */
const LOG_RETENTION_DAYS = Object.values(logs.RetentionDays).filter((d): d is number => typeof d === 'number' && d > 0);
/** LOG_LEVEL values: pino's levels (the container's logger), and `silent`. */
const LOG_LEVELS = [...Object.keys(pino.levels.values), 'silent'];

export interface BackendStackProps extends StackProps {
  /** Every alarm and crash alert is mailed here. */
  readonly alertEmail: string;
  /** The jobs table. @default JOBS from lib/jobs.ts */
  readonly jobs?: readonly JobDefinition[];
  /** The API's settings. @default - see SERVICE_DEFAULTS in lib/defaults.ts */
  readonly service?: Omit<WebServiceProps, 'cluster' | 'runtime' | 'accessLogBucket'>;
  /** The database's settings. @default - a new single-AZ RDS PostgreSQL instance */
  readonly database?: Omit<DatabaseProps, 'vpc'>;
  /** NAT gateways, 1 up to one per availability zone (2). @default 1 */
  readonly natGateways?: number;
  /** Retention of the tasks' logs, in days (a CloudWatch Logs value). @default 30 */
  readonly logRetentionDays?: number;
  /** The jobs' metrics namespace, passed to the container as METRICS_NAMESPACE. @default 'EcsSaasBackend/Jobs' */
  readonly metricsNamespace?: string;
  /** LOG_LEVEL of every task. @default 'info' */
  readonly logLevel?: string;
  /** Exports older than this many days are deleted. @default 365 */
  readonly exportRetentionDays?: number;
  /** The application image. @default - built from the repository's Dockerfile for ARM64 */
  readonly image?: ecs.ContainerImage;
  /** The current time, for validating the schedules. @default - now */
  readonly now?: Date;
  /** The database's max_connections, for the pool budget. @default - that of the new instance's class (80 for t4g.micro) */
  readonly databaseMaxConnections?: number;
}

/** Every problem with `props`: the jobs table's and every setting's, in one list. */
export function validateBackendStackProps(id: string, props: BackendStackProps): string[] {
  const jobs = props.jobs ?? JOBS;
  const problems = new Problems();
  problems.list.push(...validateAlertsProps({ email: props.alertEmail }));
  problems.list.push(...validateWebServiceProps(props.service ?? {}));
  problems.list.push(...validateDatabaseProps(props.database ?? {}).map((p) => `database ${p}`));
  problems.whole('natGateways', props.natGateways, 1, NETWORK_DEFAULTS.maxAzs);
  if (props.logRetentionDays !== undefined && !LOG_RETENTION_DAYS.includes(props.logRetentionDays)) {
    problems.add(`logRetentionDays must be one of ${LOG_RETENTION_DAYS.join(', ')}, got ${props.logRetentionDays}`);
  }
  if (props.logLevel !== undefined && !LOG_LEVELS.includes(props.logLevel)) {
    problems.add(`logLevel must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(props.logLevel)}`);
  }
  if (props.metricsNamespace !== undefined && (!/^[\w./#:-]{1,255}$/.test(props.metricsNamespace) || props.metricsNamespace.startsWith('AWS/'))) {
    problems.add(`metricsNamespace must be 1 to 255 letters, digits or . - _ / # : and not start with AWS/, got ${JSON.stringify(props.metricsNamespace)}`);
  }
  problems.whole('exportRetentionDays', props.exportRetentionDays, 1);
  problems.whole('databaseMaxConnections', props.databaseMaxConnections, 1);
  const budget = poolBudgetOf(props);
  if (budget.problem) problems.add(budget.problem);
  problems.list.push(...validateScheduledJobs(jobs, {
    namePrefix: props.stackName ?? id,
    hasExportBucket: jobs.some((j) => j.usesExportBucket),
    now: props.now,
  }));
  return problems.list;
}

export class BackendStack extends Stack {
  public readonly vpc: ec2.Vpc;
  public readonly cluster: ecs.Cluster;
  public readonly database: Database;
  public readonly alerts: Alerts;
  /** The tasks' log group; the jobs' EMF lines become metrics from here. */
  public readonly logGroup: logs.LogGroup;
  /** ALB access logs, S3 server access logs and VPC flow logs. */
  public readonly logBucket: s3.Bucket;
  /** Where jobs with `usesExportBucket` write; undefined when no job in the table does. */
  public readonly exportBucket: s3.Bucket | undefined;
  public readonly webService: WebService;
  public readonly scheduledJobs: ScheduledJobs;
  public readonly jobMonitoring: JobMonitoring;
  public readonly serviceMonitoring: ServiceMonitoring;

  constructor(scope: Construct, id: string, props: BackendStackProps) {
    // One "now" for every schedule computation, so each is made once (lib/schedule.ts remembers them).
    const now = props.now ?? new Date();
    const problems = validateBackendStackProps(id, { ...props, now });
    if (problems.length > 0) throw new InvalidSettingsError(`Stack ${props.stackName ?? id}`, problems);
    super(scope, id, props);

    const jobs = props.jobs ?? JOBS;
    const metricsNamespace = props.metricsNamespace ?? OBSERVABILITY_DEFAULTS.metricsNamespace;

    this.logBucket = addLogBucket(this, 'LogBucket');
    this.vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: NETWORK_DEFAULTS.maxAzs,
      natGateways: props.natGateways ?? NETWORK_DEFAULTS.natGateways,
      subnetConfiguration: [
        { name: 'Public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'Private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
        { name: 'Isolated', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
      ],
      // Free, and image layers (stored in S3) then skip the NAT gateway's per-GB charge.
      gatewayEndpoints: { S3: { service: ec2.GatewayVpcEndpointAwsService.S3 } },
      flowLogs: {
        Rejected: { destination: ec2.FlowLogDestination.toS3(this.logBucket, 'vpc-flow-logs/'), trafficType: ec2.FlowLogTrafficType.REJECT },
      },
    });

    this.cluster = new ecs.Cluster(this, 'Cluster', {
      vpc: this.vpc,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
      // FARGATE_SPOT must be associated with the cluster before a rule can ask for it.
      enableFargateCapacityProviders: true,
    });

    this.alerts = new Alerts(this, 'Alerts', { email: props.alertEmail });
    this.database = new Database(this, 'Database', { vpc: this.vpc, ...props.database });
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: (props.logRetentionDays ?? OBSERVABILITY_DEFAULTS.logRetentionDays) as logs.RetentionDays,
    });
    this.exportBucket = jobs.some((j) => j.usesExportBucket)
      ? addExportBucket(this, 'ExportBucket', { accessLogs: this.logBucket, retentionDays: props.exportRetentionDays ?? STORAGE_DEFAULTS.exportRetentionDays })
      : undefined;

    const budget = poolBudgetOf(props);
    const runtime: AppRuntime = {
      image: props.image ?? ecs.ContainerImage.fromAsset(REPO_ROOT, { platform: Platform.LINUX_ARM64 }),
      logGroup: this.logGroup,
      environment: {
        LOG_LEVEL: props.logLevel ?? OBSERVABILITY_DEFAULTS.logLevel,
        METRICS_NAMESPACE: metricsNamespace,
        ENABLE_DEBUG_ROUTES: 'false',
        // The RDS CA bundle's path is set in the image (NODE_EXTRA_CA_CERTS in the Dockerfile).
        DB_SSL: DATABASE_DEFAULTS.ssl,
      },
      secrets: this.database.containerSecrets,
    };

    this.webService = new WebService(this, 'Api', {
      cluster: this.cluster,
      runtime,
      accessLogBucket: this.logBucket,
      ...props.service,
      dbPoolMax: budget.apiPoolMax,
    });
    this.scheduledJobs = new ScheduledJobs(this, 'Jobs', {
      cluster: this.cluster,
      runtime,
      jobs,
      alertTopic: this.alerts.topic,
      exportBucket: this.exportBucket,
      namePrefix: this.stackName,
      now,
      dbPoolMax: budget.jobPoolMax,
    });
    this.jobMonitoring = new JobMonitoring(this, 'JobMonitoring', {
      jobs: this.scheduledJobs,
      cluster: this.cluster,
      topic: this.alerts.topic,
      metricsNamespace,
      namePrefix: this.stackName,
      now,
    });

    this.serviceMonitoring = new ServiceMonitoring(this, 'ApiMonitoring', {
      webService: this.webService,
      topic: this.alerts.topic,
      namePrefix: this.stackName,
      metricsNamespace,
    });

    this.database.allowFrom(this.webService.securityGroup, 'API tasks');
    this.database.allowFrom(this.scheduledJobs.securityGroup, 'Scheduled job tasks');

    // What the runbook's commands need (README.md, Runbook).
    const scheme = props.service?.certificateArn ? 'https' : 'http';
    new CfnOutput(this, 'ApiUrl', { value: `${scheme}://${this.webService.loadBalancer.loadBalancerDnsName}` });
    new CfnOutput(this, 'ClusterName', { value: this.cluster.clusterName });
    new CfnOutput(this, 'JobSubnets', { value: this.vpc.privateSubnets.map((s) => s.subnetId).join(',') });
    new CfnOutput(this, 'JobSecurityGroup', { value: this.scheduledJobs.securityGroup.securityGroupId });
    new CfnOutput(this, 'LogGroup', { value: this.logGroup.logGroupName });
    new CfnOutput(this, 'AlertTopic', { value: this.alerts.topic.topicArn });
    new CfnOutput(this, 'DatabaseSecret', { value: this.database.secret.secretArn });
  }
}

/** The connection budget of the stack's database, API and jobs (lib/pool-budget.ts). */
function poolBudgetOf(props: BackendStackProps): PoolBudget {
  return stackPoolBudget({
    databaseMaxConnections: props.databaseMaxConnections,
    instanceType: props.database?.instanceType,
    maxCapacity: props.service?.maxCapacity,
    jobs: props.jobs ?? JOBS,
  });
}
