import { Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { STAGE_DEFAULTS } from '../../lib/defaults.js';
import { settingsFromContext } from '../../lib/constructs/settings.js';
import { BackendStack } from '../../lib/constructs/stack.js';
import { errorMessage, newApp, NOW, resources, synth, TEST_DOMAIN } from './synth.js';

/** The stack `cdk synth -c stage=<stage>` builds (with the test's alert address). */
function synthStage(context: Record<string, unknown>) {
  const app = newApp(context);
  const { stackName, props } = settingsFromContext(app.node);
  const stack = new BackendStack(app, stackName, { ...props, now: NOW });
  return { stack, template: Template.fromStack(stack) };
}

const only = <T>(record: Record<string, T>): T => {
  const values = Object.values(record);
  expect(values).toHaveLength(1);
  return values[0]!;
};
const albAttribute = (template: Template, key: string) =>
  only(resources(template, 'AWS::ElasticLoadBalancingV2::LoadBalancer')).Properties.LoadBalancerAttributes
    .find((a: { Key: string }) => a.Key === key)?.Value;

/** A name built from Fn::Join, Fn::Select, Fn::Split and Refs to the stack, as CloudFormation resolves it for the stack `stackId`. */
function resolveName(value: unknown, stackId: string): any {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map((v) => resolveName(v, stackId));
  const [fn, args] = Object.entries(value as Record<string, any>)[0]!;
  const name = stackId.split('/')[1];
  switch (fn) {
    case 'Ref': return { 'AWS::StackId': stackId, 'AWS::StackName': name }[args as string];
    case 'Fn::Join': return (resolveName(args[1], stackId) as string[]).join(args[0]);
    case 'Fn::Split': return (resolveName(args[1], stackId) as string).split(args[0]);
    case 'Fn::Select': return (resolveName(args[1], stackId) as string[])[Number(args[0])];
    default: throw new Error(`resolveName: ${fn} is not resolved here`);
  }
}

describe.each(['dev', 'prod'] as const)('stage %s', (stage) => {
  const d = STAGE_DEFAULTS[stage];
  const { stack, template } = synthStage({ stage, ...(stage === 'prod' ? TEST_DOMAIN : {}) });

  it('is its own stack, so one stage never replaces another', () => {
    expect(stack.stackName).toBe(`EcsSaasBackend-${stage}`);
    expect(stack.stage).toBe(stage);
  });

  it('sizes the API and the database from the stage', () => {
    // No DesiredCount: a deploy leaves the count auto-scaling chose alone.
    template.hasResourceProperties('AWS::ECS::Service', { DesiredCount: Match.absent() });
    template.hasResourceProperties('AWS::ApplicationAutoScaling::ScalableTarget', { MinCapacity: d.minCapacity, MaxCapacity: d.maxCapacity });
    template.hasResourceProperties('AWS::RDS::DBInstance', { DBInstanceClass: `db.${d.databaseInstanceType}`, MultiAZ: d.databaseMultiAz });
    template.resourceCountIs('AWS::EC2::NatGateway', d.natGateways);
    template.hasResourceProperties('AWS::Logs::LogGroup', { RetentionInDays: d.logRetentionDays });
  });

  it('protects and retains the data in prod only, and the secret whenever the database is kept', () => {
    const db = only(resources(template, 'AWS::RDS::DBInstance')) as any;
    expect(db.Properties.DeletionProtection).toBe(d.deletionProtection);
    expect(albAttribute(template, 'deletion_protection.enabled')).toBe(String(d.deletionProtection));
    expect(db.DeletionPolicy).toBe(d.retainData ? 'Snapshot' : 'Delete');
    // The database's secrets, master and login role; the API's admin key (lib/constructs/web-service.ts) is made anew by a redeploy.
    const secrets = Object.entries(resources(template, 'AWS::SecretsManager::Secret')).filter(([id]) => id.includes('Database'));
    expect(secrets.map(([id]) => /Database(Instance|Login)Secret/.exec(id)?.[0]).sort()).toEqual(['DatabaseInstanceSecret', 'DatabaseLoginSecret']);
    // Kept on a teardown, but deleted when a first create rolls back: a retry meets no leftover.
    for (const [id, secret] of secrets) expect((secret as any).DeletionPolicy, id).toBe(d.retainData ? 'RetainExceptOnCreate' : 'Delete');
    for (const type of ['AWS::Logs::LogGroup', 'AWS::KMS::Key']) {
      for (const [id, resource] of Object.entries(resources(template, type))) expect((resource as any).DeletionPolicy, id).toBe(d.retainData ? 'RetainExceptOnCreate' : 'Delete');
    }
  });

  it('leaves nothing with a fixed name behind when a first create rolls back', () => {
    const NAMES: Record<string, string> = { 'AWS::Logs::LogGroup': 'LogGroupName', 'AWS::S3::Bucket': 'BucketName', 'AWS::SecretsManager::Secret': 'Name', 'AWS::RDS::DBInstance': 'DBInstanceIdentifier', 'AWS::KMS::Key': 'KeyId' };
    const all = template.toJSON().Resources as Record<string, { Type: string; DeletionPolicy?: string; Properties?: Record<string, unknown> }>;
    const named = Object.entries(all).filter(([, r]) => NAMES[r.Type] !== undefined && r.Properties?.[NAMES[r.Type]!] !== undefined);
    // The execution log group is named (its resource policy stays short under /aws/vendedlogs/).
    expect(named.length).toBeGreaterThan(0);
    for (const [id, r] of named) expect(r.DeletionPolicy ?? 'Delete', id).not.toBe('Retain');
  });

  it('names the execution log group anew for each create, so a teardown and a redeploy never meet the retained one', () => {
    const [group] = Object.values(resources(template, 'AWS::Logs::LogGroup')).filter((r) => JSON.stringify(r.Properties.LogGroupName ?? '').includes('vendedlogs'));
    // Two creates of the stack under the same name: CloudFormation gives each a new stack id.
    const first = resolveName(group!.Properties.LogGroupName, `arn:aws:cloudformation:eu-west-1:123456789012:stack/EcsSaasBackend-${stage}/8a4b2c3d-1111-2222-3333-444455556666`);
    const again = resolveName(group!.Properties.LogGroupName, `arn:aws:cloudformation:eu-west-1:123456789012:stack/EcsSaasBackend-${stage}/f00dfeed-7777-8888-9999-000011112222`);
    expect(first).toBe(`/aws/vendedlogs/states/EcsSaasBackend-${stage}-jobs-8a4b2c3d`);
    expect(again).toBe(`/aws/vendedlogs/states/EcsSaasBackend-${stage}-jobs-f00dfeed`);
    // Within CloudWatch Logs' 512 characters with the longest stack name CloudFormation allows (128).
    expect(first.length - `EcsSaasBackend-${stage}`.length + 128).toBeLessThanOrEqual(512);
  });
});

describe('stages', () => {
  it('lets a context key override its stage default', () => {
    const { template } = synthStage({ stage: 'prod', ...TEST_DOMAIN, minCapacity: 3, canaryDeploys: false, databaseMultiAz: false, deletionProtection: false });
    template.hasResourceProperties('AWS::ApplicationAutoScaling::ScalableTarget', { MinCapacity: 3 });
    template.hasResourceProperties('AWS::ECS::Service', { DeploymentConfiguration: { DeploymentCircuitBreaker: { Enable: true, Rollback: true } } });
    template.hasResourceProperties('AWS::RDS::DBInstance', { MultiAZ: false, DeletionProtection: false });
  });

  it('rejects an unknown stage, naming the choices', () => {
    expect(errorMessage(() => settingsFromContext(newApp({ stage: 'production' }).node))).toContain('stage must be one of dev, prod, got "production"');
  });
});

describe('a first deploy', () => {
  const { template } = synth();
  const service = only(template.findResources('AWS::ECS::Service')) as { DependsOn: string[] };

  it('creates the service only after its execution role\'s policy, the NAT routes and the database ingress rules', () => {
    expect(service.DependsOn).toEqual(expect.arrayContaining([expect.stringMatching(/^ApiTaskDefExecutionRoleDefaultPolicy/)]));
    const routes = Object.keys(template.findResources('AWS::EC2::Route', { Properties: { NatGatewayId: Match.anyValue() } }));
    expect(routes.length).toBeGreaterThan(0);
    expect(service.DependsOn).toEqual(expect.arrayContaining(routes));
    const ingress = Object.keys(template.findResources('AWS::EC2::SecurityGroupIngress', { Properties: { FromPort: Match.anyValue(), GroupId: { 'Fn::GetAtt': [Match.stringLikeRegexp('^DatabaseInstanceSecurityGroup'), 'GroupId'] } } }));
    // The API's, the jobs' and the migrations task's.
    expect(ingress).toHaveLength(3);
    expect(service.DependsOn).toEqual(expect.arrayContaining(ingress));
  });
});

describe('the web ACL', () => {
  it('is off by default in dev', () => {
    synth().template.resourceCountIs('AWS::WAFv2::WebACL', 0);
  });

  it('is on by default in prod', () => {
    const prod = (context: Record<string, unknown>) => settingsFromContext(newApp({ stage: 'prod', domainName: 'api.acme.io', hostedZoneId: 'Z0123456789ABCDEFGHIJ', hostedZoneName: 'acme.io', ...context }).node).props.waf;
    expect(prod({})).toBeTypeOf('object');
    expect(prod({ waf: false })).toBe(false);
    expect(settingsFromContext(newApp({}).node).props.waf).toBe(false);
  });

  it('puts a per-IP and a per-key rate limit and AWS\'s common rule set in front of the load balancer', () => {
    const { template } = synthStage({ waf: 'true', wafRateLimit: '500', wafKeyRateLimit: '300' });
    const acl = only(resources(template, 'AWS::WAFv2::WebACL'));
    expect(acl.Properties.Scope).toBe('REGIONAL');
    expect(acl.Properties.Rules).toEqual([
      expect.objectContaining({ Priority: 0, Action: { Block: {} }, Statement: { RateBasedStatement: { Limit: 500, AggregateKeyType: 'IP' } } }),
      expect.objectContaining({
        Priority: 1,
        Action: { Block: {} },
        Statement: {
          RateBasedStatement: {
            Limit: 300,
            AggregateKeyType: 'CUSTOM_KEYS',
            CustomKeys: [{ Header: { Name: 'authorization', TextTransformations: [{ Priority: 0, Type: 'COMPRESS_WHITE_SPACE' }, { Priority: 1, Type: 'LOWERCASE' }] } }],
          },
        },
      }),
      expect.objectContaining({ Priority: 2, Statement: { ManagedRuleGroupStatement: { VendorName: 'AWS', Name: 'AWSManagedRulesCommonRuleSet' } } }),
    ]);
    template.hasResourceProperties('AWS::WAFv2::WebACLAssociation', { ResourceArn: { Ref: Match.stringLikeRegexp('^ApiLoadBalancer') } });
  });

  it('rejects a rate limit WAF would refuse', () => {
    expect(errorMessage(() => settingsFromContext(newApp({ waf: true, wafRateLimit: 5 }).node))).toContain('wafRateLimit must be a whole number between 10 and 2000000000, got 5');
  });
});
