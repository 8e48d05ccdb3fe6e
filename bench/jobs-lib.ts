/**
 * What bench:jobs and bench:jobs-growth share: the seeded day, the set-based baseline that
 * writes the same invoices as billing-run, and a job run as the real process.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import type pg from 'pg';
import { seedDemoData } from '../app/seed.js';
import { utcDay as dayFrom } from '../app/usage-partitions.js';
import { fmt } from './lib.js';

const utcDay = (offset: number) => dayFrom(new Date(), offset);
/**
 * The seed's "now", two UTC days ago at noon: the billed day, the day before, is then one of
 * the days the migrations make a partition for (app/usage-partitions.ts), as yesterday's
 * usage is in production, and old enough for data-cleanup to retire with USAGE_RETENTION_DAYS=1.
 */
export const SEED_NOW = new Date(`${utcDay(-2)}T12:00:00Z`);
/** billing-run's run key: it bills DAY. */
export const SCHEDULED = `${utcDay(-2)}T00:15:00.000Z`;
export const DAY = utcDay(-3);
const NEXT_DAY = utcDay(-2);
const MAIN = path.resolve('dist/app/main.js');

/** Seeds up to `accounts` demo accounts (adding to those already there) and says what the billed day holds. */
export async function seedAccounts(db: pg.Pool, accounts: number): Promise<string> {
  const t0 = performance.now();
  const client = await db.connect();
  try {
    // 100,000 accounts a statement: the usage of each statement lands in time order (app/seed.ts).
    await seedDemoData(client, { accounts, days: 1, now: SEED_NOW, batch: 100_000 });
  } finally {
    client.release();
  }
  await db.query('VACUUM ANALYZE');
  const { rows } = await db.query<{ active: string; usage: string }>(
    `SELECT (SELECT count(*) FROM accounts WHERE status = 'active')::text AS active,
            (SELECT count(*) FROM usage WHERE occurred_at >= $1::date AND occurred_at < $1::date + 1)::text AS usage`,
    [DAY],
  );
  return `seeded in ${fmt((performance.now() - t0) / 1_000)} s: ${rows[0]!.active} active accounts, ${rows[0]!.usage} usage rows on ${DAY}`;
}

/** The invoices of the day, summarised so two runs can be compared. */
export async function invoiceDigest(db: pg.Pool): Promise<string> {
  const { rows } = await db.query<{ n: string; q: string; amount: string; digest: string }>(
    `SELECT count(*)::text AS n, sum(quantity)::text AS q, sum(amount_cents)::text AS amount,
            md5(string_agg(account_id || ':' || quantity || ':' || amount_cents || ':' || period_end, ',' ORDER BY account_id)) AS digest
     FROM invoices WHERE period_start = $1`,
    [DAY],
  );
  const r = rows[0]!;
  return `${r.n} invoices, quantity ${r.q}, ${r.amount} cents, md5 ${r.digest}`;
}

/**
 * Clears the day's invoices, then checkpoints: after a checkpoint, the first change to each
 * page writes the whole page to the WAL, so a run that follows a checkpoint (every 5 minutes,
 * or every max_wal_size of WAL) does more work than one that does not. Each run then starts
 * right after one, and the statement and billing-run pay for the same pages.
 */
export async function clearInvoices(db: pg.Pool): Promise<void> {
  await db.query(`DELETE FROM invoices WHERE period_start = $1`, [DAY]);
  await db.query(`DELETE FROM job_runs`);
  await db.query(`VACUUM ANALYZE invoices`);
  await db.query('CHECKPOINT');
}

/** The baseline: every invoice of the day in one statement. */
export async function singleStatement(db: pg.Pool): Promise<number> {
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
    [DAY, NEXT_DAY],
  );
  return performance.now() - t0;
}

export interface ProcessRun {
  code: number;
  wallMs: number;
  lines: Record<string, unknown>[];
  spawnedAt: number;
}

export function runMain(args: string[], env: Record<string, string>): Promise<ProcessRun> {
  return runNode([MAIN, ...args], env);
}

/** `node <argv>` with a bare environment plus `env`; its stdout read as JSON lines. */
export function runNode(argv: string[], env: Record<string, string>): Promise<ProcessRun> {
  return new Promise((resolve) => {
    const spawnedAt = Date.now();
    const t0 = performance.now();
    const child = spawn(process.execPath, argv, { env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
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

