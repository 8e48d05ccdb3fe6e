/**
 * The whole backend in one stack: network, cluster, database, the API behind its load
 * balancer, the scheduled jobs, their alarms and dashboard, the alert topic and the buckets.
 */
import { fileURLToPath } from 'node:url';
import { CfnOutput, Fn, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Platform } from 'aws-cdk-lib/aws-ecr-assets';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import pino from 'pino';
import { Alerts, validateAlertsProps } from './alerts.js';
import type { AppRuntime } from './app-task.js';
import { addExportBucket, addLogBucket } from './buckets.js';
import { Database, validateDatabaseProps, type DatabaseProps } from './database.js';
import { DatabaseAlarms } from './database-alarms.js';
import { DATABASE_DEFAULTS, DEFAULT_STAGE, NETWORK_DEFAULTS, OBSERVABILITY_DEFAULTS, STAGE_DEFAULTS, STAGES, STORAGE_DEFAULTS, type Stage } from '../defaults.js';
import { JobMonitoring } from './job-monitoring.js';
import { Migrations } from './migrations.js';
import { JOBS, type JobDefinition } from '../jobs.js';
import { stackPoolBudget, type PoolBudget } from '../pool-budget.js';
import { ScheduledJobs, validateScheduledJobs } from './scheduled-jobs.js';
import { reportDefaultBusRules } from './rule-quota.js';
import { ServiceMonitoring } from './service-monitoring.js';
import { ReleaseSmokeTest } from './release-smoke-test.js';
import { onlyServicesGetGrants } from './guard.js';
import { JOBS_TABLE, Problems, throwIfAnyProblems } from './validation.js';
import { ApiDashboard } from './api-dashboard.js';
import { grantTraces, TRACES_ENVIRONMENT } from './traces.js';
import { ApiFirewall, validateApiFirewallProps, type ApiFirewallProps } from './waf.js';
import { validateWebServiceProps, WebService, type WebServiceProps } from './web-service.js';

/** The repository root: the Docker build context, with the Dockerfile and .dockerignore. */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** CloudWatch Logs accepts only these retention periods, in days. */
const LOG_RETENTION_DAYS = Object.values(logs.RetentionDays).filter((d): d is number => typeof d === 'number' && d > 0);
/** LOG_LEVEL values: pino's levels (the container's logger), and `silent`. */
const LOG_LEVELS = [...Object.keys(pino.levels.values), 'silent'];

