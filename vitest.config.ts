import { readdirSync } from 'node:fs';
import path from 'node:path';
import { defineConfig } from 'vitest/config';
import LongestFirst from './test/sequencer.js';

/** Infrastructure tests that start processes or use the run's Postgres: they run with those. */
const INFRA_WITH_PROCESSES = ['test/infra/dockerfile.test.ts', 'test/infra/job-executions.test.ts'];
const INFRA_SYNTH = readdirSync('test/infra')
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => `test/infra/${f}`)
  .filter((f) => !INFRA_WITH_PROCESSES.includes(f));

/**
 * `npm run test:fast`: the files that neither synthesize the stack nor start servers or jobs,
 * for the inner loop. `npm test` runs them with everything else.
 */
const FAST = [
  'test/api.test.ts',
  'test/api-security.test.ts',
  'test/config.test.ts',
  'test/pg-version.test.ts',
  'test/health.test.ts',
  'test/layout.test.ts',
  'test/readme.test.ts',
  'test/runtime.test.ts',
  'test/drain-race.test.ts',
  'test/jobs/parts.test.ts',
  'test/jobs/registry.test.ts',
];

export default defineConfig({
  test: {
    // The Node that runs vitest (node_modules/.bin/node under npm scripts and npx) comes first
    // on every test's PATH, so a child that runs `node` (npm run build, a Dockerfile RUN line,
    // cdk's app command) gets the same Node as the tests, never the machine's.
    env: { PATH: [path.dirname(process.execPath), process.env.PATH].join(path.delimiter) },
    // Tests start real processes and a real Postgres; their waits are bounded by their own
    // deadlines. These only catch a hang, so they are generous: on a machine with a load of 30
    // a cdk synth or a server start takes ten times as long as on a quiet one.
    testTimeout: 180_000,
    hookTimeout: 300_000,
    pool: 'forks',
    sequence: { sequencer: LongestFirst },
    // Two cores, three workers: the process tests spend much of their time waiting on their
    // children, Postgres and timers, so two workers kept less than one core busy on average
    // (414 s of CPU in a 490 s run). Their timing windows are made for a machine with two CPU
    // hogs beside the run, which load the cores more than a third worker does.
    maxWorkers: 3,
    projects: [
      {
        extends: true,
        test: {
          name: 'fast',
          include: FAST,
          globalSetup: ['test/global-setup.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'processes',
          include: ['test/**/*.test.ts'],
          exclude: [...FAST, ...INFRA_SYNTH],
          globalSetup: ['test/global-setup.ts'],
        },
      },
      {
        // The synth tests share one module graph per worker: aws-cdk-lib is loaded once, and
        // the shipped stack is synthesized once (test/infra/synth.ts), not once per file.
        extends: true,
        test: {
          name: 'infra',
          include: INFRA_SYNTH,
          isolate: false,
        },
      },
    ],
  },
});
