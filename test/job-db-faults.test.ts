/**
 * billing-run through database faults that a moment cures, each made for real against a real
 * Postgres and a real job process: every connection slot taken while the run starts and runs
 * (SQLSTATE 53300), the database read-only for 5 s mid-run (25006), and the job's backends
 * terminated 5 times in a row, and Postgres crashing (an immediate shutdown, which loses the WAL
 * not yet on disk) mid-run and just after a run succeeded. Each ends in exit 0, one invoice per
 * active account, no alert: such trouble draws on the time-bounded reconnect budget, never on
 * the job's `retries` (2).
 */
import { applicationName } from '../app/db.js';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_TIME, expectOneInvoicePerActiveAccount, jobEnv, seed, type Database } from './helpers/jobs.js';
import { startOwnPostgres, type OwnPostgres } from './helpers/own-postgres.js';
import { start, type Proc } from './helpers/process.js';
import { RECONNECT_TRIES, reconnectBudgetMs } from '../app/jobs/reconnect.js';

// Small batches stretch the run over seconds, so that each fault lands mid-run.
const SLOW = { SCHEDULED_TIME: NIGHTLY_TIME, JOB_BATCH_SIZE: '5', JOB_RECONNECT_BACKOFF_MS: '100' };

const started = (job: Proc) => job.logs.filter((l) => / attempt \d+ started /.test(l.msg)).length;

/** The progress the heartbeats report, in order. */
const progressOf = (job: Proc) => job.logs.filter((l) => typeof l.Processed === 'number').map((l) => l.Processed as number);

/** Waits until attempt `k` has started and done a batch (its heartbeat reports more than it began with). */
async function atWork(job: Proc, k: number): Promise<boolean> {
  return eventually(async () => {
    const startedAt = job.logs.findIndex((l, i) => / attempt \d+ started /.test(l.msg) && job.logs.slice(0, i + 1).filter((m) => / attempt \d+ started /.test(m.msg)).length === k);
    if (startedAt < 0) return false;
    const beats = job.logs.slice(startedAt).filter((l) => typeof l.Processed === 'number').map((l) => l.Processed as number);
    return beats.length > 1 && beats.at(-1)! > beats[0]!;
  }, 30_000, 20);
}

