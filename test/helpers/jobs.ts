/** Shared set-up of the job tests: seeded data, the job environment, and the checks every run ends with. */
import { expect } from 'vitest';
import { seedDemoData } from '../../app/seed.js';
import { eventually, type TestDatabase } from './db.js';

/** What these helpers need of a database: the run's per-test one, or a test's own cluster (own-postgres.ts). */
export type Database = Pick<TestDatabase, 'url' | 'withClient' | 'query'> & Partial<Pick<TestDatabase, 'loginUrl'>>;
import { run, start, type LogLine, type Proc } from './process.js';

/** The seed's "today": usage on 2025-03-08, -09 and -10, accounts since 2025-03-07. */
export const SEED_NOW = new Date('2025-03-10T12:00:00Z');
/** billing-run and report-aggregation at this time work on 2025-03-09. */
export const NIGHTLY_TIME = '2025-03-10T00:15:00.000Z';
export const NIGHTLY_DAY = '2025-03-09';

/**
 * Short heartbeats and shutdown deadlines, fast retries; NODE_ENV=test allows JOB_FAULT_INJECTION.
 * A job connects as the login role, as in AWS, where the database has one.
 */
export function jobEnv(db: Database, extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    DATABASE_URL: db.loginUrl ?? db.url,
    NODE_ENV: 'test',
    HEARTBEAT_INTERVAL_MS: '100',
    SHUTDOWN_TIMEOUT_MS: '3000',
    JOB_RETRY_BACKOFF_MS: '50',
    ...extra,
  };
}

export async function seed(db: Database, accounts: number, days = 2): Promise<void> {
  await db.withClient((c) => seedDemoData(c, { accounts, days, now: SEED_NOW }));
}

export function runJob(db: Database, args: string[], env: Record<string, string | undefined> = {}) {
  return run(args, jobEnv(db, env));
}

export function startJob(db: Database, args: string[], env: Record<string, string | undefined> = {}): Proc {
  return start(args, jobEnv(db, env));
}

/** No advisory lock and no connection of ours is left on the database. */
export async function expectNothingLeft(db: TestDatabase): Promise<void> {
  const clean = await eventually(async () => (await db.advisoryLocks()) === 0 && (await db.ourConnections()) === 0, 5_000);
  expect({ advisoryLocks: await db.advisoryLocks(), ourConnections: await db.ourConnections() }).toEqual({ advisoryLocks: 0, ourConnections: 0 });
  expect(clean).toBe(true);
}

export interface InvoiceCounts {
  readonly invoices: number;
  readonly accountsInvoiced: number;
  readonly activeAccounts: number;
}

export async function invoiceCounts(db: Database, day = NIGHTLY_DAY): Promise<InvoiceCounts> {
  const [row] = await db.query<{ invoices: number; accounts_invoiced: number; active: number }>(
    `SELECT (SELECT count(*)::int FROM invoices WHERE period_start = $1) AS invoices,
            (SELECT count(DISTINCT account_id)::int FROM invoices WHERE period_start = $1) AS accounts_invoiced,
            (SELECT count(*)::int FROM accounts WHERE status = 'active') AS active`,
    [day],
  );
  return { invoices: row!.invoices, accountsInvoiced: row!.accounts_invoiced, activeAccounts: row!.active };
}

export async function expectOneInvoicePerActiveAccount(db: Database, day = NIGHTLY_DAY): Promise<void> {
  const c = await invoiceCounts(db, day);
  expect(c.activeAccounts).toBeGreaterThan(0);
  expect(c).toEqual({ invoices: c.activeAccounts, accountsInvoiced: c.activeAccounts, activeAccounts: c.activeAccounts });
}

export interface RunRow {
  id: string;
  job: string;
  scheduled_time: Date;
  status: string;
  attempt: number;
  processed: string;
  total: string | null;
  checkpoint: Record<string, unknown> | null;
  error: string | null;
  ran_on: string;
  started_at: Date;
  finished_at: Date | null;
  /** The backend pid of the session that held the run lock. */
  lock_pid: number | null;
}

/** Every attempt, oldest first (by the bigint id: `ORDER BY id` would sort the text column, "10" before "9"). */
export function jobRuns(db: Database, job?: string): Promise<RunRow[]> {
  return db.query<RunRow>(
    `SELECT id::text, job, scheduled_time, status, attempt, processed::text, total::text, checkpoint, error, ran_on, started_at, finished_at, lock_pid
     FROM job_runs WHERE $1::text IS NULL OR job = $1 ORDER BY job_runs.id`,
    [job ?? null],
  );
}

/** The EMF documents among the log lines. */
export function emfLines(logs: readonly LogLine[]): LogLine[] {
  return logs.filter((l) => typeof l._aws === 'object' && l._aws !== null);
}

export const msgs = (logs: readonly LogLine[]) => logs.map((l) => l.msg);

/** The log line (not the EMF line) that tells how the run ended. */
export function outcomeLine(logs: readonly LogLine[]): LogLine | undefined {
  return logs.find((l) => typeof l.outcome === 'string' && !('_aws' in l));
}

/** The summary a succeeded run logs. */
export function summaryOf<T = Record<string, unknown>>(logs: readonly LogLine[]): T {
  const line = logs.find((l) => l.outcome === 'succeeded' && !('_aws' in l));
  if (!line) throw new Error(`no succeeded line in ${JSON.stringify(logs.map((l) => l.msg))}`);
  return line.summary as T;
}
