/**
 * `npm run bench:commands`: what a local command costs on an unchanged tree, the inner loop's
 * wait. Each measure is a real process, alternated with the others round by round, median of
 * the rounds, and given as a ratio against bare Node (`node -e 0`) in the same run:
 *
 *   - `node scripts/build.ts`, the build every command runs first, with nothing to build;
 *   - `node dist/app/main.js jobs`, the command itself;
 *   - `npm run jobs`, as typed: npm, the build, the launcher and the command (goal: ≤ 1.5 s);
 *   - the build as it was, a full compile into a fresh folder and a copy of the migrations,
 *     which every command used to run (into a scratch folder here, so dist/ is left alone).
 *
 * With no local Postgres running, `jobs` needs no database. BENCH_ROUNDS changes the rounds.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fmt, median } from './lib.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const JOBS_GOAL_MS = 1_500;
const scratch = mkdtempSync(path.join(tmpdir(), 'bench-commands-'));

const MEASURES: { name: string; command: string[] }[] = [
  { name: 'node -e 0 (baseline)', command: [process.execPath, '-e', '0'] },
  { name: 'node scripts/build.ts, nothing to build', command: [process.execPath, 'scripts/build.ts'] },
  { name: 'node dist/app/main.js jobs', command: [process.execPath, 'dist/app/main.js', 'jobs'] },
  { name: 'npm run jobs', command: ['npm', 'run', 'jobs', '--silent'] },
  {
    name: 'the former build: full compile + copy',
    command: ['sh', '-c', `rm -rf ${scratch}/out && tsc -p tsconfig.build.json --outDir ${scratch}/out && cp -r app/migrations ${scratch}/out/app/migrations`],
  },
];

function timed(command: string[]): number {
  const t0 = performance.now();
  const run = spawnSync(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  const ms = performance.now() - t0;
  if (run.status !== 0) throw new Error(`${command.join(' ')} exited ${run.status}: ${run.stderr}`);
  return ms;
}

// Once first, so that every measure starts from a built, unchanged tree and warm caches.
timed([process.execPath, 'scripts/build.ts']);
const samples = new Map(MEASURES.map((m) => [m.name, [] as number[]]));
for (let round = 0; round < ROUNDS; round++) {
  // Alternate the order, so that a burst of load does not always land on the same measure.
  const order = round % 2 === 0 ? MEASURES : [...MEASURES].reverse();
  for (const m of order) samples.get(m.name)!.push(timed(m.command));
}
rmSync(scratch, { recursive: true, force: true });

const baseline = median(samples.get(MEASURES[0]!.name)!);
console.log(`bench:commands: ${ROUNDS} rounds, medians, ratio against ${MEASURES[0]!.name} in the same run`);
for (const m of MEASURES) {
  const ms = median(samples.get(m.name)!);
  console.log(`  ${m.name.padEnd(42)} ${fmt(ms).padStart(8)} ms  ${(ms / baseline).toFixed(1).padStart(5)}x`);
}
const jobs = median(samples.get('npm run jobs')!);
console.log(`npm run jobs on an unchanged tree: ${fmt(jobs)} ms (goal <= ${fmt(JOBS_GOAL_MS)} ms): ${jobs <= JOBS_GOAL_MS ? 'met' : 'NOT met'}`);
