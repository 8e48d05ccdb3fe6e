/**
 * bin/app.ts with a generated jobs table of `-c benchJobs=N` jobs, for `npm run bench:synth`;
 * `-c benchZoned=true` gives every job a time zone. The table comes from bench/jobs-table.ts.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { addBackendStack } from '../lib/constructs/app.js';
import { benchJobs } from './jobs-table.js';

const app = new App();
const count = Number(app.node.tryGetContext('benchJobs') ?? 1);
const zoned = ['true', true].includes(app.node.tryGetContext('benchZoned'));
addBackendStack(app, { jobs: benchJobs(count, { zoned }) });
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
