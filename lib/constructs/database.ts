/**
 * The database: a new RDS PostgreSQL instance, or an existing database named by its secret.
 *
 * Two secrets, two users. The master secret (RDS's, or the one given) is for the migrations
 * task alone. The API and the jobs log in as a login role that owns nothing
 * (app/login-role.ts), whose secret the stack generates; the migrations task gets that
 * secret's username and password too, and creates or updates the role after migrating. Every
 * task gets its connection as ECS secrets read from the secrets' JSON fields, so no password
 * is ever in a task definition's plain environment.
 */
import { Duration, RemovalPolicy, Token, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { DATABASE_DEFAULTS } from '../defaults.js';
import { retainDatabaseLogs } from './database-logs.js';
import { Problems, throwIfProblems } from './validation.js';

export interface DatabaseProps {
  /** The VPC a new instance goes into (its isolated subnets). */
  readonly vpc: ec2.IVpc;
  /**
   * The complete ARN of an existing database's Secrets Manager secret, with the JSON fields
   * host, port, dbname, username and password (the format RDS writes).
   * @default - a new RDS PostgreSQL instance is created
   */
  readonly secretArn?: string;
  /** A new instance's class, without the `db.` prefix. @default 't4g.micro' */
  readonly instanceType?: string;
  /** Run a new instance in two availability zones. @default false */
  readonly multiAz?: boolean;
  /** Refuse to delete a new instance. @default true */
  readonly deletionProtection?: boolean;
  /**
   * When the stack deletes a new instance (a teardown, a rolled-back first deploy), keep a
   * final snapshot and the secret with its password; otherwise both go. @default true
   */
  readonly retain?: boolean;
  /** A new instance's storage, GiB; it grows on its own up to five times this. @default 20 */
  readonly allocatedStorageGiB?: number;
  /** Retention of a new instance's exported logs (the `postgresql` and `upgrade` log groups). @default logs.RetentionDays.ONE_MONTH */
  readonly logRetention?: logs.RetentionDays;
}

/** The logs a new instance exports to CloudWatch Logs, each into /aws/rds/instance/<id>/<name>. */
export const EXPORTED_LOGS = ['postgresql', 'upgrade'] as const;

/**
 * A new instance's secrets: a snapshot without its passwords is of little use, so they stay
 * whenever the data does. RetainExceptOnCreate: a first create that rolls back leaves none behind.
 */
function secretRemovalPolicy(props: DatabaseProps): RemovalPolicy {
  return (props.retain ?? true) ? RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE : RemovalPolicy.DESTROY;
}

const SECRET_ARN = /^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$/;
const INSTANCE_TYPE = /^[a-z][a-z0-9-]*\.[a-z0-9]+$/;

/** Every problem with `props`, each showing the bad value. */
export function validateDatabaseProps(props: Omit<DatabaseProps, 'vpc'>): string[] {
  const problems = new Problems();
  if (props.secretArn !== undefined && !Token.isUnresolved(props.secretArn)) {
    if (!SECRET_ARN.test(props.secretArn)) {
      problems.add(`secretArn must be a Secrets Manager secret ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>), got ${JSON.stringify(props.secretArn)}`);
    }
    for (const key of ['instanceType', 'multiAz', 'deletionProtection', 'allocatedStorageGiB', 'retain', 'logRetention'] as const) {
      if (props[key] !== undefined) problems.add(`${key} applies to a new instance only, but secretArn names an existing database; remove one of them`);
    }
  }
  if (props.instanceType !== undefined && !INSTANCE_TYPE.test(props.instanceType)) {
    problems.add(`instanceType must be an instance class without "db.", like "t4g.micro", got ${JSON.stringify(props.instanceType)}`);
  }
  problems.whole('allocatedStorageGiB', props.allocatedStorageGiB, 20, 65_536);
  return problems.list;
}

export class Database extends Construct {
  /** The master secret, with the connection fields: only the migrations task reads it. */
  public readonly secret: secretsmanager.ISecret;
  /** The login role's secret (username and password; for a new instance, its connection fields too). */
  public readonly loginSecret: secretsmanager.ISecret;
  /** The new instance; undefined for an existing database. */
  public readonly instance: rds.DatabaseInstance | undefined;
  /** The retention of each of a new instance's log groups, by log name; empty for an existing database. */
  public readonly logRetentions: ReadonlyMap<string, logs.LogRetention>;
  /** DB_HOST, DB_PORT, DB_NAME, DB_USER and DB_PASSWORD of the login role, as ECS secrets: the API's and the jobs'. */
  public readonly containerSecrets: Readonly<Record<string, ecs.Secret>>;
  /** The master user's five fields, and DB_LOGIN_ROLE and DB_LOGIN_PASSWORD: the migrations task's. */
  public readonly migrationSecrets: Readonly<Record<string, ecs.Secret>>;

  constructor(scope: Construct, id: string, props: DatabaseProps) {
    throwIfProblems('The database', validateDatabaseProps(props));
    super(scope, id);

    // Generated by Secrets Manager when the stack creates it, under a generated name: no human
    // ever sees the password, and a failed first create leaves no name behind.
    const login = new rds.DatabaseSecret(this, 'LoginSecret', { username: DATABASE_DEFAULTS.loginUsername, dbname: DATABASE_DEFAULTS.databaseName });
    Validations.of(login).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason: 'ECS injects the password into each task when it starts; a rotation is a new value and a deploy, whose migrations task sets it on the role (see docs/operations.md).',
    });
    const master = (name: string) => ecs.Secret.fromSecretsManager(this.secret, name);
    const ofLogin = (name: string) => ecs.Secret.fromSecretsManager(this.loginSecret, name);
    if (props.secretArn !== undefined) {
      this.instance = undefined;
      this.logRetentions = new Map();
      // Only a complete ARN (with Secrets Manager's 6-character suffix) names exactly one secret in IAM and in ECS.
      this.secret = /-[A-Za-z0-9]{6}$/.test(props.secretArn)
        ? secretsmanager.Secret.fromSecretCompleteArn(this, 'Secret', props.secretArn)
        : secretsmanager.Secret.fromSecretPartialArn(this, 'Secret', props.secretArn);
      // Nothing to keep once the stack is gone: the next one generates a new password, and its migrations set it.
      login.applyRemovalPolicy(RemovalPolicy.DESTROY);
      this.loginSecret = login;
    } else {
      this.instance = this.newInstance(props);
      this.logRetentions = retainDatabaseLogs(this, this.instance, { logs: EXPORTED_LOGS, retention: props.logRetention, retain: props.retain ?? true });
      this.secret = this.instance.secret!;
      // The attachment writes the instance's host and port into the secret, as RDS does for the master secret.
      login.applyRemovalPolicy(secretRemovalPolicy(props));
      this.loginSecret = login.attach(this.instance);
    }

    // An existing database's host, port and name are only in its own secret: the tasks' execution
    // roles read those fields there (ECS injects the named fields only; the master password never
    // reaches their containers).
    const where = this.instance ? ofLogin : master;
    this.containerSecrets = {
      DB_HOST: where('host'),
      DB_PORT: where('port'),
      DB_NAME: where('dbname'),
      DB_USER: ofLogin('username'),
      DB_PASSWORD: ofLogin('password'),
    };
    this.migrationSecrets = {
      DB_HOST: master('host'),
      DB_PORT: master('port'),
      DB_NAME: master('dbname'),
      DB_USER: master('username'),
      DB_PASSWORD: master('password'),
      DB_LOGIN_ROLE: ofLogin('username'),
      DB_LOGIN_PASSWORD: ofLogin('password'),
    };
  }

  /** Lets `peer` reach a new instance on its port; an existing database's own security group is not ours to change. */
  allowFrom(peer: ec2.IConnectable, description: string): void {
    this.instance?.connections.allowDefaultPortFrom(peer, description);
  }

  private newInstance(props: DatabaseProps): rds.DatabaseInstance {
    const engine = rds.DatabaseInstanceEngine.postgres({ version: rds.PostgresEngineVersion.VER_18 });
    const parameterGroup = new rds.ParameterGroup(this, 'Parameters', {
      engine,
      description: 'TLS required for every connection',
      parameters: { 'rds.force_ssl': '1' },
    });
    const allocated = props.allocatedStorageGiB ?? DATABASE_DEFAULTS.allocatedStorageGiB;
    const instance = new rds.DatabaseInstance(this, 'Instance', {
      engine,
      instanceType: new ec2.InstanceType(props.instanceType ?? DATABASE_DEFAULTS.instanceType),
      vpc: props.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      publiclyAccessible: false,
      credentials: rds.Credentials.fromGeneratedSecret(DATABASE_DEFAULTS.username),
      databaseName: DATABASE_DEFAULTS.databaseName,
      parameterGroup,
      storageEncrypted: true,
      storageType: rds.StorageType.GP3,
      allocatedStorage: allocated,
      maxAllocatedStorage: Math.max(allocated * 5, DATABASE_DEFAULTS.maxAllocatedStorageGiB),
      multiAz: props.multiAz ?? DATABASE_DEFAULTS.multiAz,
      deletionProtection: props.deletionProtection ?? DATABASE_DEFAULTS.deletionProtection,
      backupRetention: Duration.days(DATABASE_DEFAULTS.backupRetentionDays),
      removalPolicy: (props.retain ?? true) ? RemovalPolicy.SNAPSHOT : RemovalPolicy.DESTROY,
      autoMinorVersionUpgrade: true,
      copyTagsToSnapshot: true,
      // Slow queries, errors and connection logs (per the parameter group) land in CloudWatch Logs.
      cloudwatchLogsExports: [...EXPORTED_LOGS],
    });
    (instance.node.findChild('Secret') as secretsmanager.Secret).applyRemovalPolicy(secretRemovalPolicy(props));

    Validations.of(instance).acknowledge({
      id: 'AwsSolutions-RDS11',
      reason: 'The instance sits in isolated subnets and its security group admits only the API and job tasks; a non-standard port would add no protection and break the default tooling.',
    });
    if (!(props.multiAz ?? DATABASE_DEFAULTS.multiAz)) {
      Validations.of(instance).acknowledge({
        id: 'AwsSolutions-RDS3',
        reason: 'Single-AZ by default to keep the idle cost low (see docs/infrastructure.md, Cost); set context databaseMultiAz=true for production. Backups and a final snapshot still protect the data.',
      });
    }
    if (!(props.deletionProtection ?? DATABASE_DEFAULTS.deletionProtection)) {
      Validations.of(instance).acknowledge({
        id: 'AwsSolutions-RDS10',
        reason: 'Deletion protection is off on purpose: the dev stage (or context deletionProtection=false) must roll back a failed first deploy and tear down cleanly; prod keeps it on.',
      });
    }
    Validations.of(instance).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason: 'ECS injects the password into each task when it starts, so an automatic rotation would break the running tasks\' new connections until they are replaced. Rotate by hand with a forced new deployment (see docs/operations.md).',
    });
    return instance;
  }
}
