/**
 * bin/app.ts with a generated jobs table of `-c benchJobs=N` jobs, for `npm run bench:synth`.
 * Every job is a valid, distinct row (its own schedule), as a real table would be.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { addBackendStack } from '../lib/app.js';
import { JOBS, type JobDefinition } from '../lib/jobs.js';

/** `count` jobs: the table's first row, then variations with their own names and daily times. */
export function benchJobs(count: number): JobDefinition[] {
  const [first] = JOBS;
  return Array.from({ length: count }, (_, i) => i === 0
    ? { ...first }
    : {
      ...first,
      name: `bench-job-${i}`,
      description: `Benchmark job ${i}`,
      schedule: `cron(${(i * 7) % 60} ${i % 24} * * ? *)`,
      spot: i % 2 === 0,
      missedRunGraceMinutes: 30 + i,
    });
}

const app = new App();
const count = Number(app.node.tryGetContext('benchJobs') ?? 1);
addBackendStack(app, { jobs: benchJobs(count) });
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
