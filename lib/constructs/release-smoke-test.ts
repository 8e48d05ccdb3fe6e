/**
 * A release is tested before it gets production traffic: with canary deploys, ECS runs this
 * Lambda function as the service's lifecycle hook after the test traffic shift, when the new
 * revision answers all of the test listener's traffic and none of production's. The function
 * (lib/hooks/smoke-test.mjs) runs the smoke test (lib/hooks/smoke.mjs: health, an authenticated
 * read with the operator key, the OpenAPI document) through the test listener; a failure
 * answers FAILED, and ECS rolls the deploy back before any user reaches the new release.
 *
 * The function runs in the private subnets, so its requests to the load balancer leave through
 * the NAT gateways: the test listener's port is opened to their Elastic IPs only.
 */
import { fileURLToPath } from 'node:url';
import { Duration, type RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { HOOK_ENV } from '../hooks/smoke-test.mjs';
import { CHECKS, REQUEST_TIMEOUT_MS } from '../hooks/smoke.mjs';
import { RELEASE_SMOKE_DEFAULTS } from '../defaults.js';
import { TEST_LISTENER } from './canary-deploys.js';

/** The hook's folder: its two modules are the function's code asset. */
const HOOKS_DIR = fileURLToPath(new URL('../hooks', import.meta.url));

export interface ReleaseSmokeTestProps {
  /** The service whose deploys the hook gates (a canary, blue/green or linear one). */
  readonly service: ecs.FargateService;
  /** The VPC whose private subnets the function runs in; its NAT gateways' addresses may reach the test listener. */
  readonly vpc: ec2.Vpc;
  /** The test listener and its URL. */
  readonly testListener: { readonly listener: elbv2.ApplicationListener; readonly url: string };
  /** The secret holding the operator key (ADMIN_API_KEY). */
  readonly operatorKey: secretsmanager.ISecret;
  /** Retention of the function's logs. @default logs.RetentionDays.ONE_MONTH */
  readonly logRetention?: logs.RetentionDays;
  /** Encrypts those logs. @default - CloudWatch Logs' own encryption */
  readonly logKey?: kms.IKey;
  /** What a stack deletion does with those logs. @default RemovalPolicy.RETAIN */
  readonly logRemovalPolicy?: RemovalPolicy;
}

/** The NAT gateways' Elastic IPs of a VPC the CDK built (each public subnet with a NAT gateway holds one, as `EIP`). */
function natAddresses(vpc: ec2.Vpc): string[] {
  return vpc.publicSubnets
    .map((subnet) => subnet.node.tryFindChild('EIP'))
    .filter((eip): eip is ec2.CfnEIP => eip instanceof ec2.CfnEIP)
    .map((eip) => eip.attrPublicIp);
}

export class ReleaseSmokeTest extends Construct {
  /** The lifecycle hook's function. */
  public readonly function: lambda.Function;

  constructor(scope: Construct, id: string, props: ReleaseSmokeTestProps) {
    super(scope, id);
    const addresses = natAddresses(props.vpc);
    if (addresses.length === 0) throw new Error('The release smoke test runs in the private subnets and reaches the test listener through a NAT gateway, but the VPC has none (natGateways 0)');

    const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: 'The release smoke test: out to the test listener (through NAT) and Secrets Manager, nothing in',
      allowAllOutbound: true,
    });
    const logGroup = new logs.LogGroup(this, 'Logs', { retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH, encryptionKey: props.logKey, removalPolicy: props.logRemovalPolicy });
    this.function = new lambda.Function(this, 'Hook', {
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      code: lambda.Code.fromAsset(HOOKS_DIR),
      handler: 'smoke-test.handler',
      description: 'Smoke-tests a deploy\'s new revision through the test listener before production traffic shifts; FAILED rolls the deploy back',
      // Every check may take its whole request timeout, plus reading the key.
      timeout: Duration.seconds(Math.ceil((CHECKS.length * REQUEST_TIMEOUT_MS) / 1000) + 15),
      vpc: props.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [securityGroup],
      logGroup,
      environment: {
        [HOOK_ENV.baseUrl]: props.testListener.url,
        [HOOK_ENV.operatorKeySecret]: props.operatorKey.secretArn,
        [HOOK_ENV.attempts]: String(RELEASE_SMOKE_DEFAULTS.attempts),
        [HOOK_ENV.retrySeconds]: String(RELEASE_SMOKE_DEFAULTS.retrySeconds),
      },
    });
    props.operatorKey.grantRead(this.function);
    for (const address of addresses) {
      props.testListener.listener.connections.allowFrom(ec2.Peer.ipv4(`${address}/32`), ec2.Port.tcp(TEST_LISTENER.port), 'The release smoke test, through the NAT gateway');
    }
    const hook = new ecs.DeploymentLifecycleLambdaTarget(this.function, 'SmokeTest', {
      lifecycleStages: [ecs.DeploymentLifecycleStage.POST_TEST_TRAFFIC_SHIFT],
    });
    props.service.addLifecycleHook(hook);
    // The role ECS assumes to run the hook is made inside the service, when the service binds it.
    Validations.of(props.service).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId(this.function.node.defaultChild as lambda.CfnFunction)}.Arn>:*]`,
      reason: 'The role ECS assumes to run the lifecycle hook invokes this one function, any version or alias of it (the :* suffix the CDK adds); it names the function.',
    });

    const managed = (policy: string) => `AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/${policy}]`;
    for (const policy of ['AWSLambdaBasicExecutionRole', 'AWSLambdaVPCAccessExecutionRole']) {
      Validations.of(this.function).acknowledge({ id: managed(policy), reason: 'The AWS managed policies for a Lambda function\'s own logs and its network interfaces in the VPC; they grant nothing else.' });
    }
  }
}
