/**
 * npm run fuzz -- --minutes N [--seed S]: runs test/fuzz.test.ts for N minutes (split between
 * its two properties) instead of its fast default, and prints the case count and the seed.
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { minutes: { type: 'string', default: '10' }, seed: { type: 'string' } } });
const minutes = Number(values.minutes);
if (!Number.isFinite(minutes) || minutes <= 0) {
  console.error(`--minutes must be a positive number, got ${JSON.stringify(values.minutes)}`);
  process.exit(2);
}
const env = { ...process.env, FUZZ_MINUTES: String(minutes), ...(values.seed ? { FUZZ_SEED: values.seed } : {}) };
const result = spawnSync(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', 'test/fuzz.test.ts', `--testTimeout=${(minutes + 2) * 60_000}`, `--hookTimeout=120000`], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
