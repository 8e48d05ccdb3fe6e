/**
 * Shared helpers of the infrastructure tests: an App with the same context as cdk.json, a
 * synthesized BackendStack, and a test copy of the jobs table.
 */
import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { expect } from 'vitest';
import { JOBS, type JobDefinition } from '../../lib/jobs.js';
import { BackendStack, type BackendStackProps } from '../../lib/constructs/stack.js';

/** cdk.json's context (feature flags and settings), so tests synthesize what `cdk synth` does. */
export const CDK_CONTEXT: Record<string, unknown> = JSON.parse(readFileSync(new URL('../../cdk.json', import.meta.url), 'utf8')).context;

/** A fixed "now", so the schedules' gaps (and so the alarms) are the same on every run. */
export const NOW = new Date('2026-01-05T00:00:00Z');

export const STACK_ID = 'Test';

/** cdk.json ships no alertEmail (synth refuses to deploy alerts to nobody), so the tests give one. */
export const TEST_ALERT_EMAIL = 'oncall@acme.io';

/** A domain for HTTPS, as the prod stage needs one (lib/constructs/https.ts). */
export const TEST_DOMAIN = { domainName: 'api.acme.io', hostedZoneId: 'Z0123456789ABCDEFGHIJ', hostedZoneName: 'acme.io' } as const;

/**
 * aws-cdk-lib's own CloudFormation template validation, off in the tests' apps: it costs seconds
 * to start in each test worker and a second per synth (a third of the synth tests' time, 200
 * jobs included), and no test of a variant asserts it. guard.test.ts synthesizes both stages
 * with it on, as `cdk synth` does, and proves that it is on there.
 */
export const NO_BUILTIN_VALIDATION = { builtinCloudFormationValidation: false } as const;

/** An App with cdk.json's context; `validate` turns CloudFormation's template validation on. */
export function newApp(context: Record<string, unknown> = {}, { validate = false }: { validate?: boolean } = {}): App {
  return new App({ context: { ...CDK_CONTEXT, alertEmail: TEST_ALERT_EMAIL, ...context }, builtinCloudFormationValidation: validate });
}

export interface Synthesized {
  readonly app: App;
  readonly stack: BackendStack;
  readonly template: Template;
}

let shipped: Synthesized | undefined;

/**
 * A fresh App and stack with `props` on top of test defaults, synthesized. With no props, the
 * stack as shipped is synthesized once per test worker and shared by every file in it (the
 * infra project runs without isolation): tests only read it, and a synth costs seconds.
 */
export function synth(props: Partial<BackendStackProps> = {}): Synthesized {
  if (Object.keys(props).length === 0) return (shipped ??= build({}));
  return build(props);
}

function build(props: Partial<BackendStackProps>): Synthesized {
  const app = newApp();
  const stack = new BackendStack(app, STACK_ID, { alertEmail: TEST_ALERT_EMAIL, now: NOW, ...props });
  return { app, stack, template: Template.fromStack(stack) };
}

/** A copy of the jobs table, as plain mutable rows. */
export function jobsCopy(): JobDefinition[] {
  return JOBS.map((job) => ({ ...job }));
}

/** A valid extra job, for "one more job" tests. */
export const EXTRA_JOB: JobDefinition = {
  name: 'usage-digest',
  description: 'Mails each account a digest of yesterday\'s usage',
  schedule: 'cron(0 6 * * ? *)',
  cpu: 256,
  memoryMiB: 512,
  timeoutSeconds: 15 * 60,
  retries: 1,
  overlap: 'skip',
  enabled: true,
  spot: false,
  usesExportBucket: false,
  missedRunGraceMinutes: 30,
};

/** The resources of `type` in the template, by logical id. */
export function resources(template: Template, type: string): Record<string, { Properties: Record<string, any> }> {
  return template.findResources(type) as Record<string, { Properties: Record<string, any> }>;
}

/** The message `fn` throws; fails the test when it does not throw. */
export function errorMessage(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('expected an error, but none was thrown');
}

/** A job's nested stack, synthesized. */
export function jobTemplate(s: Synthesized, name: string): Template {
  const scheduled = s.stack.scheduledJobs.jobs.get(name);
  expect(scheduled, name).toBeDefined();
  return Template.fromStack(scheduled!.stack);
}
