import { Stack, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { beforeAll, describe, expect, it } from 'vitest';
import { SNS_TOPIC_CONTEXT } from '../../lib/constructs/alerts.js';
import { JOBS } from '../../lib/jobs.js';
import { settingsFromContext } from '../../lib/constructs/settings.js';
import { BackendStack } from '../../lib/constructs/stack.js';
import { errorMessage, newApp, NOW, resources, synth, type Synthesized } from './synth.js';
import { TRACE_ACTIONS } from '../../lib/constructs/traces.js';

const DB_SECRETS = { DB_HOST: 'host', DB_PORT: 'port', DB_NAME: 'dbname', DB_USER: 'username', DB_PASSWORD: 'password' };
/** The migrations task's: the login role it creates or updates. */
const LOGIN_SECRETS = { DB_LOGIN_ROLE: 'username', DB_LOGIN_PASSWORD: 'password' };
const EXISTING_SECRET = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf';

interface Statement {
  readonly policy: string;
  readonly Effect: string;
  readonly Action: string | string[];
  readonly Resource: unknown;
  readonly Condition?: Record<string, Record<string, unknown>>;
}

/** Every statement of every identity policy in the template, with the policy's logical id. */
function identityStatements(s: Synthesized): Statement[] {
  const out: Statement[] = [];
  for (const [id, policy] of Object.entries(resources(s.template, 'AWS::IAM::Policy'))) {
    for (const st of policy.Properties.PolicyDocument.Statement) out.push({ policy: id, ...st });
  }
  for (const [id, role] of Object.entries(resources(s.template, 'AWS::IAM::Role'))) {
    for (const p of role.Properties.Policies ?? []) for (const st of p.PolicyDocument.Statement) out.push({ policy: id, ...st });
  }
  return out;
}

const list = <T>(v: T | T[]): T[] => (Array.isArray(v) ? v : [v]);

/** The policy attached to the role with logical id `roleId`. */
function policyOfRole(s: Synthesized, roleId: string): Statement[] {
  return identityStatements(s).filter((st) => {
    const policy = resources(s.template, 'AWS::IAM::Policy')[st.policy];
    return policy?.Properties.Roles.some((r: { Ref: string }) => r.Ref === roleId);
  });
}

/** Every acknowledgement in the construct tree: rule id → reasons. */
function acknowledgements(root: IConstruct): { id: string; reason: string; path: string }[] {
  const out: { id: string; reason: string; path: string }[] = [];
  for (const c of root.node.findAll()) {
    for (const entry of c.node.metadata) {
      if (entry.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY) continue;
      for (const [id, reason] of Object.entries(entry.data as Record<string, string>)) out.push({ id, reason, path: c.node.path });
    }
  }
  return out;
}

/** The logical id (in the parent) of the task role of `job`'s task definition, which lives in the job's nested stack. */
function jobTaskRole(s: Synthesized, job: string): string {
  const nested = s.stack.scheduledJobs.jobs.get(job)!.stack;
  const [taskDef] = Object.values(resources(Template.fromStack(nested), 'AWS::ECS::TaskDefinition'));
  const parameter = taskDef!.Properties.TaskRoleArn.Ref as string;
  const id = s.stack.resolve((nested.nestedStackResource as { logicalId: string }).logicalId) as string;
  return s.template.toJSON().Resources[id].Properties.Parameters[parameter]['Fn::GetAtt'][0];
}

let s: Synthesized;
beforeAll(() => {
  s = synth();
});

describe('IAM', () => {
  it('has no wildcard beyond the acknowledged ones', () => {
    const wildcards = identityStatements(s)
      .filter((st) => st.Effect === 'Allow' && JSON.stringify([st.Action, st.Resource]).includes('*'))
      .map((st) => ({ actions: list(st.Action).sort(), resource: JSON.stringify(st.Resource), clusterCondition: JSON.stringify(st.Condition?.ArnEquals?.['ecs:cluster'] ?? null) }));
    const inTheCluster = (w: { clusterCondition: string }) => /^\{"Fn::GetAtt":\["Cluster[A-Za-z0-9]+","Arn"\]\}$/.test(w.clusterCondition);
    const accepted = (w: { actions: string[]; resource: string; clusterCondition: string }): boolean =>
      // ecr:GetAuthorizationToken has no resource-level permissions (execution roles).
      (w.actions.join() === 'ecr:GetAuthorizationToken' && w.resource === '"*"')
      // EventBridge starts the job state machines, named <stack>-<job> (the events role).
      || (w.actions.join() === 'states:StartExecution' && /:stateMachine:Test-\*"\]\]\}$/.test(w.resource))
      // The state machines run the job task definitions (families <stack>-<job>), in this cluster (a condition)...
      || (w.actions.join() === 'ecs:RunTask' && /:task-definition\/Test-\*:\*"\]\]\}$/.test(w.resource))
      // ...and describe and stop the tasks they start, in this one cluster.
      || (w.actions.join() === 'ecs:DescribeTasks,ecs:StopTask' && /:task\/",\{"Ref":"Cluster[^"]+"\},"\/\*"/.test(w.resource))
      // Log delivery and X-Ray accept no resource (the state machines' execution logs and traces).
      || (w.resource === '"*"' && w.actions.every((a) => /^(logs|xray):/.test(a)))
      // The migrations resource runs its task definition (every revision of its one family), in this cluster (a condition)...
      || (w.actions.join() === 'ecs:RunTask' && /:task-definition\/TestMigrationsTaskDef[A-Za-z0-9]+:\*"\]\]\}$/.test(w.resource))
      // ...and watches the task it started, in this one cluster...
      || (w.actions.join() === 'ecs:DescribeTasks' && /:task\/",\{"Ref":"Cluster[^"]+"\},"\/\*"/.test(w.resource))
      // ...stops it at its deadline, on rollback and on delete (this cluster's tasks, and a condition)...
      || (w.actions.join() === 'ecs:StopTask' && /:task\/",\{"Ref":"Cluster[^"]+"\},"\/\*"/.test(w.resource) && inTheCluster(w))
      // ...and lists the running ones, which names no resource a Fargate task has (the cluster condition scopes it).
      || (w.actions.join() === 'ecs:ListTasks' && w.resource === '"*"' && inTheCluster(w))
      // The custom resource Provider framework invokes its own handlers, any version of each (`<function ARN>:*`).
      || (w.actions.join() === 'lambda:InvokeFunction' && /^\[(\{"Fn::GetAtt":\["Migrations[A-Za-z0-9]+","Arn"\]\},?)+(,?\{"Fn::Join":\["",\[\{"Fn::GetAtt":\["Migrations[A-Za-z0-9]+","Arn"\]\},":\*"\]\]\},?)+\]$/.test(w.resource))
      // The Scheduler role sends undeliverable starts to the zoned jobs' dead-letter queues, named
      // <stack>-<job>-schedule-dlq (the queues live in the jobs' nested stacks, the one role in the parent).
      || (w.actions.join() === 'sqs:SendMessage' && /:Test-\*-schedule-dlq"\]\]\}$/.test(w.resource))
      // weekly-export uploads objects into the export bucket only.
      || (w.actions.join() === 's3:PutObject' && /ExportBucket[^"]*","Arn"\]\},"\/\*"/.test(w.resource))
      // The CDK's LogRetention function deletes the database's own log groups (and their streams) with a disposable database.
      || (w.actions.join() === 'logs:DeleteLogGroup' && /^\[(,?\{"Fn::Join":\["",\["arn:",\{"Ref":"AWS::Partition"\},":logs:",\{"Ref":"AWS::Region"\},":",\{"Ref":"AWS::AccountId"\},":log-group:\/aws\/rds\/instance\/",\{"Ref":"DatabaseInstance[A-F0-9]+"\},"\/(postgresql|upgrade):\*"\]\]\})+\]$/.test(w.resource))
;
    expect(wildcards.filter((w) => !accepted(w))).toEqual([]);
    expect(wildcards.some((w) => w.actions.some((a) => a.includes('*')))).toBe(false);
  });

  /** Every task role's one X-Ray statement: write spans (X-Ray has no resource type for it). */
  const traces = { actions: [...TRACE_ACTIONS].sort(), resource: '"*"' };

  it('lets the jobs\' task role publish to the alert topic and send its traces, nothing else, and only export jobs upload exports', () => {
    for (const job of JOBS.filter((j) => j.enabled)) {
      const roleId = jobTaskRole(s, job.name);
      expect(roleId).toMatch(job.usesExportBucket ? /^JobsExportTaskRole/ : /^JobsTaskRole/);
      const statements = policyOfRole(s, roleId).map((st) => ({ actions: list(st.Action).sort(), resource: JSON.stringify(st.Resource) }));
      const expected = [
        { actions: ['sns:Publish'], resource: expect.stringMatching(/^\{"Ref":"AlertsTopic/) },
        { actions: ['kms:Decrypt', 'kms:GenerateDataKey'], resource: expect.stringMatching(/AlertsKey/) },
        ...(job.usesExportBucket ? [{ actions: ['s3:PutObject'], resource: expect.stringMatching(/ExportBucket/) }] : []),
        traces,
      ];
      expect(statements).toEqual(expected);
    }
  });

  it('keeps the API\'s task role separate from the jobs\' and grants it nothing but sending its traces', () => {
    const taskDefs = Object.entries(resources(s.template, 'AWS::ECS::TaskDefinition'));
    const apiRole = taskDefs.find(([id]) => id.startsWith('Api'))![1].Properties.TaskRoleArn['Fn::GetAtt'][0];
    const jobRoles = JOBS.filter((j) => j.enabled).map((j) => jobTaskRole(s, j.name));
    expect(jobRoles.length).toBeGreaterThan(0);
    expect(jobRoles).not.toContain(apiRole);
    expect(policyOfRole(s, apiRole).map((st) => ({ actions: list(st.Action).sort(), resource: JSON.stringify(st.Resource) }))).toEqual([traces]);
  });
});

describe('the database', () => {
  it('is a new encrypted PostgreSQL instance in isolated subnets that requires TLS', () => {
    s.template.hasResourceProperties('AWS::RDS::DBInstance', {
      Engine: 'postgres',
      StorageEncrypted: true,
      PubliclyAccessible: false,
      BackupRetentionPeriod: 7,
    });
    s.template.hasResourceProperties('AWS::RDS::DBParameterGroup', { Parameters: { 'rds.force_ssl': '1' } });
    s.template.hasResourceProperties('AWS::RDS::DBSubnetGroup', {
      SubnetIds: [{ Ref: Match.stringLikeRegexp('^VpcIsolatedSubnet1') }, { Ref: Match.stringLikeRegexp('^VpcIsolatedSubnet2') }],
    });
  });

  it('injects the connection as ECS secrets from the secrets\' JSON fields, never as plain environment', () => {
    for (const [id, taskDef] of Object.entries(resources(s.template, 'AWS::ECS::TaskDefinition'))) {
      const [container] = taskDef.Properties.ContainerDefinitions;
      const env = Object.fromEntries(container.Environment.map((e: { Name: string; Value: unknown }) => [e.Name, e.Value]));
      for (const name of [...Object.keys(DB_SECRETS), ...Object.keys(LOGIN_SECRETS), 'DATABASE_URL']) expect(env).not.toHaveProperty(name);
      expect(JSON.stringify(env)).not.toMatch(/password/i);
      expect(container.Environment).toContainEqual({ Name: 'DB_SSL', Value: 'verify' });
      const secrets = Object.fromEntries(container.Secrets.map((x: { Name: string; ValueFrom: any }) => [x.Name, x.ValueFrom]));
      // The API logs in as the login role and gets its admin key (test/infra/admin-key.test.ts);
      // the migrations task logs in as the master user and sets the login role's password.
      const migrations = id.startsWith('Migrations');
      expect(Object.keys(secrets).sort()).toEqual([...Object.keys(DB_SECRETS), ...(migrations ? Object.keys(LOGIN_SECRETS) : []), ...(id.startsWith('Api') ? ['ADMIN_API_KEY'] : [])].sort());
      for (const [name, field] of Object.entries(DB_SECRETS)) {
        const secret = migrations ? /^DatabaseInstanceSecretAttachment/ : /^DatabaseLoginSecretAttachment/;
        expect(secrets[name]).toEqual({ 'Fn::Join': ['', [{ Ref: expect.stringMatching(secret) }, `:${field}::`]] });
      }
      if (migrations) {
        for (const [name, field] of Object.entries(LOGIN_SECRETS)) {
          expect(secrets[name]).toEqual({ 'Fn::Join': ['', [{ Ref: expect.stringMatching(/^DatabaseLoginSecretAttachment/) }, `:${field}::`]] });
        }
      }
    }
  });

  it('admits the API, the job tasks and the migrations task only', () => {
    const ingress = Object.values(resources(s.template, 'AWS::EC2::SecurityGroupIngress'))
      .map((r) => r.Properties)
      .filter((p) => JSON.stringify(p.GroupId).includes('Database'));
    expect(ingress.map((p) => p.SourceSecurityGroupId['Fn::GetAtt'][0]).sort()).toEqual([
      expect.stringMatching(/^ApiSecurityGroup/), expect.stringMatching(/^JobsSecurityGroup/), expect.stringMatching(/^MigrationsSecurityGroup/),
    ]);
    const port = { 'Fn::GetAtt': [expect.stringMatching(/^DatabaseInstance/), 'Endpoint.Port'] };
    for (const p of ingress) expect(p).toMatchObject({ IpProtocol: 'tcp', FromPort: port, ToPort: port });
    const [dbGroup] = Object.entries(resources(s.template, 'AWS::EC2::SecurityGroup')).filter(([id]) => id.startsWith('Database'));
    expect(dbGroup![1].Properties.SecurityGroupIngress ?? []).toEqual([]);
  });

  it('can be an existing database named by its secret ARN', () => {
    const existing = synth({ database: { secretArn: EXISTING_SECRET } });
    existing.template.resourceCountIs('AWS::RDS::DBInstance', 0);
    // The login role's secret is generated all the same; the existing secret is the master's.
    expect(Object.keys(resources(existing.template, 'AWS::SecretsManager::Secret')).filter((id) => !id.includes('AdminApiKey'))).toEqual([expect.stringMatching(/^DatabaseLoginSecret/)]);
    existing.template.resourceCountIs('AWS::SecretsManager::SecretTargetAttachment', 0);
    const taskDefs = resources(existing.template, 'AWS::ECS::TaskDefinition');
    const secretsOf = (prefix: string) => Object.entries(taskDefs).find(([id]) => id.startsWith(prefix))![1].Properties.ContainerDefinitions[0].Secrets;
    const login = (field: string) => ({ 'Fn::Join': ['', [{ Ref: expect.stringMatching(/^DatabaseLoginSecret/) }, `:${field}::`]] });
    expect(secretsOf('Migrations')).toContainEqual({ Name: 'DB_PASSWORD', ValueFrom: `${EXISTING_SECRET}:password::` });
    expect(secretsOf('Migrations')).toContainEqual({ Name: 'DB_LOGIN_PASSWORD', ValueFrom: login('password') });
    // The API reads where the database is from the existing secret, and logs in with the login role's.
    expect(secretsOf('Api')).toContainEqual({ Name: 'DB_HOST', ValueFrom: `${EXISTING_SECRET}:host::` });
    expect(secretsOf('Api')).toContainEqual({ Name: 'DB_PASSWORD', ValueFrom: login('password') });
    existing.template.hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Action: ['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue'], Resource: Match.arrayWith([EXISTING_SECRET]) })]) },
    });
    expect(new AwsSolutionsChecks().validateScope(existing.app).violations).toEqual([]);
  });
});

