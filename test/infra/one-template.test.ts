/**
 * One template, however you deploy: the README's laptop command and deploy.yml's command make the
 * same prod template, offline; and a stack pinned to an account and region still looks nothing up.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { App } from 'aws-cdk-lib';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import { describe, expect, it } from 'vitest';
import { settingsFromContext } from '../../lib/constructs/settings.js';
import { BackendStack, REPO_ROOT } from '../../lib/constructs/stack.js';
import { CDK_CONTEXT, NO_BUILTIN_VALIDATION, NOW, TEST_ALERT_EMAIL, TEST_DOMAIN } from './synth.js';

// Not what differs between the two ways, and staging the Docker context would only cost time.
const IMAGE = ecs.ContainerImage.fromRegistry('public.ecr.aws/docker/library/node:24');

/** What a team sets for prod, in deploy.yml's variables or on the laptop's command line. */
const PROD_SETTINGS: Record<string, string> = { alertEmail: TEST_ALERT_EMAIL, ...TEST_DOMAIN };

/** The `-c key=value` pairs of a command line, with `${{ ... }}` and "$VAR" values given `values`. */
function contextOf(command: string, values: Record<string, string>): Record<string, string> {
  return Object.fromEntries([...command.matchAll(/-c (\w+)=("\$\w+"|[^\s`]+)/g)].map(([, key, value]) => [key!, value!.startsWith('"$') ? values[key!]! : value!]));
}

/** The template `cdk deploy` with `context` would deploy, and the lookups it would need. */
function templateOf(context: Record<string, string>) {
  const app = new App({ context: { ...CDK_CONTEXT, ...context }, ...NO_BUILTIN_VALIDATION });
  const { stackName, props } = settingsFromContext(app.node);
  const stack = new BackendStack(app, stackName, { ...props, now: NOW, image: IMAGE });
  const assembly = app.synth();
  return { template: assembly.getStackByName(stack.stackName).template, missing: assembly.manifest.missing ?? [] };
}

describe('one template, however you deploy', () => {
  const deployYml = readFileSync(path.join(REPO_ROOT, '.github/workflows/deploy.yml'), 'utf8');
  const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');

  it('the laptop command and deploy.yml\'s make the same prod template, with no lookup', () => {
    // Each command with its continuation lines (YAML's folded `>-`, the shell's `\`).
    const ci = deployYml.match(/npx cdk deploy [^\n]*-c stage=prod[^\n]*(\n\s+-c [^\n]*)*/)?.[0];
    const laptop = readme.match(/^npx cdk deploy [^\n]*-c stage=prod(?:[^\n]*\\\n)*[^\n]*/m)?.[0];
    expect(ci).toBeDefined();
    expect(laptop).toBeDefined();
    const fromCi = templateOf(contextOf(ci!, PROD_SETTINGS));
    const fromLaptop = templateOf(contextOf(laptop!.replace(/-c (\w+)=<[^>]+>/g, (_, key: string) => `-c ${key}=${PROD_SETTINGS[key]}`), {}));
    expect(Object.keys(contextOf(laptop!, {})).sort()).toEqual(Object.keys(contextOf(ci!, PROD_SETTINGS)).sort());
    expect(fromCi.missing).toEqual([]);
    expect(fromLaptop.missing).toEqual([]);
    expect(fromCi.template).toEqual(fromLaptop.template);
  }, 300_000);

  it('a stack pinned to an account and region still picks its zones with Fn::GetAZs, looking nothing up', () => {
    const { template, missing } = templateOf({ stage: 'dev', alertEmail: TEST_ALERT_EMAIL, account: '123456789012', region: 'eu-west-1' });
    expect(missing).toEqual([]);
    const zones = Object.values(template.Resources as Record<string, { Type: string; Properties: Record<string, unknown> }>)
      .filter((r) => r.Type === 'AWS::EC2::Subnet')
      .map((r) => r.Properties.AvailabilityZone);
    expect(zones.length).toBeGreaterThan(0);
    for (const zone of zones) expect(zone).toEqual({ 'Fn::Select': [expect.any(Number), { 'Fn::GetAZs': '' }] });
  }, 300_000);
});
