#!/usr/bin/env node
/**
 * The CDK app: `npx cdk synth` / `npx cdk deploy`. Settings come from cdk.json context
 * (docs/configuration.md lists them); the jobs table from lib/jobs.ts.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { addBackendStack } from '../lib/constructs/app.js';
import { acknowledgeGuardFindings, guardPlugin } from '../lib/constructs/guard.js';

const app = new App();
addBackendStack(app);
acknowledgeGuardFindings(app);
// cdk-nag v3 is a policy validation plugin: synth fails on any unacknowledged error.
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
// The Control Tower rules run a cfn-guard binary, so only when asked: `npm run check:guard`.
if (['true', true].includes(app.node.tryGetContext('guard'))) Validations.of(app).addPlugins(await guardPlugin());
