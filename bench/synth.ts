/**
 * `npm run bench:synth`: how `cdk synth` scales with the jobs table.
 *
 * Runs the real CLI (`cdk synth --quiet`, cdk-nag included) on the app of bench/synth-app.ts
 * with 1 job and with 50 jobs, alternately, a few times each in the same run, and reports
 * the medians and their ratio. Target: 50 jobs take at most twice as long as 1.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const SIZES = [1, 50] as const;
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const TARGET_RATIO = 2;
const CDK = path.resolve('node_modules/.bin/cdk');

interface Run {
  readonly seconds: number;
  readonly resources: number;
}

function synth(jobs: number): Run {
  const outdir = mkdtempSync(path.join(tmpdir(), 'bench-synth-'));
  try {
    const started = performance.now();
    execFileSync(CDK, ['synth', '--quiet', '--app', 'node --import tsx bench/synth-app.ts', '--context', `benchJobs=${jobs}`, '--context', 'alertEmail=none', '--output', outdir], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const seconds = (performance.now() - started) / 1_000;
    const template = JSON.parse(readFileSync(path.join(outdir, 'EcsSaasBackend-dev.template.json'), 'utf8'));
    return { seconds, resources: Object.keys(template.Resources).length };
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

console.log(`cdk synth (CLI, cdk-nag on), ${RUNS} runs per size, alternating; node ${process.version}`);
const results = new Map<number, Run[]>(SIZES.map((n) => [n, []]));
// One unmeasured run warms the disk cache and the asset hash cache of the OS, not of the process.
synth(1);
for (let i = 0; i < RUNS; i++) {
  for (const n of SIZES) {
    const run = synth(n);
    results.get(n)!.push(run);
    console.log(`  run ${i + 1}: ${String(n).padStart(2)} job(s): ${run.seconds.toFixed(2)} s (${run.resources} resources)`);
  }
}

const [small, large] = SIZES.map((n) => median(results.get(n)!.map((r) => r.seconds)));
const ratio = large! / small!;
console.log('');
console.log(`| jobs | median synth | resources |`);
console.log(`| ---: | ---: | ---: |`);
for (const n of SIZES) console.log(`| ${n} | ${median(results.get(n)!.map((r) => r.seconds)).toFixed(2)} s | ${results.get(n)![0]!.resources} |`);
console.log('');
console.log(`ratio 50/1: ${ratio.toFixed(2)}x (target <= ${TARGET_RATIO}x): ${ratio <= TARGET_RATIO ? 'met' : 'MISSED'}`);
process.exitCode = ratio <= TARGET_RATIO ? 0 : 1;