export interface BackendStackProps extends StackProps {
  /** Every alarm and crash alert is mailed here; `'none'` when the alert topic is subscribed elsewhere. */
  readonly alertEmail: string;
  /** The environment, whose defaults (STAGE_DEFAULTS in lib/defaults.ts) fill every setting left unset. @default 'dev' */
  readonly stage?: Stage;
  /** Deletion protection of the database and the load balancer. @default - the stage's (dev off, prod on) */
  readonly deletionProtection?: boolean;
  /** An AWS WAF web ACL on the load balancer (rate limits per IP and per key, AWS's common rule set); false for none. @default - the stage's (dev none, prod on) */
  readonly waf?: Omit<ApiFirewallProps, 'loadBalancer'> | false;
  /** Keep the database's snapshot and secret, the log group and the alert key when the stack goes. @default - the stage's (dev off, prod on) */
  readonly retainData?: boolean;
  /** The jobs table. @default JOBS from lib/jobs.ts */
  readonly jobs?: readonly JobDefinition[];
  /** The API's settings. @default - see SERVICE_DEFAULTS in lib/defaults.ts */
  readonly service?: Omit<WebServiceProps, 'cluster' | 'runtime' | 'accessLogBucket'>;
  /** The database's settings. @default - a new single-AZ RDS PostgreSQL instance */
  readonly database?: Omit<DatabaseProps, 'vpc'>;
  /** NAT gateways, 1 up to one per availability zone (2). @default - the stage's (dev 1, prod 2) */
  readonly natGateways?: number;
  /** Retention of the tasks' logs, in days (a CloudWatch Logs value). @default - the stage's (dev 7, prod 90) */
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

/** `props` with the stage's defaults (STAGE_DEFAULTS) in every setting left unset. */
export function withStageDefaults(props: BackendStackProps): BackendStackProps & { readonly stage: Stage } {
  const stage = props.stage ?? DEFAULT_STAGE;
  // An unknown stage is reported by validateBackendStackProps; its settings fall back to the default stage's.
  const d = STAGE_DEFAULTS[stage] ?? STAGE_DEFAULTS[DEFAULT_STAGE];
  const given = <T extends object>(o: T | undefined): Partial<T> =>
    Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
  const deletionProtection = props.deletionProtection ?? d.deletionProtection;
  const usesExistingDatabase = props.database?.secretArn !== undefined;
  return {
    ...props,
    stage,
    deletionProtection,
    retainData: props.retainData ?? d.retainData,
    natGateways: props.natGateways ?? d.natGateways,
    logRetentionDays: props.logRetentionDays ?? d.logRetentionDays,
    waf: props.waf ?? (d.waf ? {} : false),
    service: { minCapacity: d.minCapacity, maxCapacity: d.maxCapacity, canaryDeploys: d.canaryDeploys, deletionProtection, ...given(props.service) },
    database: usesExistingDatabase
      ? props.database
      : { instanceType: d.databaseInstanceType, multiAz: d.databaseMultiAz, deletionProtection, retain: props.retainData ?? d.retainData, logRetention: (props.logRetentionDays ?? d.logRetentionDays) as logs.RetentionDays, ...given(props.database) },
  };
}

/** Every problem with `props`: the jobs table's and every setting's, in one list. */
/** The stack's problems by where they come from: its settings, or the jobs table. */
export interface StackProblems {
  readonly settings: string[];
  readonly jobsTable: string[];
}

export function validateBackendStackProps(id: string, props: BackendStackProps): StackProblems {
  if (props.stage !== undefined && !STAGES.includes(props.stage)) {
    return { settings: [`stage must be one of ${STAGES.join(', ')}, got ${JSON.stringify(props.stage)}`], jobsTable: [] };
  }
  props = withStageDefaults(props);
  const jobs = props.jobs ?? JOBS;
  const problems = new Problems();
  problems.list.push(...validateAlertsProps({ email: props.alertEmail }));
  problems.list.push(...validateWebServiceProps(props.service ?? {}));
  if (props.waf) problems.list.push(...validateApiFirewallProps(props.waf));
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
  const jobsTable = validateScheduledJobs(jobs, {
    namePrefix: props.stackName ?? id,
    hasExportBucket: jobs.some((j) => j.usesExportBucket),
    now: props.now,
  });
  return { settings: problems.list, jobsTable };
}

export class BackendStack extends Stack {
  public readonly vpc: ec2.Vpc;
  public readonly cluster: ecs.Cluster;
  public readonly database: Database;
  /** The new instance's alarms; undefined for an existing database. */
  public readonly databaseAlarms: DatabaseAlarms | undefined;
  public readonly alerts: Alerts;
  /** The tasks' log group; the jobs' EMF lines become metrics from here. */
  public readonly logGroup: logs.LogGroup;
  /** Encrypts the log group. */
  public readonly logKey: kms.Key;
  /** ALB access logs, S3 server access logs and VPC flow logs. */
  public readonly logBucket: s3.Bucket;
  /** Where jobs with `usesExportBucket` write; undefined when no job in the table does. */
  public readonly exportBucket: s3.Bucket | undefined;
  public readonly webService: WebService;
  /** The deploy's migrations task, run before the API's and the jobs' new revisions. */
  public readonly migrations: Migrations;
  public readonly scheduledJobs: ScheduledJobs;
  public readonly jobMonitoring: JobMonitoring;
  public readonly serviceMonitoring: ServiceMonitoring;
  /** With canary deploys, the lifecycle hook that smoke-tests each new revision before production traffic. */
  public readonly releaseSmokeTest: ReleaseSmokeTest | undefined;
  /** The API's dashboard: requests, errors and latency per route, the pool, the drains, the alarms. */
  public readonly apiDashboard: ApiDashboard;
  /** The web ACL in front of the load balancer; undefined unless `waf` is set. */
  public readonly firewall: ApiFirewall | undefined;

  /** The environment whose defaults this stack was built with. */
  public readonly stage: Stage;
  /** The EventBridge rules this stack adds to the account's default bus (synth reports them; lib/constructs/rule-quota.ts). */
  public readonly defaultBusRules: number;

