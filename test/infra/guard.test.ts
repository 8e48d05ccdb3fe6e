/**
 * The Control Tower guard rules (cfn-guard, through @cdklabs/cdk-validator-cfnguard) as the
 * app runs them with `-c guard=true`: no unacknowledged finding in either stage, every
 * acknowledgement with a reason, and a new finding still fails synth. The stages are
 * synthesized with aws-cdk-lib's own CloudFormation validation on, as `cdk synth` runs it (the
 * other synth tests turn it off: test/infra/synth.ts).
 */
import { CfnResource, Stack, Validations } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { acknowledgeGuardFindings, GUARD_ACKNOWLEDGEMENTS, GUARD_PLUGIN, guardPlugin } from '../../lib/constructs/guard.js';
import { settingsFromContext } from '../../lib/constructs/settings.js';
import { BackendStack } from '../../lib/constructs/stack.js';
import { newApp, NOW, TEST_DOMAIN } from './synth.js';

/** The rule ids acknowledged anywhere under `root`. */
function acknowledged(root: IConstruct): Set<string> {
  const ids = new Set<string>();
  for (const c of root.node.findAll()) {
    for (const entry of c.node.metadata) {
      if (entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY) for (const id of Object.keys(entry.data as object)) ids.add(id);
    }
  }
  return ids;
}

describe('the Control Tower guard rules', () => {
  const used = new Set<string>();

  it.each(['dev', 'prod'])('find nothing unacknowledged in the %s stage, whose templates CloudFormation\'s validation passes', async (stage) => {
    // Prod serves HTTPS only, so its synth gets a domain, as .ci/run's does.
    const app = newApp({ stage, alertEmail: 'none', guard: 'true', ...(stage === 'prod' ? TEST_DOMAIN : {}) }, { validate: true });
    const { stackName, props } = settingsFromContext(app.node);
    new BackendStack(app, stackName, { ...props, now: NOW });
    acknowledgeGuardFindings(app);
    Validations.of(app).addPlugins(await guardPlugin());
    expect(() => app.synth()).not.toThrow();
    for (const id of acknowledged(app)) used.add(id);
  }, 300_000);

  it('acknowledge only rules a stage needs, each with its control and a reason', () => {
    for (const ack of GUARD_ACKNOWLEDGEMENTS) {
      expect(ack.control, ack.rule).toMatch(/^CT\.[A-Z0-9]+\.PR\.\d+$/);
      expect(ack.reason.length, ack.rule).toBeGreaterThan(60);
      expect(used, `${ack.rule} is acknowledged but no stage needs it: remove the row`).toContain(`${GUARD_PLUGIN}::${ack.rule}`);
    }
  });

  it('fail synth on a finding nobody acknowledged', async () => {
    const app = newApp();
    new logs.LogGroup(new Stack(app, 'Plain'), 'Logs', { retention: logs.RetentionDays.ONE_WEEK });
    acknowledgeGuardFindings(app);
    Validations.of(app).addPlugins(await guardPlugin());
    expect(() => app.synth()).toThrow(/CT\.CLOUDWATCH\.PR\.3/);
  }, 300_000);

  it('synthesize the stages with CloudFormation\'s validation live: a property CloudFormation does not know fails synth', () => {
    const app = newApp({}, { validate: true });
    new CfnResource(new Stack(app, 'Plain'), 'Topic', { type: 'AWS::SNS::Topic', properties: { NoSuchProperty: 'x' } });
    expect(() => app.synth()).toThrow(/NoSuchProperty: Additional properties are not allowed/);
  });
});
