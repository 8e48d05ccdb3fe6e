/**
 * billing-run through database faults that a moment cures, each made for real against a real
 * Postgres and a real job process: every connection slot taken while the run starts and runs
 * (SQLSTATE 53300), the database read-only for 5 s mid-run (25006), and the job's backends
 * terminated 5 times in a row. Each ends in exit 0, one invoice per active account, no alert:
 * such trouble draws on the time-bounded reconnect budget, never on the job's `retries` (2).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_TIME, expectOneInvoicePerActiveAccount, jobEnv, seed, type Database } from './helpers/jobs.js';
import { startOwnPostgres, type OwnPostgres } from './helpers/own-postgres.js';
import { start, type Proc } from './helpers/process.js';

// Small batches stretch the run over seconds, so that each fault lands mid-run.
const SLOW = { SCHEDULED_TIME: NIGHTLY_TIME, JOB_BATCH_SIZE: '5', JOB_RECONNECT_BACKOFF_MS: '100' };

const started = (job: Proc) => job.logs.filter((l) => / attempt \d+ started /.test(l.msg)).length;

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
    // As a writer turned standby answers: every session's next transaction is read-only.
    await own.withClient(async (c) => {
      await c.query(`SET default_transaction_read_only = off`);
      await c.query(`ALTER SYSTEM SET default_transaction_read_only = on`);
      await c.query(`SELECT pg_reload_conf()`);
      await sleep(5_000);
      await c.query(`ALTER SYSTEM RESET default_transaction_read_only`);
      await c.query(`SELECT pg_reload_conf()`);
    });
    await expectCleanEnd(own, job);
    expect(job.logs.some((l) => /read-only/.test(l.msg))).toBe(true);
  });

  it('its backends terminated 5 times in a row: it reconnects each time and succeeds', { timeout: 120_000 }, async () => {
    const job = start(['billing-run'], jobEnv(shared, SLOW));
    for (let k = 1; k <= 5; k++) {
      // Each time the run is working again (an attempt started and a batch done), all its connections are cut.
      expect(await eventually(async () => started(job) >= k, 30_000, 20), `attempt ${k} started`).toBe(true);
      await sleep(100);
      await shared.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'ecs-saas-backend:job:billing-run'`,
      );
    }
    await expectCleanEnd(shared, job);
    expect(started(job)).toBeGreaterThanOrEqual(6);
  });
});
