/**
 * `npm run bench:synth`: how `cdk synth` scales with the jobs table.
 *
 * Runs the real CLI (`cdk synth --quiet`, cdk-nag included) on the app of bench/synth-app.ts
 * with 1, 50 and 200 jobs, alternately, a few times each in the same run, and reports the
 * medians and their ratios to 1 job. Targets: 50 jobs at most 2x, 200 jobs at most 3x. Each
 * job is a nested stack of its own, so the resources are counted over every template, and the
 * largest template is shown against CloudFormation's limits (500 resources, 1 MB).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const SIZES = [1, 50, 200] as const;
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
/** The most each size may take, as a multiple of 1 job's time. */
const TARGET_RATIO: Record<number, number> = { 50: 2, 200: 3 };
const CDK = path.resolve('node_modules/.bin/cdk');
/** Every size gets a database whose max_connections fits 200 jobs running at once (lib/pool-budget.ts), so the sizes differ by their jobs alone. */
const DATABASE_FOR_200_JOBS = 'm6g.2xlarge';

interface Run {
  readonly seconds: number;
  /** Over every template, the parent's and the nested stacks'. */
  readonly resources: number;
  readonly templates: number;
  /** The largest template's resources and bytes. */
  readonly maxResources: number;
  readonly maxBytes: number;
}

function synth(jobs: number): Run {
  const outdir = mkdtempSync(path.join(tmpdir(), 'bench-synth-'));
  try {
    const started = performance.now();
    execFileSync(CDK, ['synth', '--quiet', '--app', 'node --import tsx bench/synth-app.ts', '--context', `benchJobs=${jobs}`, '--context', 'alertEmail=none', '--context', `databaseInstanceType=${DATABASE_FOR_200_JOBS}`, '--output', outdir], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const seconds = (performance.now() - started) / 1_000;
    const files = readdirSync(outdir).filter((f) => f.endsWith('.template.json'));
    const sizes = files.map((f) => {
      const text = readFileSync(path.join(outdir, f), 'utf8');
      return { resources: Object.keys(JSON.parse(text).Resources).length, bytes: Buffer.byteLength(text) };
    });
    return {
      seconds,
      resources: sizes.reduce((n, t) => n + t.resources, 0),
      templates: files.length,
      maxResources: Math.max(...sizes.map((t) => t.resources)),
      maxBytes: Math.max(...sizes.map((t) => t.bytes)),
    };
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
    console.log(`  run ${i + 1}: ${String(n).padStart(3)} job(s): ${run.seconds.toFixed(2)} s (${run.resources} resources in ${run.templates} templates)`);
  }
}

const medianOf = (n: number) => median(results.get(n)!.map((r) => r.seconds));
const base = medianOf(1);
console.log('');
console.log('| jobs | median synth | vs 1 job | resources (all templates) | templates | largest template |');
console.log('| ---: | ---: | ---: | ---: | ---: | ---: |');
for (const n of SIZES) {
  const r = results.get(n)![0]!;
  console.log(`| ${n} | ${medianOf(n).toFixed(2)} s | ${(medianOf(n) / base).toFixed(2)}x | ${r.resources} | ${r.templates} | ${r.maxResources} resources, ${(r.maxBytes / 1024).toFixed(0)} KiB |`);
}
console.log('');
let met = true;
for (const [n, target] of Object.entries(TARGET_RATIO)) {
  const ratio = medianOf(Number(n)) / base;
  met &&= ratio <= target;
  console.log(`ratio ${n}/1: ${ratio.toFixed(2)}x (target <= ${target}x): ${ratio <= target ? 'met' : 'MISSED'}`);
}
process.exitCode = met ? 0 : 1;
