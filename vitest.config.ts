import path from 'node:path';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
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
    // Two cores: more workers only makes the timing-window tests noisy.
    maxWorkers: 2,
  },
});
