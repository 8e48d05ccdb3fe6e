/**
 * At-least-once delivery made safe: reruns, duplicate deliveries, overlapping runs and
 * stale `running` rows, on real processes against a real Postgres.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { repeat } from '../helpers/repeat.js';
import {
  NIGHTLY_TIME,
  expectNothingLeft,
  expectOneInvoicePerActiveAccount,
  invoiceCounts,
  jobRuns,
  msgs,
  runJob,
  seed,
  startJob,
  summaryOf,
  outcomeLine,
} from '../helpers/jobs.js';

describe('a rerun of the same scheduled time', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 300);
  });
  afterAll(() => db.drop());

  it('bills every active account once, then is a no-op that writes nothing; --force reruns without a duplicate', async () => {
    const first = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME]);
    expect(first.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    const afterFirst = await jobRuns(db);
    expect(afterFirst).toMatchObject([{ job: 'billing-run', status: 'succeeded', attempt: 1 }]);
    expect(afterFirst[0]!.scheduled_time.toISOString()).toBe(NIGHTLY_TIME);
    await expectNothingLeft(db);

    // EventBridge delivers the same event again: SCHEDULED_TIME wins over the flag.
    const again = await runJob(db, ['billing-run'], { SCHEDULED_TIME: NIGHTLY_TIME });
    expect(again.code).toBe(0);
    expect(msgs(again.logs).some((m) => m.startsWith('already done: run #'))).toBe(true);
    expect(await jobRuns(db)).toEqual(afterFirst);
    await expectOneInvoicePerActiveAccount(db);
    await expectNothingLeft(db);

    const forced = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME, '--force']);
    expect(forced.code).toBe(0);
    const summary = summaryOf<{ invoicesInserted: number; accounts: number }>(forced.logs);
    expect(summary.invoicesInserted).toBe(0);
    expect(summary.accounts).toBe((await invoiceCounts(db)).activeAccounts);
    await expectOneInvoicePerActiveAccount(db);
    expect(await jobRuns(db)).toMatchObject([
      { status: 'succeeded', attempt: 1 },
      { status: 'succeeded', attempt: 2 },
    ]);
    await expectNothingLeft(db);
  });
});

describe('duplicate delivery', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 1_500);
  });
  afterAll(() => db.drop());

  it('three concurrent invocations of one SCHEDULED_TIME: one works, all exit 0, one invoice per active account', async () => {
    // Small batches make the run last long enough for the duplicates to meet it.
    const env = { SCHEDULED_TIME: NIGHTLY_TIME, JOB_BATCH_SIZE: '25' };
    const procs = [0, 1, 2].map(() => startJob(db, ['billing-run'], env));
    const codes = await Promise.all(procs.map((p) => p.exited.then((e) => e.code)));
    expect(codes).toEqual([0, 0, 0]);

    const outcomes = procs.map((p) => outcomeLine(p.logs)?.outcome);
    expect(outcomes.filter((o) => o === 'succeeded')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'already-running' || o === 'already-done')).toHaveLength(2);
    expect(outcomes).toContain('already-running');
    const duplicate = procs.find((p) => p.logs.some((l) => l.outcome === 'already-running'))!;
    expect(msgs(duplicate.logs).some((m) => m.startsWith('already running'))).toBe(true);

    await expectOneInvoicePerActiveAccount(db);
    expect(await jobRuns(db)).toMatchObject([{ status: 'succeeded', attempt: 1 }]);
    await expectNothingLeft(db);
  });
});

describe('overlap with a run of another scheduled time', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 1_500);
  });
  afterAll(() => db.drop());

  it('"skip" (report-aggregation) exits 0 with a log line and writes nothing', async () => {
    const slow = startJob(db, ['report-aggregation', '--scheduled-time', '2025-03-10T01:30:00Z'], { JOB_BATCH_SIZE: '5' });
    await slow.waitForLog((l) => l.msg.includes('attempt 1 started'));
    const next = await runJob(db, ['report-aggregation', '--scheduled-time', '2025-03-11T01:30:00Z']);
    expect(next.code).toBe(0);
    const line = next.logs.find((l) => l.outcome === 'skipped');
    expect(line?.msg).toMatch(/^skipped: run #\d+ \(2025-03-10T01:30:00.000Z, heartbeat .* of report-aggregation is still going and the job's overlap policy is "skip"; exiting 0$/);
    expect((await jobRuns(db)).map((r) => r.scheduled_time.toISOString())).toEqual(['2025-03-10T01:30:00.000Z']);
    expect((await slow.exited).code).toBe(0);
    await expectNothingLeft(db);
  });

  it('"wait" (billing-run) starts once the previous run is over, and both succeed', async () => {
    // A transaction of the test locks the accounts after the first batch, so the first run
    // waits there until the second is waiting for it, however fast the machine commits.
    const { slow, next } = await db.withClient(async (holder) => {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM accounts WHERE id > (SELECT min(id) + 10 FROM accounts) FOR UPDATE`);
      try {
        const slow = startJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { JOB_BATCH_SIZE: '10' });
        await slow.waitForLog((l) => l.msg.includes('attempt 1 started'));
        const next = startJob(db, ['billing-run', '--scheduled-time', '2025-03-11T00:15:00Z']);
        await next.waitForLog((l) => l.msg.startsWith('waiting: run #'));
        return { slow, next };
      } finally {
        await holder.query('COMMIT');
      }
    });
    expect((await slow.exited).code).toBe(0);
    expect((await next.exited).code).toBe(0);
    const [first, second] = await jobRuns(db, 'billing-run');
    expect(first).toMatchObject({ status: 'succeeded' });
    expect(second).toMatchObject({ status: 'succeeded' });
    expect(second!.started_at.getTime()).toBeGreaterThanOrEqual(first!.finished_at!.getTime());
    await expectOneInvoicePerActiveAccount(db, '2025-03-09');
    await expectOneInvoicePerActiveAccount(db, '2025-03-10');
    await expectNothingLeft(db);
  });
});

describe('a `running` row whose lock is free', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 50);
  });
  afterAll(() => db.drop());

  it('with a stale heartbeat, is marked abandoned by the next run of the job', async () => {
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, heartbeat_at, started_at, ran_on)
       VALUES ('data-cleanup', '2025-03-10T00:00:00Z', 'running', 1, now() - interval '1 minute', now() - interval '2 minutes', 'a-dead-task') RETURNING id::text`,
    );
    const r = await runJob(db, ['data-cleanup', '--scheduled-time', '2025-03-10T06:00:00Z']);
    expect(r.code).toBe(0);
    const warn = r.logs.find((l) => l.abandonedRunId === row!.id);
    expect(warn?.msg).toMatch(/is abandoned: no heartbeat for \d+ ms and its lock is free; rerun data-cleanup --scheduled-time 2025-03-10T00:00:00.000Z to finish it/);
    expect(await jobRuns(db, 'data-cleanup')).toMatchObject([
      { id: row!.id, status: 'abandoned', error: expect.stringMatching(/^abandoned: no heartbeat since/) },
      { status: 'succeeded', attempt: 1 },
    ]);
    await expectNothingLeft(db);
  });

  it('with a heartbeat that keeps moving (its process lost its lock but lives), counts as running', async () => {
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, ran_on) VALUES ('billing-run', $1, 'running', 1, 'a-live-task') RETURNING id::text`,
      [NIGHTLY_TIME],
    );
    // The fake live process beats every 100 ms on a connection of its own. The job's heartbeat
    // interval of 1 s makes the row stale only after 3 s without a beat, so a loaded machine
    // that delays a beat cannot make the live run look abandoned.
    await db.withClient(async (beater) => {
      const beat = repeat(() => beater.query(`UPDATE job_runs SET heartbeat_at = now() WHERE id = $1`, [row!.id]), 100);
      try {
        const r = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME], { HEARTBEAT_INTERVAL_MS: '1000' });
        expect(r.code).toBe(0);
        expect(r.logs.find((l) => l.outcome === 'already-running')?.msg).toBe(
          `already running: run #${row!.id} of this run key still beats its heartbeat, though its lock is free; exiting 0`,
        );
      } finally {
        await beat.stop();
      }
    });
    expect(await jobRuns(db, 'billing-run')).toMatchObject([{ id: row!.id, status: 'running' }]);
    expect((await invoiceCounts(db)).invoices).toBe(0);
    await expectNothingLeft(db);
  });
});
