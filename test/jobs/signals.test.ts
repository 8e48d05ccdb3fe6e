/**
 * A job task stopped at any point: SIGKILL (OOM, a lost Spot task) and SIGTERM (StopTask,
 * a Spot interruption, a deploy), then a rerun of the same scheduled time.
 */
import { applicationName } from '../../app/db.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, eventually, type TestDatabase } from '../helpers/db.js';
import {
  NIGHTLY_TIME,
  expectNothingLeft,
  expectOneInvoicePerActiveAccount,
  invoiceCounts,
  jobRuns,
  runJob,
  seed,
  startJob,
  summaryOf,
} from '../helpers/jobs.js';

const SHUTDOWN_TIMEOUT_MS = 3_000;
// Small batches stretch the run over a couple of seconds, so that a signal lands mid-run.
const SLOW = { JOB_BATCH_SIZE: '5', SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS) };

describe('SIGKILL at a random point of billing-run', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 2_000);
  });
  afterAll(() => db.drop());

  it('leaves a `running` row that the rerun finds abandoned and resumes; one invoice per active account', async () => {
    const victim = startJob(db, ['billing-run'], { ...SLOW, SCHEDULED_TIME: NIGHTLY_TIME });
    // A random point after the first batch has committed (its metrics line), so that some
    // accounts are invoiced and some are not however slowly a loaded machine runs it.
    await victim.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0);
    await sleep(Math.random() * 300);
    victim.kill('SIGKILL');
    expect((await victim.exited).code).toBe(128 + 9);

    const [killed] = await jobRuns(db);
    expect(killed).toMatchObject({ status: 'running', attempt: 1 });
    const before = await invoiceCounts(db);
    expect(before.invoices).toBeGreaterThan(0);
    expect(before.invoices).toBeLessThan(before.activeAccounts);
    // Postgres frees a dead session's locks once it sees the socket close.
    expect(await eventually(async () => (await db.advisoryLocks()) === 0, 5_000)).toBe(true);

    const rerun = await runJob(db, ['billing-run'], { SCHEDULED_TIME: NIGHTLY_TIME });
    expect(rerun.code).toBe(0);
    expect(rerun.logs.find((l) => l.abandonedRunId === killed!.id)?.msg).toMatch(
      new RegExp(`^run #${killed!.id} \\(${NIGHTLY_TIME}, attempt 1\\) is abandoned: its lock session \\(backend pid ${killed!.lock_pid}\\) is gone and its lock is free; this run resumes from its checkpoint$`),
    );
    expect(killed!.checkpoint).toMatchObject({ afterAccountId: expect.any(String), inserted: expect.any(Number) });
    expect(rerun.logs.find((l) => l.msg.startsWith('resuming from the checkpoint'))).toMatchObject({
      msg: 'resuming from the checkpoint of attempt 1 (abandoned)',
      checkpoint: killed!.checkpoint,
    });
    expect(rerun.logs.find((l) => l.msg.includes('attempt 2 started'))?.resumed).toBe(true);
    // Counted from the checkpoint on: the batch the killed run committed after its last checkpoint inserts nothing twice.
    const summary = summaryOf<{ invoicesInserted: number }>(rerun.logs);
    expect(summary.invoicesInserted).toBe((killed!.checkpoint!.inserted as number) + before.activeAccounts - before.invoices);

    await expectOneInvoicePerActiveAccount(db);
    expect(await jobRuns(db)).toMatchObject([
      { id: killed!.id, status: 'abandoned', attempt: 1 },
      { status: 'succeeded', attempt: 2 },
    ]);
    await expectNothingLeft(db);
  });
});

describe('SIGTERM in the middle of billing-run', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 2_000);
  });
  afterAll(() => db.drop());

  it('records `interrupted` with a checkpoint, exits 3 within SHUTDOWN_TIMEOUT_MS, and a rerun completes from the checkpoint', async () => {
    const job = startJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], SLOW);
    await job.waitForLog((l) => typeof l.Processed === 'number' && l.Processed > 0);
    const sentAt = Date.now();
    job.kill('SIGTERM');
    const { code, at } = await job.exited;
    expect(code).toBe(3);
    expect(at - sentAt).toBeLessThan(SHUTDOWN_TIMEOUT_MS);

    const [interrupted] = await jobRuns(db);
    expect(interrupted).toMatchObject({ status: 'interrupted', attempt: 1, error: 'interrupted by SIGTERM' });
    expect(interrupted!.finished_at).not.toBeNull();
    expect(interrupted!.checkpoint).toMatchObject({ afterAccountId: expect.any(String), inserted: expect.any(Number) });
    const { activeAccounts, invoices } = await invoiceCounts(db);
    expect(Number(interrupted!.processed)).toBe(invoices);
    expect(invoices).toBeLessThan(activeAccounts);
    expect(job.logs.map((l) => l.msg)).toEqual(
      expect.arrayContaining([
        'received SIGTERM; shutting down (deadline 3000 ms)',
        expect.stringMatching(/^billing-run interrupted \(interrupted by SIGTERM\); recorded "interrupted" with its checkpoint/),
        expect.stringMatching(/^shutdown complete in \d+ ms; flushing logs and exiting 3$/),
      ]),
    );
    await expectNothingLeft(db);

    const rerun = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME]);
    expect(rerun.code).toBe(0);
    expect(rerun.logs.find((l) => l.msg.startsWith('resuming from the checkpoint'))).toMatchObject({
      msg: 'resuming from the checkpoint of attempt 1 (interrupted)',
      checkpoint: interrupted!.checkpoint,
    });
    const summary = summaryOf<{ invoicesInserted: number }>(rerun.logs);
    expect(summary.invoicesInserted).toBe(activeAccounts);
    await expectOneInvoicePerActiveAccount(db);
    expect(await jobRuns(db)).toMatchObject([{ status: 'interrupted' }, { status: 'succeeded', attempt: 2 }]);
    await expectNothingLeft(db);
  });
});

describe('SIGTERM during a statement longer than the stop grace', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 200);
  });
  afterAll(() => db.drop());

  it('cancels the statement at the end of the grace, records `interrupted`, exits 3 within SHUTDOWN_TIMEOUT_MS; a rerun completes', async () => {
    await db.withClient(async (blocker) => {
      // The batch's INSERT waits on this lock for as long as the test holds it: a statement that never ends by itself.
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE invoices IN SHARE MODE');
      const job = startJob(db, ['billing-run'], { SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS), SCHEDULED_TIME: NIGHTLY_TIME });
      const waiting = await eventually(async () => {
        const rows = await db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND backend_xid IS NOT NULL AND application_name = '${applicationName('job:billing-run')}'`);
        return rows.length > 0;
      }, 20_000);
      expect(waiting).toBe(true);
      const sentAt = Date.now();
      job.kill('SIGTERM');
      const { code, at } = await job.exited;
      await blocker.query('ROLLBACK');
      expect(code, job.stdout().slice(-2_000)).toBe(3);
      expect(at - sentAt).toBeLessThan(SHUTDOWN_TIMEOUT_MS + 1_000);
      expect(job.logs.some((l) => /^the handler did not stop within its grace; cancelled the statements of its \d+ connection/.test(l.msg))).toBe(true);
      expect((await jobRuns(db)).map((r) => r.status)).toEqual(['interrupted']);
    });
    const rerun = await runJob(db, ['billing-run'], { SCHEDULED_TIME: NIGHTLY_TIME });
    expect(rerun.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    await expectNothingLeft(db);
  });
});