  constructor(scope: Construct, id: string, given: BackendStackProps) {
    // One "now" for every schedule computation, so each is made once (lib/schedule.ts remembers them).
    const now = given.now ?? new Date();
    const { settings, jobsTable } = validateBackendStackProps(id, { ...given, now });
    throwIfAnyProblems([{ what: `Stack ${given.stackName ?? id}`, problems: settings }, { what: JOBS_TABLE, problems: jobsTable }]);
    const props = withStageDefaults(given);
    super(scope, id, props);
    this.stage = props.stage;
    // RetainExceptOnCreate: kept on a teardown or a failed update, but deleted when the first create
    // rolls back, so a retry never meets a leftover (the execution log group's name is fixed).
    const removalPolicy = props.retainData ? RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE : RemovalPolicy.DESTROY;

    const jobs = props.jobs ?? JOBS;
    const metricsNamespace = props.metricsNamespace ?? OBSERVABILITY_DEFAULTS.metricsNamespace;

    this.logBucket = addLogBucket(this, 'LogBucket');
    this.vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: NETWORK_DEFAULTS.maxAzs,
      natGateways: props.natGateways,
      subnetConfiguration: [
        // Only the load balancer and the NAT gateways (with their own Elastic IPs) live here.
        { name: 'Public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24, mapPublicIpOnLaunch: false },
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
    this.alerts.key.applyRemovalPolicy(removalPolicy);
    this.database = new Database(this, 'Database', { vpc: this.vpc, ...props.database });
    this.databaseAlarms = this.database.instance ? new DatabaseAlarms(this, 'DatabaseAlarms', {
      instance: this.database.instance,
      instanceType: props.database?.instanceType ?? DATABASE_DEFAULTS.instanceType,
      allocatedStorageGiB: props.database?.allocatedStorageGiB ?? DATABASE_DEFAULTS.allocatedStorageGiB,
      topic: this.alerts.topic,
      namePrefix: this.stackName,
    }) : undefined;
    this.logKey = new kms.Key(this, 'LogKey', { description: 'Encrypts the tasks\' log group', enableKeyRotation: true, removalPolicy });
    onlyServicesGetGrants(this.logKey);
    // CloudWatch Logs encrypts with the key only when its policy lets the region's Logs service
    // do so, and then only for this account's log groups (the encryption context names them).
    this.logKey.addToResourcePolicy(new iam.PolicyStatement({
      sid: 'CloudWatchLogsEncryptsThisAccountsLogGroups',
      principals: [new iam.ServicePrincipal(`logs.${this.region}.amazonaws.com`)],
      actions: ['kms:Encrypt*', 'kms:Decrypt*', 'kms:ReEncrypt*', 'kms:GenerateDataKey*', 'kms:Describe*'],
      resources: ['*'],
      conditions: { ArnLike: { 'kms:EncryptionContext:aws:logs:arn': `arn:${this.partition}:logs:${this.region}:${this.account}:log-group:*` } },
    }));
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      encryptionKey: this.logKey,
      removalPolicy,
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
        ...TRACES_ENVIRONMENT,
      },
      secrets: this.database.containerSecrets,
    };

    this.migrations = new Migrations(this, 'Migrations', {
      cluster: this.cluster,
      runtime,
      secrets: this.database.migrationSecrets,
      logRetention: props.logRetentionDays as logs.RetentionDays,
      logKey: this.logKey,
      logRemovalPolicy: removalPolicy,
    });

    this.webService = new WebService(this, 'Api', {
      cluster: this.cluster,
      runtime,
      accessLogBucket: this.logBucket,
      ...props.service,
      dbPoolMax: budget.apiPoolMax,
    });
    this.releaseSmokeTest = this.webService.testListener ? new ReleaseSmokeTest(this, 'ReleaseSmokeTest', {
      service: this.webService.service,
      vpc: this.vpc,
      testListener: this.webService.testListener,
      operatorKey: this.webService.adminApiKey,
      logRetention: props.logRetentionDays as logs.RetentionDays,
      logKey: this.logKey,
      logRemovalPolicy: removalPolicy,
    }) : undefined;
    this.firewall = props.waf ? new ApiFirewall(this, 'Firewall', { loadBalancer: this.webService.loadBalancer, ...props.waf }) : undefined;
    this.scheduledJobs = new ScheduledJobs(this, 'Jobs', {
      cluster: this.cluster,
      runtime,
      jobs,
      alertTopic: this.alerts.topic,
      exportBucket: this.exportBucket,
      namePrefix: this.stackName,
      executionLogRetention: props.logRetentionDays as logs.RetentionDays,
      executionLogKey: this.logKey,
      executionLogRemovalPolicy: removalPolicy,
      now,
      dbPoolMax: budget.jobPoolMax,
    });
    this.jobMonitoring = new JobMonitoring(this, 'JobMonitoring', {
      jobs: this.scheduledJobs,
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

    const m = this.serviceMonitoring;
    this.apiDashboard = new ApiDashboard(this, 'ApiDashboard', {
      metricsNamespace,
      namePrefix: this.stackName,
      // The canary deploy's rollback alarms first (per target group), then the ones that page.
      alarms: [...m.deploymentAlarms.serverErrorRates, ...m.deploymentAlarms.latencies, m.serverErrors, m.unhealthyTargets, m.p99Latency, m.noHealthyTargets, m.databaseUnavailable, m.workerStalled],
    });
    for (const role of [this.webService.taskDefinition.taskRole, this.scheduledJobs.taskRole, this.scheduledJobs.exportTaskRole]) {
      if (role) grantTraces(role);
    }

    // The migrations task has applied them before the service's update begins (see Migrations).
    this.webService.container.addEnvironment('MIGRATE_ON_START', 'false');
    this.webService.service.node.addDependency(this.migrations.resource);
    // A job's new revision, too, registers only once its schema is in place.
    for (const job of this.scheduledJobs.jobs.values()) job.stack.nestedStackResource!.node.addDependency(this.migrations.resource);

    this.database.allowFrom(this.migrations.securityGroup, 'The migrations task');
    this.database.allowFrom(this.webService.securityGroup, 'API tasks');
    this.database.allowFrom(this.scheduledJobs.securityGroup, 'Scheduled job tasks');
    // The first tasks must find their way out (NAT routes, for the image and the secrets) and
    // into the database (its ingress rules) as soon as they start. CloudFormation cannot see
    // either need in the references, and without these the service can be created first, its
    // tasks fail, and the circuit breaker rolls the whole deploy back.
    const service = this.webService.service;
    for (const subnet of this.vpc.privateSubnets) service.node.addDependency(subnet.internetConnectivityEstablished);
    if (this.database.instance) {
      service.node.addDependency(...this.database.instance.connections.securityGroups);
      this.migrations.resource.node.addDependency(...this.database.instance.connections.securityGroups);
    }

    // What the runbook's commands need (docs/operations.md).
    const domain = props.service?.domain?.domainName;
    const scheme = props.service?.certificateArn || domain ? 'https' : 'http';
    new CfnOutput(this, 'ApiUrl', { value: `${scheme}://${domain ?? this.webService.loadBalancer.loadBalancerDnsName}` });
    new CfnOutput(this, 'ClusterName', { value: this.cluster.clusterName });
    new CfnOutput(this, 'JobSubnets', { value: this.vpc.privateSubnets.map((s) => s.subnetId).join(',') });
    new CfnOutput(this, 'JobSecurityGroup', { value: this.scheduledJobs.securityGroup.securityGroupId });
    new CfnOutput(this, 'LogGroup', { value: this.logGroup.logGroupName });
    new CfnOutput(this, 'AlertTopic', { value: this.alerts.topic.topicArn });
    new CfnOutput(this, 'DatabaseSecret', { value: this.database.secret.secretArn });
    // `npm run smoke` reads the operator key from here (bin/smoke.ts).
    new CfnOutput(this, 'OperatorKeySecret', { value: this.webService.adminApiKey.secretArn });
    new CfnOutput(this, 'DatabaseLoginSecret', { value: this.database.loginSecret.secretArn });
    this.defaultBusRules = reportDefaultBusRules(this);
  }

  /**
   * The zones, always as `Fn::GetAZs` picks at deploy time, never looked up: a stack pinned to an
   * account and region would otherwise get literal zone names, a different template from the same
   * commit deployed without them, and every subnet (with the NAT gateways and the database's
   * subnet group) replaced on the next deploy.
   */
  override get availabilityZones(): string[] {
    return Array.from({ length: NETWORK_DEFAULTS.maxAzs }, (_, i) => Fn.select(i, Fn.getAzs()));
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
