/**
 * `npm run seed -- --accounts N [--days D]`: migrates, then creates N demo accounts and
 * their usage for today and the D days before. Idempotent: accounts are keyed by their
 * email (demo-000001@example.com, ...) and usage by its idempotency key, so a second seed
 * adds only what is missing, and a larger N adds the extra accounts.
 *
 * The data exercises every rule of the jobs: 1 account in 25 is suspended and 1 in 40
 * closed (neither is billed), 1 in 7 has no usage at all (a zero-amount invoice), and the
 * accounts exist since before the first seeded day, so every seeded day is billable.
 */
import type pg from 'pg';
import { DAY_MS } from '../lib/time-zones.js';
import type { Config } from './config.js';
import { createPool } from './db.js';
import { UsageError } from './errors.js';
import { createLogger, flushLogs } from './logger.js';
import { migrate } from './migrate.js';

export interface SeedOptions {
  readonly accounts: number;
  /** Days of usage before today (today's usage is seeded too). */
  readonly days: number;
  /** "Today"; the default is now. */
  readonly now?: Date;
  /** Accounts per statement. */
  readonly batch?: number;
  readonly onProgress?: (accountsDone: number) => void;
}

export const DEMO_EMAIL_LIKE = 'demo-%@example.com';

/** Creates the missing demo accounts and usage; returns what it inserted. */
export async function seedDemoData(db: Pick<pg.ClientBase, 'query'>, options: SeedOptions): Promise<{ accounts: number; usage: number }> {
  const { accounts, days } = options;
  const batch = options.batch ?? 10_000;
  const now = options.now ?? new Date();
  const today = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  const firstDay = new Date(today.getTime() - days * DAY_MS);
  let insertedAccounts = 0;
  let insertedUsage = 0;
  for (let from = 1; from <= accounts; from += batch) {
    const to = Math.min(accounts, from + batch - 1);
    // lpad to at least 6 digits: lpad cuts a longer string, so account 1,000,000 would get 100,000's email.
    const a = await db.query(
      `INSERT INTO accounts (name, email, plan, status, unit_price_cents, created_at)
       SELECT format('Demo account %s', i), format('demo-%s@example.com', lpad(i::text, greatest(6, length(i::text)), '0')),
              (ARRAY['free', 'standard', 'enterprise'])[1 + i % 3],
              CASE WHEN i % 25 = 0 THEN 'suspended' WHEN i % 40 = 0 THEN 'closed' ELSE 'active' END,
              1 + i % 5, $3::timestamptz - interval '1 day'
       FROM generate_series($1::int, $2::int) AS i
       ON CONFLICT ((lower(email))) DO NOTHING`,
      [from, to, firstDay.toISOString()],
    );
    const u = await db.query(
      `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
       SELECT a.id, m.metric, (i * 7 + d * 3 + m.k) % 50 + 1,
              $3::timestamptz + make_interval(days => d, secs => (i * 37 + m.k * 600) % 86400),
              format('seed-%s-%s', to_char($3::timestamptz + make_interval(days => d), 'YYYY-MM-DD'), m.k)
       FROM generate_series($1::int, $2::int) AS i
       JOIN accounts a ON lower(a.email) = format('demo-%s@example.com', lpad(i::text, greatest(6, length(i::text)), '0'))
       CROSS JOIN generate_series(0, $4::int) AS d
       CROSS JOIN (VALUES (1, 'api.calls'), (2, 'storage.gb')) AS m (k, metric)
       WHERE i % 7 <> 0
         AND $3::timestamptz + make_interval(days => d, secs => (i * 37 + m.k * 600) % 86400) <= $5::timestamptz
       -- In time order, as reported usage lands: the table's pages then follow the time, as in
       -- production, where data-cleanup and the daily sums read a day's rows together.
       ORDER BY 4
       ON CONFLICT DO NOTHING`,
      [from, to, firstDay.toISOString(), days, now.toISOString()],
    );
    insertedAccounts += a.rowCount ?? 0;
    insertedUsage += u.rowCount ?? 0;
    options.onProgress?.(to);
  }
  return { accounts: insertedAccounts, usage: insertedUsage };
}

export function parseSeedArgs(args: readonly string[]): { accounts: number; days: number } {
  const out = { accounts: 1_000, days: 7 };
  for (let i = 0; i < args.length; i++) {
    const flag = args[i]!;
    if (flag !== '--accounts' && flag !== '--days') throw new UsageError(`Unknown argument "${flag}" for seed. Usage: seed [--accounts N] [--days D]`);
    const value = Number(args[++i]);
    const max = flag === '--accounts' ? 999_999 : 366;
    if (!Number.isInteger(value) || value < (flag === '--accounts' ? 1 : 0) || value > max) {
      throw new UsageError(`${flag} needs a whole number up to ${max}, got ${JSON.stringify(args[i] ?? '')}`);
    }
    out[flag === '--accounts' ? 'accounts' : 'days'] = value;
  }
  return out;
}

export async function runSeedCommand(args: readonly string[], config: Config): Promise<void> {
  const options = parseSeedArgs(args);
  const logger = createLogger(config.LOG_LEVEL, { mode: 'seed' });
  const pool = createPool(config.database, { role: 'seed', max: 1, logger, waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: config.JOB_STATEMENT_TIMEOUT_MS });
  try {
    await migrate(pool, logger, { lockTimeoutMs: config.MIGRATION_LOCK_TIMEOUT_MS });
    const t0 = Date.now();
    const result = await seedDemoData(pool, {
      ...options,
      onProgress: (done) => logger.info({ done, of: options.accounts }, `seeded ${done} of ${options.accounts} demo accounts`),
    });
    logger.info(
      { ...options, inserted: result, ms: Date.now() - t0 },
      `seed done in ${Date.now() - t0} ms: ${result.accounts} new account(s), ${result.usage} new usage row(s) (${options.accounts} demo accounts, ${options.days} day(s) of usage before today)`,
    );
  } finally {
    await pool.end();
    flushLogs();
  }
}
