/**
 * `npm run bench:jobs`: what the job machinery costs.
 *
 *   1. billing-run over 100,000 accounts (the real process, default JOB_BATCH_SIZE) against
 *      one set-based INSERT ... SELECT that writes the same invoices, on the same database,
 *      in an order that turns every round; the median of the rounds' ratios. Target: at most 1.15x.
 *      Also, every round, billing-run with one batch at a time (JOB_BATCH_CONCURRENCY=1).
 *   2. The runner's overhead on a no-op job: run lock, job lock, run row, heartbeat and EMF
 *      line, outcome, unlock; in process, many runs. Target: at most 50 ms per run.
 *   3. Process start to the first log line (target: at most 2x bare Node printing one line,
 *      measured alternately in the same run) and to "attempt 1 started", with and without
 *      the module compile cache.
 *
 * Uses DATABASE_URL (a server where it may create databases) or a throwaway embedded Postgres.
 * BENCH_ACCOUNTS and BENCH_ROUNDS (5) change the size. BENCH_TRACES=file runs the job processes
 * with tracing on (every job run is kept, so billing-run records a span per batch and per
 * statement), and billing-run once more a round with it off, for tracing's own cost; unset,
 * tracing is off, as it is by default.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { JOBS } from '../lib/jobs.js';
import { loadConfig } from '../app/config.js';
import { createPool } from '../app/db.js';
import { defineJob } from '../app/jobs/handler.js';
import { JobRunner } from '../app/jobs/runner.js';
import { migrate } from '../app/migrate.js';
import { benchPostgres, fmt, median } from './lib.js';
import { SCHEDULED, clearInvoices, invoiceDigest, runMain, runNode, seedAccounts, singleStatement } from './jobs-lib.js';

const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const NOOP_RUNS = 200;
/** billing-run's run against the one statement: the batching and the isolation may cost 15%. */
const BILLING_TARGET = 1.15;
const STARTS = 7;
/** Process start to the first log line, against bare Node: Node itself is the floor. */
const START_TARGET = 2;
/**
 * Run keys for the no-op and start-up rounds: distinct minutes ending an hour before now. A job
 * refuses a scheduled time later than now (plus the clock skew), so fixed dates would expire.
 */
const PAST_BASE = Math.floor(Date.now() / 60_000) * 60_000 - 3_600_000;
const pastMinute = (i: number) => new Date(PAST_BASE - i * 60_000);

const TRACING: Record<string, string> = process.env.BENCH_TRACES
  ? { TRACES: process.env.BENCH_TRACES, TRACES_FILE: path.resolve('.data', `bench-job-traces-${process.pid}.jsonl`) }
  : {};

const out = (line = '') => process.stdout.write(`${line}\n`);

