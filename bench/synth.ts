/**
 * `npm run bench:synth`: how `cdk synth` scales with the jobs table.
 *
 * Runs the real CLI (`cdk synth --quiet`, cdk-nag included) on the app of bench/synth-app.ts
 * with 1, 50 and 200 jobs, and 200 jobs that all have a time zone (EventBridge Scheduler
 * schedules instead of rules, their next runs computed in the zone), alternately, a few times
 * each in the same run, and reports the medians and their ratios to 1 job. Targets: 50 jobs
 * at most 2x, 200 jobs (either kind) at most 3x. Each
 * job is a nested stack of its own, so the resources are counted over every template, and the
 * largest template is shown against CloudFormation's limits (500 resources, 1 MB).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

interface Case {
  readonly label: string;
  readonly jobs: number;
  readonly zoned: boolean;
  /** The most it may take, as a multiple of 1 job's time. */
  readonly target?: number;
}
const CASES: readonly Case[] = [
  { label: '1', jobs: 1, zoned: false },
  { label: '50', jobs: 50, zoned: false, target: 2 },
  { label: '200', jobs: 200, zoned: false, target: 3 },
  { label: '200 zoned', jobs: 200, zoned: true, target: 3 },
];
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
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

function synth(c: Case): Run {
  const outdir = mkdtempSync(path.join(tmpdir(), 'bench-synth-'));
  try {
    const started = performance.now();
    execFileSync(CDK, ['synth', '--quiet', '--app', 'node --import tsx bench/synth-app.ts', '--context', `benchJobs=${c.jobs}`, '--context', `benchZoned=${c.zoned}`, '--context', 'alertEmail=none', '--context', `databaseInstanceType=${DATABASE_FOR_200_JOBS}`, '--output', outdir], {
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

console.log(`cdk synth (CLI, cdk-nag on), ${RUNS} runs per case, alternating; node ${process.version}`);
const results = new Map<string, Run[]>(CASES.map((c) => [c.label, []]));
// One unmeasured run warms the disk cache and the asset hash cache of the OS, not of the process.
synth(CASES[0]!);
for (let i = 0; i < RUNS; i++) {
  for (const c of CASES) {
    const run = synth(c);
    results.get(c.label)!.push(run);
    console.log(`  run ${i + 1}: ${c.label.padStart(9)} job(s): ${run.seconds.toFixed(2)} s (${run.resources} resources in ${run.templates} templates)`);
  }
}

const medianOf = (label: string) => median(results.get(label)!.map((r) => r.seconds));
const base = medianOf(CASES[0]!.label);
console.log('');
console.log('| jobs | median synth | vs 1 job | resources (all templates) | templates | largest template |');
console.log('| ---: | ---: | ---: | ---: | ---: | ---: |');
for (const c of CASES) {
  const r = results.get(c.label)![0]!;
  console.log(`| ${c.label} | ${medianOf(c.label).toFixed(2)} s | ${(medianOf(c.label) / base).toFixed(2)}x | ${r.resources} | ${r.templates} | ${r.maxResources} resources, ${(r.maxBytes / 1024).toFixed(0)} KiB |`);
}
console.log('');
let met = true;
for (const c of CASES) {
  if (c.target === undefined) continue;
  const ratio = medianOf(c.label) / base;
  met &&= ratio <= c.target;
  console.log(`ratio ${c.label}/1: ${ratio.toFixed(2)}x (target <= ${c.target}x): ${ratio <= c.target ? 'met' : 'MISSED'}`);
}
process.exitCode = met ? 0 : 1;
