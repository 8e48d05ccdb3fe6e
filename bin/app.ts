#!/usr/bin/env node
/**
 * The CDK app: `npx cdk synth` / `npx cdk deploy`. Settings come from cdk.json context
 * (README.md, Infrastructure, lists them); the jobs table from lib/jobs.ts.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { settingsFromContext } from '../lib/settings.js';
import { BackendStack } from '../lib/stack.js';
import { InvalidSettingsError } from '../lib/validation.js';

const app = new App();
try {
  const { stackName, props } = settingsFromContext(app.node);
  new BackendStack(app, stackName, props);
} catch (err) {
  // A bad setting or jobs table is the user's to fix: print every problem, not a stack trace.
  if (!(err instanceof InvalidSettingsError)) throw err;
  console.error(err.message);
  process.exit(1);
}
// cdk-nag v3 is a policy validation plugin: synth fails on any unacknowledged error.
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
