/**
 * bin/app.ts with a generated jobs table of `-c benchJobs=N` jobs, for `npm run bench:synth`.
 * The table comes from bench/jobs-table.ts.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { addBackendStack } from '../lib/constructs/app.js';
import { benchJobs } from './jobs-table.js';

const app = new App();
const count = Number(app.node.tryGetContext('benchJobs') ?? 1);
addBackendStack(app, { jobs: benchJobs(count) });
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
