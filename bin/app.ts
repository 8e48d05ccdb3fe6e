#!/usr/bin/env node
/**
 * The CDK app: `npx cdk synth` / `npx cdk deploy`. Settings come from cdk.json context
 * (README.md, Infrastructure, lists them); the jobs table from lib/jobs.ts.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { addBackendStack } from '../lib/app.js';

const app = new App();
addBackendStack(app);
// cdk-nag v3 is a policy validation plugin: synth fails on any unacknowledged error.
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
