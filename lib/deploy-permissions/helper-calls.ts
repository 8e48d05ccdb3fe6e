/**
 * The AWS calls each Lambda function CloudFormation runs for the stack makes (custom resources,
 * the migrations provider), by the role it runs as: one line per call, the resource named by
 * its construct id. deploy-permissions' helper test evaluates each role's policy against them,
 * and fails for a function whose role has no entry, or for an SDK command of
 * lib/lambda/run-migrations.mjs missing here.
 */
import { ACCOUNT, REGION, type DeployRequest, type Resolver } from './requests.js';

export interface HelperCall {
  readonly action: string;
  readonly resource: string;
  readonly context?: Readonly<Record<string, string>>;
}

export interface Helper {
  /** The construct id of the role the function runs as (its logical id without the hash). */
  readonly role: string;
  /** Whose code makes the calls. */
  readonly code: string;
  readonly calls: (t: Resolver) => HelperCall[];
}

const arn = (t: Resolver, id: string, type?: string) => t.arnOf(t.id(id, type));
const CLUSTER = 'AWS::ECS::Cluster';
const ecsTasks = { 'iam:PassedToService': 'ecs-tasks.amazonaws.com' };
const migrationsTask = (t: Resolver) => `arn:aws:ecs:${REGION}:${ACCOUNT}:task/${t.resolve({ Ref: t.id('Cluster', CLUSTER) })}/0123456789abcdef0123456789abcdef`;
const invokeBoth = (t: Resolver): HelperCall[] => ['MigrationsStart', 'MigrationsCheck'].map((id) => ({ action: 'lambda:InvokeFunction', resource: arn(t, id) }));

export const HELPERS: readonly Helper[] = [
  {
    role: 'MigrationsStartServiceRole',
    code: 'lib/lambda/run-migrations.mjs (onEvent)',
    calls: (t) => [
      { action: 'ecs:RunTask', resource: arn(t, 'MigrationsTaskDef'), context: { 'ecs:cluster': arn(t, 'Cluster', CLUSTER) } },
      { action: 'iam:PassRole', resource: arn(t, 'MigrationsTaskDefTaskRole'), context: ecsTasks },
      { action: 'iam:PassRole', resource: arn(t, 'MigrationsTaskDefExecutionRole'), context: ecsTasks },
      { action: 'cloudformation:DescribeStacks', resource: t.stackId },
      // On a delete or a rollback: the migrations tasks still running, found and stopped.
      { action: 'ecs:ListTasks', resource: '*', context: { 'ecs:cluster': arn(t, 'Cluster', CLUSTER) } },
      { action: 'ecs:StopTask', resource: migrationsTask(t), context: { 'ecs:cluster': arn(t, 'Cluster', CLUSTER) } },
    ],
  },
  {
    role: 'MigrationsCheckServiceRole',
    code: 'lib/lambda/run-migrations.mjs (isComplete)',
    calls: (t) => [
      { action: 'ecs:DescribeTasks', resource: migrationsTask(t) },
      // Past the deadline: the task is stopped before the resource fails.
      { action: 'ecs:StopTask', resource: migrationsTask(t), context: { 'ecs:cluster': arn(t, 'Cluster', CLUSTER) } },
    ],
  },
  {
    role: 'MigrationsProviderframeworkonEventServiceRole',
    code: 'aws-cdk-lib custom-resources Provider (onEvent: calls the user onEvent, starts the waiter)',
    calls: (t) => [...invokeBoth(t), { action: 'states:StartExecution', resource: arn(t, 'MigrationsProviderwaiterstatemachine') }],
  },
  { role: 'MigrationsProviderframeworkisCompleteServiceRole', code: 'aws-cdk-lib custom-resources Provider (isComplete)', calls: invokeBoth },
  { role: 'MigrationsProviderframeworkonTimeoutServiceRole', code: 'aws-cdk-lib custom-resources Provider (onTimeout)', calls: () => [] },
  {
    role: 'MigrationsProviderwaiterstatemachineRole',
    code: 'aws-cdk-lib custom-resources Provider (the waiter state machine)',
    calls: (t) => ['MigrationsProviderframeworkisComplete', 'MigrationsProviderframeworkonTimeout'].map((id) => ({ action: 'lambda:InvokeFunction', resource: arn(t, id) })),
  },
  {
    role: 'ReleaseSmokeTestHookServiceRole',
    code: 'lib/hooks/smoke-test.mjs (the ECS lifecycle hook: reads the operator key)',
    calls: (t) => [{ action: 'secretsmanager:GetSecretValue', resource: arn(t, 'ApiAdminApiKey', 'AWS::SecretsManager::Secret') }],
  },
  {
    role: 'ApiServiceSmokeTestRole',
    code: 'ECS, running the deployment lifecycle hook',
    calls: (t) => [{ action: 'lambda:InvokeFunction', resource: arn(t, 'ReleaseSmokeTestHook', 'AWS::Lambda::Function') }],
  },
  {
    role: 'LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8aServiceRole',
    code: 'aws-cdk-lib LogRetention (Custom::LogRetention)',
    calls: () => ['logs:PutRetentionPolicy', 'logs:DeleteRetentionPolicy'].map((action) => ({ action, resource: `arn:aws:logs:${REGION}:${ACCOUNT}:log-group:/aws/lambda/any:*` })),
  },
  {
    role: 'CustomVpcRestrictDefaultSGCustomResourceProviderRole',
    code: 'aws-cdk-lib Vpc restrictDefaultSecurityGroup (Custom::VpcRestrictDefaultSG)',
    calls: (t) => ['ec2:AuthorizeSecurityGroupIngress', 'ec2:AuthorizeSecurityGroupEgress', 'ec2:RevokeSecurityGroupIngress', 'ec2:RevokeSecurityGroupEgress']
      .map((action) => ({ action, resource: `arn:aws:ec2:${REGION}:${ACCOUNT}:security-group/${t.resolve({ 'Fn::GetAtt': [t.id('Vpc', 'AWS::EC2::VPC'), 'DefaultSecurityGroup'] })}` })),
  },
];

/** The requests of `helper` in a template, labelled with the code that makes them. */
export function helperRequests(helper: Helper, t: Resolver): DeployRequest[] {
  return helper.calls(t).map((c) => ({ context: {}, ...c, for: `${t.template.label} ${helper.role} (${helper.code})` }));
}
