/**
 * `npm run bench:jobs-growth`: how billing-run and data-cleanup grow with the accounts, on one
 * database seeded first with 100,000 accounts, then up to 1,000,000 (BENCH_SIZES changes the
 * sizes, BENCH_ROUNDS the rounds). Targets: billing-run at most 11x the time for 10x the
 * accounts, its work being linear; data-cleanup at most 1.5x, whatever the growth, as it
 * retires the day's partition whole. The one-statement baseline of bench:jobs is measured at each size too, so
 * the database's own growth (caches, index depth) can be told from the job's.
 *
 * At each size: billing-run and the statement alternately (each from no invoices of the day),
 * then report-aggregation rolls the day up once, then data-cleanup retires the billed, rolled-up
 * day, its partition dropped whole (one run per size: it drops what it measures on).
 */
import os from 'node:os';
import pg from 'pg';
import pino from 'pino';
import { migrate } from '../app/migrate.js';
import { benchPostgres, fmt, median } from './lib.js';
import { DAY, SCHEDULED, clearInvoices, invoiceDigest, runMain, seedAccounts, singleStatement } from './jobs-lib.js';

const SIZES = (process.env.BENCH_SIZES ?? '100000,1000000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
/** billing-run's work is linear in the accounts: at most 11x the time for 10x. */
const TARGET = 11;
/** data-cleanup retires a day whole (a catalog change): at most 1.5x its time, whatever the growth. */
const CLEANUP_TARGET = 1.5;
/** data-cleanup's run key: now, so the seeded day is older than USAGE_RETENTION_DAYS. */
const CLEANUP_AT = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 3_600_000).toISOString();

const out = (line = '') => process.stdout.write(`${line}\n`);

interface SizeResult {
  accounts: number;
  statementMs: number;
  billingMs: number;
  cleanupMs: number;
  /** What data-cleanup's run dropped: the day's partition, and its month's keys on a month's last day. */
  freedMb: number;
}

/** The size of every partition of usage and usage_keys, in MB. */
async function partitionsMb(db: pg.Pool): Promise<number> {
  const { rows } = await db.query<{ mb: number }>(
    `SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::float8 / 1048576 AS mb FROM pg_inherits WHERE inhparent IN ('usage'::regclass, 'usage_keys'::regclass)`,
  );
  return rows[0]!.mb;
}

async function measure(db: pg.Pool, url: string, accounts: number): Promise<SizeResult> {
  out(`${accounts.toLocaleString('en-US')} accounts: ${await seedAccounts(db, accounts)}`);
  const env = { DATABASE_URL: url, LOG_LEVEL: 'warn' };
  const statementMs: number[] = [];
  const billingMs: number[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    await clearInvoices(db);
    statementMs.push(await singleStatement(db));
    const expected = await invoiceDigest(db);
    await clearInvoices(db);
    const r = await runMain(['billing-run', '--scheduled-time', SCHEDULED], env);
    const end = r.lines.find((l) => l.Succeeded === 1);
    if (r.code !== 0 || !end) throw new Error(`billing-run exited ${r.code}`);
    const digest = await invoiceDigest(db);
    if (digest !== expected) throw new Error(`billing-run wrote different invoices: ${digest}, the statement ${expected}`);
    billingMs.push(end.Duration as number);
    out(`  round ${round}: statement ${fmt(statementMs.at(-1)!, 0)} ms, billing-run ${fmt(billingMs.at(-1)!, 0)} ms`);
  }
  const rollup = await runMain(['report-aggregation', '--scheduled-time', SCHEDULED], env);
  if (rollup.code !== 0) throw new Error(`report-aggregation exited ${rollup.code}`);
  await db.query('VACUUM ANALYZE');
  const before = await partitionsMb(db);
  const cleanup = await runMain(['data-cleanup', '--scheduled-time', CLEANUP_AT], { ...env, USAGE_RETENTION_DAYS: '1' });
  const end = cleanup.lines.find((l) => l.Succeeded === 1);
  if (cleanup.code !== 0 || !end) throw new Error(`data-cleanup exited ${cleanup.code}`);
  const freedMb = before - (await partitionsMb(db));
  const { rows } = await db.query<{ n: string }>(`SELECT count(*)::text AS n FROM usage`);
  const retired = (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM usage_days WHERE day = $1 AND retired_at IS NOT NULL`, [DAY])).rows[0]!.n;
  if (retired !== 1) throw new Error(`data-cleanup did not retire ${DAY}`);
  out(`  data-cleanup ${fmt(end.Duration as number, 0)} ms: ${DAY} retired, ${fmt(freedMb, 0)} MB of partitions dropped (usage rows left: ${rows[0]!.n})`);
  // The next size seeds only the missing rows, the retired day's included: its partition is
  // made again, and its keys (kept until their month is retired) are forgotten.
  await db.query(`DELETE FROM job_runs`);
  await db.query(`DELETE FROM usage_keys WHERE occurred_at >= $1::date AND occurred_at < $1::date + 1`, [DAY]);
  await db.query(`SELECT usage_ensure_partitions($1::date, $1::date)`, [DAY]);
  return { accounts, statementMs: median(statementMs), billingMs: median(billingMs), cleanupMs: end.Duration as number, freedMb };
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
    out(`jobs growth benchmark: ${SIZES.map((n) => n.toLocaleString('en-US')).join(' then ')} accounts, ${ROUNDS} round(s); Node ${process.version}, ${os.cpus().length} CPU(s), load average ${os.loadavg().map((l) => fmt(l)).join(' ')}`);
    const results: SizeResult[] = [];
    for (const accounts of SIZES) results.push(await measure(db, url, accounts));
    const [first, ...rest] = results;
    for (const r of rest) {
      const scale = r.accounts / first!.accounts;
      const line = (what: string, a: number, b: number, target: number | undefined) =>
        out(`  ${what.padEnd(22)} ${fmt(a, 0)} -> ${fmt(b, 0)} ms = ${fmt(b / a, 2)}x${target === undefined ? '' : ` (target <= ${fmt(target, 1)}x) ${b / a <= target ? 'OK' : 'MISSED'}`}`);
      out(`${first!.accounts.toLocaleString('en-US')} -> ${r.accounts.toLocaleString('en-US')} accounts (${scale}x):`);
      const target = (TARGET / 10) * scale;
      line('one INSERT ... SELECT', first!.statementMs, r.statementMs, undefined);
      line('billing-run', first!.billingMs, r.billingMs, target);
      line('data-cleanup', first!.cleanupMs, r.cleanupMs, CLEANUP_TARGET);
      out(`  ${''.padEnd(22)} dropping ${fmt(first!.freedMb, 0)} -> ${fmt(r.freedMb, 0)} MB of partitions`);
    }
    out(`load average at the end: ${os.loadavg().map((l) => fmt(l)).join(' ')}`);
  } finally {
    await db?.end();
    await server.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