describe('alerts and buckets', () => {
  it('sends alerts through one encrypted topic with an email subscription', () => {
    s.template.resourceCountIs('AWS::SNS::Topic', 1);
    s.template.hasResourceProperties('AWS::SNS::Topic', { KmsMasterKeyId: Match.anyValue() });
    s.template.hasResourceProperties('AWS::SNS::Subscription', { Protocol: 'email', Endpoint: 'oncall@acme.io' });
    s.template.hasResourceProperties('AWS::KMS::Key', {
      EnableKeyRotation: true,
      KeyPolicy: { Statement: Match.arrayWith([Match.objectLike({ Principal: { Service: ['cloudwatch.amazonaws.com', 'events.amazonaws.com'] } })]) },
    });
  });

  it('lets the alarms and the rules publish to the topic: its policy replaces SNS\'s default one', () => {
    const [policy] = Object.values(resources(s.template, 'AWS::SNS::TopicPolicy'));
    const allows = (service: string) => policy!.Properties.PolicyDocument.Statement.filter((st: any) =>
      st.Effect === 'Allow' && list(st.Action).includes('sns:Publish') && st.Principal?.Service === service);
    const [alarms] = allows('cloudwatch.amazonaws.com');
    expect(alarms).toBeDefined();
    expect(alarms.Condition.StringEquals).toEqual({ 'aws:SourceAccount': { Ref: 'AWS::AccountId' } });
    expect(JSON.stringify(alarms.Condition.ArnLike['aws:SourceArn'])).toContain(':alarm:*');
    // One statement per rule, each naming its rule and this account (no confused deputy).
    const rules = allows('events.amazonaws.com');
    expect(rules.length).toBeGreaterThan(0);
    for (const rule of rules) {
      expect(rule.Condition.StringEquals).toEqual({ 'aws:SourceAccount': { Ref: 'AWS::AccountId' } });
      expect(rule.Condition.ArnEquals['aws:SourceArn']).toEqual({ 'Fn::GetAtt': [expect.any(String), 'Arn'] });
    }
  });

  it('fails synth when alertEmail is a placeholder that reaches nobody, naming the setting and how to set it', () => {
    for (const email of ['alerts@example.com', 'ops@mail.example.org', 'me@localhost.test']) {
      const message = errorMessage(() => new BackendStack(newApp(), 'Placeholder', { alertEmail: email, now: NOW }));
      expect(message).toContain(`alertEmail is ${email}, a reserved example domain that reaches nobody`);
      expect(message).toContain('-c alertEmail=');
    }
  });

  it('fails synth on an example\'s placeholder address, and its own example is no address synth would accept', () => {
    for (const email of ['oncall@yourcompany.com', 'alerts@your-domain.org', 'ops@mycompany.co.uk']) {
      const message = errorMessage(() => new BackendStack(newApp(), 'Placeholder', { alertEmail: email, now: NOW }));
      expect(message).toMatch(/^Stack Placeholder has 1 problem:/);
      expect(message).toContain(`alertEmail is ${email}, a placeholder from an example, not your address`);
      const example = /-c alertEmail=([^`]+)`/.exec(message)?.[1];
      expect(example).toBe("<your on-call team's address>");
    }
  });

  it('subscribes nobody only when told the topic is subscribed elsewhere (alertEmail none)', () => {
    s.template.resourceCountIs('AWS::SNS::Subscription', 1);
    s.template.hasResourceProperties('AWS::SNS::Subscription', { Protocol: 'email', Endpoint: 'oncall@acme.io' });
    synth({ alertEmail: 'none' }).template.resourceCountIs('AWS::SNS::Subscription', 0);
  });

  it('lets alarms and rules use the alert key only for this account\'s topics, by the context SNS always sends', () => {
    const [key] = Object.entries(resources(s.template, 'AWS::KMS::Key')).filter(([id]) => id.startsWith('Alerts')).map(([, k]) => k);
    const services = key!.Properties.KeyPolicy.Statement.filter((st: any) => st.Principal?.Service);
    expect(services).toHaveLength(1);
    const [st] = services;
    expect(st.Principal.Service).toEqual(['cloudwatch.amazonaws.com', 'events.amazonaws.com']);
    // Not aws:SourceAccount: whether it reaches a key policy when SNS calls KMS for the publisher is undocumented.
    expect(st.Condition).toEqual({ StringLike: { [SNS_TOPIC_CONTEXT]: { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':sns:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':*']] } } });
  });

  it('puts a source condition on every service principal of every resource policy', () => {
    const unconditioned: string[] = [];
    for (const [id, resource] of Object.entries(s.template.toJSON().Resources as Record<string, any>)) {
      const document = resource.Properties?.PolicyDocument ?? resource.Properties?.KeyPolicy;
      if (!document || resource.Type === 'AWS::IAM::Policy') continue;
      for (const st of document.Statement) {
        const service = st.Principal?.Service;
        if (st.Effect === 'Allow' && service && !st.Condition) unconditioned.push(`${id}: ${JSON.stringify(service)}`);
      }
    }
    expect(unconditioned).toEqual([]);
  });

  it('keeps the export bucket encrypted, private, TLS-only and expiring', () => {
    const [[id, bucket]] = Object.entries(resources(s.template, 'AWS::S3::Bucket')).filter(([logicalId]) => logicalId.startsWith('ExportBucket'));
    expect(bucket.Properties).toMatchObject({
      BucketEncryption: { ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }] },
      PublicAccessBlockConfiguration: { BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true },
      LifecycleConfiguration: { Rules: [expect.objectContaining({ Status: 'Enabled', ExpirationInDays: 365 })] },
      LoggingConfiguration: expect.anything(),
    });
    s.template.hasResourceProperties('AWS::S3::BucketPolicy', {
      Bucket: { Ref: id },
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } })]) },
    });
  });
});