/** Terminates every backend of the job's pool. */
async function terminateJobBackends(db: Database): Promise<void> {
  await db.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = '${applicationName('job:billing-run')}'`);
}

/** Turns the database read-only as a writer turned standby does (every session's next transaction), runs `during`, then turns it back. */
async function readOnly(db: OwnPostgres, during: () => Promise<void>): Promise<void> {
  await db.withClient(async (c) => {
    await c.query(`SET default_transaction_read_only = off`);
    await c.query(`ALTER SYSTEM SET default_transaction_read_only = on`);
    await c.query(`SELECT pg_reload_conf()`);
    try {
      await during();
    } finally {
      await c.query(`ALTER SYSTEM RESET default_transaction_read_only`);
      await c.query(`SELECT pg_reload_conf()`);
    }
  });
}

/** The run's end as a user checks it: exit 0, one invoice per active account, no alert, no row left `running`. */
async function expectCleanEnd(db: Database, job: Proc): Promise<void> {
  const { code } = await job.exited;
  expect(code, job.stdout().slice(-3_000)).toBe(0);
  expect(job.logs.some((l) => /^ALERT/i.test(l.msg) || l.alert !== undefined)).toBe(false);
  await expectOneInvoicePerActiveAccount(db);
  const runs = await db.query<{ status: string }>(`SELECT status FROM job_runs WHERE job = 'billing-run' ORDER BY id`);
  expect(runs.at(-1)?.status).toBe('succeeded');
  expect(runs.filter((r) => r.status === 'running')).toHaveLength(0);
}

/** Opens connections until Postgres refuses one with 53300; returns them (close them to free the slots). */
async function fillConnections(url: string): Promise<pg.Client[]> {
  const held: pg.Client[] = [];
  for (;;) {
    const c = new pg.Client({ connectionString: url });
    try {
      await c.connect();
    } catch (err) {
      expect((err as { code?: string }).code).toBe('53300');
      return held;
    }
    c.on('error', () => {});
    held.push(c);
  }
}

describe('billing-run and a database that refuses connections, turns read-only, or drops them', () => {
  let own: OwnPostgres;
  let shared: TestDatabase;
  beforeAll(async () => {
    [own, shared] = await Promise.all([startOwnPostgres(), createTestDatabase()]);
    await Promise.all([seed(own, 1_500), seed(shared, 1_500)]);
  });
  afterAll(async () => {
    await Promise.all([own?.destroy(), shared?.drop()]);
  });

  it('every connection slot taken (53300) while it starts and runs: it waits, reconnects and succeeds', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    const held = await fillConnections(own.url);
    const job = start(['billing-run'], jobEnv(own, SLOW));
    try {
      await job.waitForLog((l) => /too many clients/.test(String(l.err ?? l.msg)), 30_000);
      // A few slots free up: the run gets its connections; then every slot is taken again under it for 3 s.
      await Promise.all(held.splice(0, 6).map((c) => c.end()));
      await job.waitForLog((l) => / attempt \d+ started /.test(l.msg), 30_000);
      held.push(...(await fillConnections(own.url)));
      await sleep(3_000);
    } finally {
      await Promise.all(held.map((c) => c.end()));
    }
    await expectCleanEnd(own, job);
  });

  it('read-only for 5 s mid-run (25006): it waits the failover out and succeeds', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    const job = start(['billing-run'], jobEnv(own, SLOW));
    await job.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0, 30_000);
    // The spell's length is the fault itself: 5 s, well within the budget of 25.5 s (backoff 100 ms).
    await readOnly(own, () => sleep(5_000));
    await expectCleanEnd(own, job);
    expect(job.logs.some((l) => /read-only/.test(l.msg))).toBe(true);
  });

  it('read-only for longer than the reconnect budget: it fails in about the budget, once, whatever step it waits in', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    // Backoff 50 ms: a budget of 50 + 100 + ... + 6,400 = 12,750 ms (reconnectBudgetMs).
    const budgetMs = reconnectBudgetMs(50);
    const job = start(['billing-run'], jobEnv(own, { ...SLOW, JOB_RECONNECT_BACKOFF_MS: '50' }));
    await job.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0, 30_000);
    let code = -1;
    await readOnly(own, async () => {
      ({ code } = await job.exited);
    });
    expect(code, job.stdout().slice(-3_000)).toBe(1);
    // From the first trouble the run met (the batch, then recording the attempt's end) to giving up: one budget, not two.
    const firstTrouble = job.logs.find((l) => /read-only/.test(String(l.err ?? '')) || /read-only/.test(l.msg))!;
    const gaveUp = job.logs.find((l) => /could not go on: the database stayed unreachable for \d+ ms/.test(l.msg))!;
    expect(gaveUp, job.stdout().slice(-3_000)).toBeDefined();
    const outMs = Date.parse(String(gaveUp.time)) - Date.parse(String(firstTrouble.time));
    expect(outMs).toBeLessThanOrEqual(budgetMs + 3_000);
    // It waited the whole budget, its last try at the budget itself, not a (jittered) backoff before it.
    expect(outMs).toBeGreaterThanOrEqual(budgetMs - 1_000);
    // It names what kept it out, though the last try ended in a reconnect rather than an error.
    expect(gaveUp.msg).toMatch(/ms\): .*read-only/);
    expect(job.logs.filter((l) => l.alert !== undefined)).toHaveLength(1);
  });

  it('read-only twice, each spell within the budget and both together past it, the run at work between them: it succeeds', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    // Backoff 50 ms: a budget of 12,750 ms, its longest wait 6,400 ms; two spells of 8 s.
    const job = start(['billing-run'], jobEnv(own, { ...SLOW, JOB_BATCH_SIZE: '2', JOB_RECONNECT_BACKOFF_MS: '50' }));
    expect(await atWork(job, 1)).toBe(true);
    await readOnly(own, () => sleep(8_000));
    // Back at work: an attempt after the spell committed a checkpoint of its own, further than the one it resumed from.
    const movedOn = () =>
      own.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM job_runs later JOIN job_runs earlier ON earlier.job = later.job AND earlier.scheduled_time = later.scheduled_time AND earlier.attempt = later.attempt - 1
         WHERE later.job = 'billing-run' AND later.checkpoint IS DISTINCT FROM earlier.checkpoint AND later.checkpoint IS NOT NULL`,
      );
    expect(await eventually(async () => (await movedOn())[0]!.n > 0, 60_000, 50)).toBe(true);
    await readOnly(own, () => sleep(8_000));
    await expectCleanEnd(own, job);
  });

  it('read-only until recording the attempt\'s end makes the budget\'s last try, which the database answers: the run goes on and succeeds', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    const job = start(['billing-run'], jobEnv(own, { ...SLOW, JOB_BATCH_SIZE: '2', JOB_RECONNECT_BACKOFF_MS: '50' }));
    expect(await atWork(job, 1)).toBe(true);
    // The spell ends once the record's next try is the one at the budget itself.
    const atBudget = () => job.logs.some((l) => typeof l.inMs === 'number' && typeof l.outMs === 'number' && /could not record/.test(l.msg) && l.inMs + l.outMs >= (l.budgetMs as number) - 5);
    await readOnly(own, async () => {
      expect(await eventually(async () => atBudget(), 30_000, 10)).toBe(true);
    });
    await expectCleanEnd(own, job);
    expect(job.logs.some((l) => /stayed unreachable/.test(l.msg))).toBe(false);
  });

  it('its locks\' connections work but the handler can get none (53300): the run gives up after the budget, not an attempt row per try until its timeout', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    const held = await fillConnections(own.url);
    // Two slots, which the run's two lock connections take.
    await Promise.all(held.splice(0, 2).map((c) => c.end()));
    const budgetMs = reconnectBudgetMs(50);
    const t0 = Date.now();
    const job = start(['billing-run'], jobEnv(own, { ...SLOW, JOB_RECONNECT_BACKOFF_MS: '50' }));
    onTestFinished(() => job.kill('SIGKILL'));
    let code = -1;
    try {
      ({ code } = await job.exited);
    } finally {
      await Promise.all(held.map((c) => c.end()));
    }
    expect(code, job.stdout().slice(-3_000)).toBe(1);
    expect(Date.now() - t0).toBeLessThan(budgetMs + 20_000);
    expect(job.logs.some((l) => /could not go on: the database stayed unreachable/.test(l.msg))).toBe(true);
    expect(job.logs.filter((l) => l.alert !== undefined)).toHaveLength(1);
    const rows = await own.query<{ n: number }>(`SELECT count(*)::int AS n FROM job_runs WHERE job = 'billing-run'`);
    expect(rows[0]!.n).toBeLessThanOrEqual(RECONNECT_TRIES + 2);
  });

  it('Postgres crashes mid-run (WAL not yet on disk is lost): it reconnects, resumes from the checkpoint that survived, and bills every account once', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    // A session of the test locks the accounts after the first few batches, so the crash finds
    // the run at work however fast it commits; the crash ends that session too.
    const holder = new pg.Client({ connectionString: own.url });
    holder.on('error', () => {});
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM accounts WHERE id > (SELECT min(id) + 50 FROM accounts) FOR UPDATE`);
    const job = start(['billing-run'], jobEnv(own, SLOW));
    await job.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0, 30_000);
    await own.crash();
    await holder.end().catch(() => undefined);
    await expectCleanEnd(own, job);
    // The crash met the run at work: it reconnected and resumed.
    expect(job.logs.some((l) => /^reconnecting to the database in \d+ ms/.test(l.msg)), job.stdout().slice(-3_000)).toBe(true);
  });

  it('Postgres crashes the moment a run has reported success: after recovery every invoice and the outcome are there', { timeout: 120_000 }, async () => {
    await own.query(`DELETE FROM invoices`);
    await own.query(`DELETE FROM job_runs`);
    // Batches of 20: some 70 commits of batches and checkpoints, the last ones just before the outcome.
    const job = start(['billing-run'], jobEnv(own, { SCHEDULED_TIME: NIGHTLY_TIME, JOB_BATCH_SIZE: '20' }));
    // The run's metrics line follows the commit of its outcome.
    await job.waitForLog((l) => l.Succeeded === 1, 60_000);
    await own.crash();
    await expectCleanEnd(own, job);
  });

  it('its backends terminated 5 times in a row: it reconnects each time and succeeds', { timeout: 120_000 }, async () => {
    await shared.query(`DELETE FROM invoices`);
    await shared.query(`DELETE FROM job_runs`);
    // One account a batch: two batches side by side bill 1,500 accounts in about a second otherwise.
    const job = start(['billing-run'], jobEnv(shared, { ...SLOW, JOB_BATCH_SIZE: '1' }));
    for (let k = 1; k <= 5; k++) {
      // Each time the run is at work again (attempt k started and did a batch), all its connections are cut:
      // each outage is short, and the run back at work stops the reconnect clock, however loaded the machine.
      expect(await atWork(job, k), `attempt ${k} at work`).toBe(true);
      await terminateJobBackends(shared);
    }
    await expectCleanEnd(shared, job);
    expect(started(job)).toBeGreaterThanOrEqual(6);
  });

  it('its connections cut while it waits to retry a failed attempt: it reconnects instead of failing the run', { timeout: 120_000 }, async () => {
    await shared.query(`DELETE FROM invoices`);
    await shared.query(`DELETE FROM job_runs`);
    const job = start(['billing-run'], jobEnv(shared, { ...SLOW, JOB_FAULT_INJECTION: 'fail-attempts=1', JOB_RETRY_BACKOFF_MS: '4000' }));
    await job.waitForLog((l) => /failed: injected failure .*; retrying in \d+ ms/.test(l.msg), 30_000);
    await terminateJobBackends(shared);
    await expectCleanEnd(shared, job);
    expect(job.logs.some((l) => /^reconnecting to the database in \d+ ms/.test(l.msg)), job.stdout().slice(-3_000)).toBe(true);
  });

  it('a forced run whose backends are terminated resumes from its own checkpoint: its progress never goes back', { timeout: 120_000 }, async () => {
    await shared.query(`DELETE FROM invoices`);
    await shared.query(`DELETE FROM job_runs`);
    const first = start(['billing-run'], jobEnv(shared, { SCHEDULED_TIME: NIGHTLY_TIME }));
    expect((await first.exited).code).toBe(0);
    const job = start(['billing-run', '--force'], jobEnv(shared, SLOW));
    for (let k = 1; k <= 3; k++) {
      expect(await atWork(job, k), `attempt ${k} at work`).toBe(true);
      await terminateJobBackends(shared);
    }
    await expectCleanEnd(shared, job);
    const progress = progressOf(job);
    expect(progress.filter((p, i) => i > 0 && p < progress[i - 1]!), `progress ${progress.join(' ')}`).toEqual([]);
    expect(job.logs.filter((l) => /^resuming from the checkpoint of attempt \d+/.test(l.msg) && l.ownAttempt === true).length).toBeGreaterThanOrEqual(3);
    expect(job.logs.some((l) => /^--force: run #\d+ already succeeded; running it again from scratch/.test(l.msg))).toBe(true);
  });
});
