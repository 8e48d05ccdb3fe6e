/**
 * `npm run bench:jobs`: what the job machinery costs.
 *
 *   1. billing-run over 100,000 accounts (the real process, default JOB_BATCH_SIZE) against
 *      one set-based INSERT ... SELECT that writes the same invoices, on the same database,
 *      alternating, median of the rounds. Target: at most 1.15x the statement.
 *   2. The runner's overhead on a no-op job: run lock, job lock, run row, heartbeat and EMF
 *      line, outcome, unlock; in process, many runs. Target: at most 50 ms per run.
 *   3. Process start to the moment the job starts (spawn to "attempt 1 started").
 *
 * Uses DATABASE_URL (a server where it may create databases) or a throwaway embedded Postgres.
 * BENCH_ACCOUNTS and BENCH_ROUNDS change the size.
 */
import { spawn } from 'node:child_process';
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
import { seedDemoData } from '../app/seed.js';
import { benchPostgres, fmt, median } from './lib.js';

const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const NOOP_RUNS = 200;
/** billing-run's run against the one statement: the batching and the isolation may cost 15%. */
const BILLING_TARGET = 1.15;
const STARTS = 7;
const SEED_NOW = new Date('2025-03-10T12:00:00Z');
const SCHEDULED = '2025-03-10T00:15:00.000Z';
const DAY = '2025-03-09';
const MAIN = path.resolve('dist/app/main.js');
/**
 * Run keys for the no-op and start-up rounds: distinct minutes ending an hour before now. A job
 * refuses a scheduled time later than now (plus the clock skew), so fixed dates would expire.
 */
const PAST_BASE = Math.floor(Date.now() / 60_000) * 60_000 - 3_600_000;
const pastMinute = (i: number) => new Date(PAST_BASE - i * 60_000);

const out = (line = '') => process.stdout.write(`${line}\n`);

/** The invoices of the day, summarised so two runs can be compared. */
async function invoiceDigest(db: pg.Pool): Promise<string> {
  const { rows } = await db.query<{ n: string; q: string; amount: string; digest: string }>(
    `SELECT count(*)::text AS n, sum(quantity)::text AS q, sum(amount_cents)::text AS amount,
            md5(string_agg(account_id || ':' || quantity || ':' || amount_cents || ':' || period_end, ',' ORDER BY account_id)) AS digest
     FROM invoices WHERE period_start = $1`,
    [DAY],
  );
  const r = rows[0]!;
  return `${r.n} invoices, quantity ${r.q}, ${r.amount} cents, md5 ${r.digest}`;
}

async function clearInvoices(db: pg.Pool): Promise<void> {
  await db.query(`DELETE FROM invoices WHERE period_start = $1`, [DAY]);
  await db.query(`DELETE FROM job_runs`);
  await db.query(`VACUUM ANALYZE invoices`);
}

/** The baseline: every invoice of the day in one statement. */
async function singleStatement(db: pg.Pool): Promise<number> {
  const t0 = performance.now();
  await db.query(
    `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents)
     SELECT a.id, $1::date, $2::date, coalesce(u.quantity, 0), coalesce(u.quantity, 0) * a.unit_price_cents
     FROM accounts a
     LEFT JOIN (SELECT account_id, sum(quantity)::bigint AS quantity FROM usage
                WHERE occurred_at >= $1::date::timestamp AT TIME ZONE 'UTC' AND occurred_at < $2::date::timestamp AT TIME ZONE 'UTC'
                GROUP BY account_id) u ON u.account_id = a.id
     WHERE a.status = 'active' AND a.created_at < $2::date::timestamp AT TIME ZONE 'UTC'
     ON CONFLICT (account_id, period_start) DO NOTHING`,
    [DAY, '2025-03-10'],
  );
  return performance.now() - t0;
}

interface ProcessRun {
  code: number;
  wallMs: number;
  lines: Record<string, unknown>[];
  spawnedAt: number;
}