describe('cdk-nag (AwsSolutions, v3)', () => {
  it('finds nothing unacknowledged in the default stack, and every acknowledgement has a reason', () => {
    expect(new AwsSolutionsChecks().validateScope(s.app).violations).toEqual([]);
    const acks = acknowledgements(s.app);
    expect(acks.length).toBeGreaterThan(0);
    for (const ack of acks) expect(ack.reason.length, `${ack.id} at ${ack.path}`).toBeGreaterThan(60);
  });

  it('finds nothing unacknowledged with HTTPS, a region (ALB access logs), Multi-AZ and no deletion protection', () => {
    const variant = synth({
      env: { account: '123456789012', region: 'eu-west-1' },
      service: { certificateArn: 'arn:aws:acm:eu-west-1:123456789012:certificate/abc' },
      database: { multiAz: true, deletionProtection: false },
    });
    expect(new AwsSolutionsChecks().validateScope(variant.app).violations).toEqual([]);
  });

  it('runs as the app\'s validation plugin: synth passes clean, and fails on an unacknowledged error', () => {
    const app = newApp({ alertEmail: 'oncall@acme.io' });
    const { stackName, props } = settingsFromContext(app.node);
    new BackendStack(app, stackName, props);
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();

    const bad = newApp();
    new sqs.Queue(new Stack(bad, 'Bad'), 'PlainQueue');
    Validations.of(bad).addPlugins(new AwsSolutionsChecks(bad));
    expect(() => bad.synth()).toThrow(/AwsSolutions-SQS/);
  });
});