async function main(): Promise<void> {
  const server = await benchPostgres();
  let db: pg.Pool | undefined;
  try {
    const url = await server.createDatabase();
    db = new pg.Pool({ connectionString: url, max: 2 });
    // Stopping Postgres under an idle connection emits 'error'; without a listener that kills the process.
    db.on('error', () => {});
    await migrate(db, pino({ level: 'warn' }));
    out(`jobs benchmark: ${ACCOUNTS.toLocaleString('en-US')} accounts, ${ROUNDS} rounds; Node ${process.version}, ${os.cpus().length} CPU(s) (${os.cpus()[0]?.model ?? 'unknown'})`);
    out(`tracing: ${TRACING.TRACES ? `${TRACING.TRACES} (every job run kept)` : 'off (the default)'}`);
    out(await seedAccounts(db, ACCOUNTS));

    // 1. billing-run against one statement.
    const statementMs: number[] = [];
    const jobMs: number[] = [];
    const statementCpu: number[] = [];
    const jobCpu: number[] = [];
    const jobWallMs: number[] = [];
    // With BENCH_TRACES, billing-run also runs with tracing off in every round, so that tracing's
    // own cost is a ratio of runs seconds apart rather than of two benchmark runs.
    const untracedMs: number[] = [];
    const untracedCpu: number[] = [];
    // billing-run with one batch at a time: what running two side by side buys.
    const serialMs: number[] = [];
    const serialCpu: number[] = [];
    let expected = '';
    const runStatement = async () => {
      await clearInvoices(db!);
      const cpu0 = server.cpuMs();
      statementMs.push(await singleStatement(db!));
      if (cpu0 !== undefined) statementCpu.push(server.cpuMs()! - cpu0);
      const digest = await invoiceDigest(db!);
      if (expected && digest !== expected) throw new Error(`the statement wrote different invoices: ${digest} vs ${expected}`);
      expected = digest;
    };
    const runJob = async (tracing: Record<string, string>, ms: number[], cpu: number[]) => {
      await clearInvoices(db!);
      const cpu0 = server.cpuMs();
      const r = await runMain(['billing-run', '--scheduled-time', SCHEDULED], { DATABASE_URL: url, LOG_LEVEL: 'warn', ...tracing });
      if (cpu0 !== undefined) cpu.push(server.cpuMs()! - cpu0);
      const end = r.lines.find((l) => l.Succeeded === 1);
      if (r.code !== 0 || !end) throw new Error(`billing-run exited ${r.code}`);
      ms.push(end.Duration as number);
      const digest = await invoiceDigest(db!);
      if (expected && digest !== expected) throw new Error(`billing-run wrote different invoices: ${digest}, the statement ${expected}`);
      expected = digest;
      return r.wallMs;
    };
    for (let round = 1; round <= ROUNDS; round++) {
      // The order turns every round, so that whatever one run leaves the next falls on both alike.
      // With tracing on, the traced and the untraced runs of a round swap places too.
      if (round % 2 === 1) await runStatement();
      if (round % 2 === 0) await runJob({ ...TRACING, JOB_BATCH_CONCURRENCY: '1' }, serialMs, serialCpu);
      if (TRACING.TRACES && round % 2 === 0) await runJob({}, untracedMs, untracedCpu);
      jobWallMs.push(await runJob(TRACING, jobMs, jobCpu));
      if (TRACING.TRACES && round % 2 === 1) await runJob({}, untracedMs, untracedCpu);
      if (round % 2 === 1) await runJob({ ...TRACING, JOB_BATCH_CONCURRENCY: '1' }, serialMs, serialCpu);
      if (round % 2 === 0) await runStatement();
      const cpu = jobCpu.length > 0 ? `; Postgres CPU ${fmt(statementCpu.at(-1)!, 0)} and ${fmt(jobCpu.at(-1)!, 0)} ms` : '';
      out(`  round ${round}: statement ${fmt(statementMs.at(-1)!, 0)} ms, billing-run ${fmt(jobMs.at(-1)!, 0)} ms (process ${fmt(jobWallMs.at(-1)!, 0)} ms) = ${fmt(jobMs.at(-1)! / statementMs.at(-1)!, 2)}x${cpu}`);
      out(`           billing-run one batch at a time ${fmt(serialMs.at(-1)!, 0)} ms = ${fmt(serialMs.at(-1)! / statementMs.at(-1)!, 2)}x${serialCpu.length > 0 ? `; Postgres CPU ${fmt(serialCpu.at(-1)!, 0)} ms` : ''}`);
      if (TRACING.TRACES) out(`           billing-run with tracing off ${fmt(untracedMs.at(-1)!, 0)} ms${untracedCpu.length > 0 ? `; Postgres CPU ${fmt(untracedCpu.at(-1)!, 0)} ms` : ''}`);
    }
    // Each round's two runs are seconds apart: the median of the rounds' ratios leaves out the
    // drift between rounds that a ratio of the two medians keeps.
    const billingRatio = median(jobMs.map((ms, i) => ms / statementMs[i]!));
    out(`billing-run, ${expected}`);
    out(`  one INSERT ... SELECT:      ${fmt(median(statementMs), 0)} ms (median)`);
    out(`  billing-run (its run):      ${fmt(median(jobMs), 0)} ms (median); the rounds' ratios' median ${fmt(billingRatio, 2)}x the statement (target <= ${BILLING_TARGET}x) ${billingRatio <= BILLING_TARGET ? 'OK' : 'MISSED'}`);
    out(`                              ratio of the medians ${fmt(median(jobMs) / median(statementMs), 2)}x`);
    out(`  billing-run (whole process): ${fmt(median(jobWallMs), 0)} ms = ${fmt(median(jobWallMs) / median(statementMs), 2)}x, with Node start-up and the pool`);
    if (jobCpu.length > 0) {
      const cpuRatio = median(jobCpu.map((ms, i) => ms / statementCpu[i]!));
      out(`  Postgres CPU time: statement ${fmt(median(statementCpu), 0)} ms, billing-run ${fmt(median(jobCpu), 0)} ms; the rounds' ratios' median ${fmt(cpuRatio, 2)}x (what a loaded machine does not distort)`);
    }
    const serialRatio = median(serialMs.map((ms, i) => ms / statementMs[i]!));
    const serialCpuRatio = serialCpu.length > 0 ? `; Postgres CPU ${fmt(median(serialCpu.map((ms, i) => ms / statementCpu[i]!)), 2)}x` : '';
    out(`  billing-run, one batch at a time (JOB_BATCH_CONCURRENCY=1): ${fmt(median(serialMs), 0)} ms; the rounds' ratios' median ${fmt(serialRatio, 2)}x the statement${serialCpuRatio}`);
    if (untracedMs.length > 0) {
      const perRound = jobMs.map((ms, i) => fmt(ms / untracedMs[i]!, 2)).join(', ');
      const cpu = untracedCpu.length > 0 ? `; Postgres CPU ${fmt(median(jobCpu) / median(untracedCpu), 2)}x` : '';
      out(`  tracing alone: billing-run ${fmt(median(jobMs), 0)} ms with tracing on, ${fmt(median(untracedMs), 0)} ms off = ${fmt(median(jobMs) / median(untracedMs), 2)}x (rounds ${perRound})${cpu}`);
    }

    // 2. The runner around a job that does nothing.
    const config = loadConfig({ DATABASE_URL: url, LOG_LEVEL: 'info', HEARTBEAT_INTERVAL_MS: '15000' });
    const logger = pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: false }));
    const pool = createPool(config.database, { role: 'bench', max: 10, logger, waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: config.JOB_STATEMENT_TIMEOUT_MS });
    const noop = defineJob<never>({ describePeriod: () => 'nothing', run: async () => ({}) });
    const job = JOBS.find((j) => j.name === 'data-cleanup')!;
    const shutdown = new AbortController();
    const runOnce = async (i: number) => {
      const t = performance.now();
      const outcome = await new JobRunner({
        job,
        handler: noop,
        pool,
        config,
        logger,
        scheduledTime: pastMinute(1_000 + i),
        force: false,
        shutdownSignal: shutdown.signal,
      }).run();
      if (outcome.kind !== 'succeeded') throw new Error(`no-op run ${i}: ${outcome.kind}`);
      return performance.now() - t;
    };
    for (let i = 0; i < 20; i++) await runOnce(-1 - i); // warm-up
    const perRun: number[] = [];
    for (let i = 0; i < NOOP_RUNS; i++) perRun.push(await runOnce(i));
    await pool.end();
    const sorted = [...perRun].sort((a, b) => a - b);
    const p95 = sorted[Math.floor(sorted.length * 0.95)]!;
    out(`runner overhead on a no-op job (${NOOP_RUNS} runs: 2 advisory locks, run row, EMF heartbeat, outcome):`);
    out(`  ${fmt(median(perRun), 2)} ms median, ${fmt(p95, 2)} ms p95 per run (target <= 50 ms) ${p95 <= 50 ? 'OK' : 'MISSED'}`);

    // 3. Process start to the first log line and to the job's start, against bare Node printing
    //    one line, alternating; with the module compile cache as the entry enables it (warm:
    //    the runs before wrote it), and without it, as in the image (docs/performance.md).
    const BARE = ['-e', "process.stdout.write(JSON.stringify({ time: new Date().toISOString() }) + '\\n')"];
    const bare: number[] = [];
    const starts = { cached: { toStart: [] as number[], toFirstLine: [] as number[] }, uncached: { toStart: [] as number[], toFirstLine: [] as number[] } };
    await runMain(['data-cleanup', '--scheduled-time', pastMinute(STARTS * 2).toISOString()], { DATABASE_URL: url, LOG_LEVEL: 'info' }); // writes the cache
    for (let i = 0; i < STARTS * 2; i++) {
      const b = await runNode(BARE, {});
      bare.push(Date.parse(b.lines[0]!.time as string) - b.spawnedAt);
      const variant = i % 2 === 0 ? starts.cached : starts.uncached;
      const env: Record<string, string> = { DATABASE_URL: url, LOG_LEVEL: 'info', ...TRACING, ...(i % 2 === 0 ? {} : { NODE_DISABLE_COMPILE_CACHE: '1' }) };
      const r = await runMain(['data-cleanup', '--scheduled-time', pastMinute(i).toISOString()], env);
      const started = r.lines.find((l) => typeof l.msg === 'string' && l.msg.includes('attempt 1 started'));
      if (r.code !== 0 || !started) throw new Error(`data-cleanup exited ${r.code}:\n${r.lines.map((l) => l.msg).join('\n')}`);
      variant.toStart.push(Date.parse(started.time as string) - r.spawnedAt);
      variant.toFirstLine.push(Date.parse(r.lines[0]!.time as string) - r.spawnedAt);
    }
    const bareMs = median(bare);
    out(`process start (${STARTS} runs of data-cleanup each way, ${STARTS * 2} of bare node -e printing one line: ${fmt(bareMs, 0)} ms median):`);
    for (const [name, v] of Object.entries(starts)) {
      const ratio = median(v.toFirstLine) / bareMs;
      out(
        `  compile cache ${name === 'cached' ? 'on ' : 'off'}: first log line ${fmt(median(v.toFirstLine), 0)} ms = ${fmt(ratio, 2)}x bare node (target <= ${START_TARGET}x) ${ratio <= START_TARGET ? 'OK' : 'MISSED'}; "attempt 1 started" ${fmt(median(v.toStart), 0)} ms`,
      );
    }
  } finally {
    await db?.end();
    await server.stop();
    if (TRACING.TRACES_FILE) fs.rmSync(TRACING.TRACES_FILE, { force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
