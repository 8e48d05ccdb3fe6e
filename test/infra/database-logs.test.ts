/**
 * The database's exported logs get a retention in the stack: one LogRetention per log, on the
 * group RDS names after the instance's generated identifier (lib/constructs/database-logs.ts),
 * with the stage's retention and the data's removal policy, and the instance keeps no fixed
 * identifier (setting one would replace a deployed instance).
 */
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, it } from 'vitest';
import { EXPORTED_LOGS } from '../../lib/constructs/database.js';
import { STAGE_DEFAULTS } from '../../lib/defaults.js';
import { resources, synth, TEST_DOMAIN } from './synth.js';

describe.each(['dev', 'prod'] as const)('the %s stage', (stage) => {
  const d = STAGE_DEFAULTS[stage];
  const s = synth({ stage, service: stage === 'prod' ? { domain: TEST_DOMAIN } : {} });

  it(`keeps each exported log ${d.logRetentionDays} days, on the group named after the generated instance identifier`, () => {
    const [instanceId, instance] = Object.entries(resources(s.template, 'AWS::RDS::DBInstance'))[0]!;
    expect(instance.Properties.DBInstanceIdentifier).toBeUndefined();
    expect(instance.Properties.EnableCloudwatchLogsExports).toEqual([...EXPORTED_LOGS]);
    const retentions = Object.values(resources(s.template, 'Custom::LogRetention')).map((r) => r.Properties);
    expect(retentions.map((r) => r.LogGroupName)).toEqual(EXPORTED_LOGS.map((log) => ({ 'Fn::Join': ['', ['/aws/rds/instance/', { Ref: instanceId }, `/${log}`]] })));
    for (const r of retentions) {
      expect(r.RetentionInDays).toBe(d.logRetentionDays);
      // Kept with a retained database (its final snapshot); deleted with a disposable one.
      expect(r.RemovalPolicy).toBe(d.retainData ? 'retain' : 'destroy');
    }
  });

  it('leaves nothing for cdk-nag', () => {
    expect(new AwsSolutionsChecks().validateScope(s.app).violations).toEqual([]);
  });
});

it('sets no retention for an existing database, whose logs are its owner\'s', () => {
  const existing = synth({ database: { secretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf' } });
  existing.template.resourceCountIs('Custom::LogRetention', 0);
});