function runMain(args: string[], env: Record<string, string>): Promise<ProcessRun> {
  return new Promise((resolve) => {
    const spawnedAt = Date.now();
    const t0 = performance.now();
    const child = spawn(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (text += c));
    child.once('exit', (code) => {
      const lines = text
        .split('\n')
        .filter(Boolean)
        .map((l) => {
          try {
            return JSON.parse(l) as Record<string, unknown>;
          } catch {
            return {};
          }
        });
      resolve({ code: code ?? 1, wallMs: performance.now() - t0, lines, spawnedAt });
    });
  });
}

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
    let t0 = performance.now();
    const client = await db.connect();
    try {
      await seedDemoData(client, { accounts: ACCOUNTS, days: 1, now: SEED_NOW });
    } finally {
      client.release();
    }
    await db.query('VACUUM ANALYZE');
    const { rows: sizes } = await db.query<{ active: string; usage: string }>(
      `SELECT (SELECT count(*) FROM accounts WHERE status = 'active')::text AS active,
              (SELECT count(*) FROM usage WHERE occurred_at >= $1::date AND occurred_at < $1::date + 1)::text AS usage`,
      [DAY],
    );
    out(`seeded in ${fmt((performance.now() - t0) / 1_000)} s: ${sizes[0]!.active} active accounts, ${sizes[0]!.usage} usage rows on ${DAY}`);

    // 1. billing-run against one statement.
    const env = { DATABASE_URL: url, LOG_LEVEL: 'warn' };
    const statementMs: number[] = [];
    const jobMs: number[] = [];
    const jobWallMs: number[] = [];
    let expected = '';
    for (let round = 1; round <= ROUNDS; round++) {
      await clearInvoices(db);
      statementMs.push(await singleStatement(db));
      const digest = await invoiceDigest(db);
      if (expected && digest !== expected) throw new Error(`the statement wrote different invoices: ${digest} vs ${expected}`);
      expected = digest;

      await clearInvoices(db);
      const r = await runMain(['billing-run', '--scheduled-time', SCHEDULED], env);
      const end = r.lines.find((l) => l.Succeeded === 1);
      if (r.code !== 0 || !end) throw new Error(`billing-run exited ${r.code}`);
      jobMs.push(end.Duration as number);
      jobWallMs.push(r.wallMs);
      const jobDigest = await invoiceDigest(db);
      if (jobDigest !== expected) throw new Error(`billing-run wrote different invoices: ${jobDigest}, the statement ${expected}`);
      out(`  round ${round}: statement ${fmt(statementMs.at(-1)!, 0)} ms, billing-run ${fmt(jobMs.at(-1)!, 0)} ms (process ${fmt(r.wallMs, 0)} ms)`);
    }
    const billingRatio = median(jobMs) / median(statementMs);
    out(`billing-run, ${expected}`);
    out(`  one INSERT ... SELECT:      ${fmt(median(statementMs), 0)} ms (median)`);
    out(`  billing-run (its run):      ${fmt(median(jobMs), 0)} ms = ${fmt(billingRatio, 2)}x the statement (target <= ${BILLING_TARGET}x) ${billingRatio <= BILLING_TARGET ? 'OK' : 'MISSED'}`);
    out(`  billing-run (whole process): ${fmt(median(jobWallMs), 0)} ms = ${fmt(median(jobWallMs) / median(statementMs), 2)}x, with Node start-up and the pool`);

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

    // 3. Process start to the moment the job starts.
    const toStart: number[] = [];
    const toFirstLine: number[] = [];
    for (let i = 0; i < STARTS; i++) {
      const r = await runMain(['data-cleanup', '--scheduled-time', pastMinute(i).toISOString()], { DATABASE_URL: url, LOG_LEVEL: 'info' });
      const started = r.lines.find((l) => typeof l.msg === 'string' && l.msg.includes('attempt 1 started'));
      if (r.code !== 0 || !started) throw new Error(`data-cleanup exited ${r.code}:\n${r.lines.map((l) => l.msg).join('\n')}`);
      toStart.push(Date.parse(started.time as string) - r.spawnedAt);
      toFirstLine.push(Date.parse(r.lines[0]!.time as string) - r.spawnedAt);
    }
    out(`process start to job start (${STARTS} runs of data-cleanup):`);
    out(`  ${fmt(median(toStart), 0)} ms median to "attempt 1 started" (of which ${fmt(median(toFirstLine), 0)} ms to the first log line: Node, modules, config)`);
  } finally {
    await db?.end();
    await server.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
