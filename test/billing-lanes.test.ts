/**
 * billing-run's batches side by side over keyset ranges, where they can go wrong: a skipped
 * account reported once when a range is done again, counts that stay exact when a rerun cuts
 * its ranges at another size, the ranges done beyond the watermark kept disjoint and few, and
 * kills, reruns and a terminated lane with exact counts and nothing left behind.
 */
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_UNIT_PRICE_CENTS } from '../app/billing.js';
import { cutRanges, rangesToRun, RangesDone, type KeyRange } from '../app/jobs/keyset-ranges.js';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_DAY, NIGHTLY_TIME, expectNothingLeft, expectOneInvoicePerActiveAccount, jobRuns, runJob, seed, startJob, summaryOf } from './helpers/jobs.js';

const JOB = ['billing-run', '--scheduled-time', NIGHTLY_TIME];

/** Inserts `n` active accounts created long before the billed day; their ids, ascending. */
async function accounts(db: TestDatabase, n: number, tag: string, price = 1): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `INSERT INTO accounts (name, email, unit_price_cents, created_at)
     SELECT format('%s %s', $1::text, i), format('%s-%s@example.com', $1::text, i), $3, '2025-01-01' FROM generate_series(1, $2::int) AS i ORDER BY i
     RETURNING id::text`,
    [tag, n, price],
  );
  return rows.map((r) => r.id).sort((a, b) => Number(a) - Number(b));
}

/** The last attempt's checkpoint, as committed. */
async function lastCheckpoint(db: TestDatabase): Promise<{ afterAccountId: string; ahead?: { after: string; through: string | null; items: number }[]; inserted: number; skipped?: { accountId: string }[] } | null> {
  const rows = await jobRuns(db, 'billing-run');
  return (rows.at(-1)?.checkpoint as never) ?? null;
}

/** A client of the test that holds a transaction open until `release`. */
async function holder(db: TestDatabase): Promise<{ c: pg.Client; release: () => Promise<void> }> {
  let release!: () => Promise<void>;
  let ready!: (c: pg.Client) => void;
  const got = new Promise<pg.Client>((r) => (ready = r));
  const done = db.withClient(async (c) => {
    await new Promise<void>((resolve) => {
      ready(c);
      release = async () => resolve();
    });
  });
  const c = await got;
  return {
    c,
    release: async () => {
      await c.query('ROLLBACK').catch(() => undefined);
      await release();
      await done;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// A lane's checkpoint must not carry the accounts another lane skipped in a range not yet committed.
// ---------------------------------------------------------------------------------------------
describe('a data error in one lane while the other lane commits', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('after SIGKILL, the rerun reports the skipped account once (a skip joins the checkpoint with its own range\'s)', async () => {
    // Range 1 (JOB_BATCH_SIZE=2) is [attacker, blocked]; the attacker's day overflows bigint.
    const [attacker] = await accounts(db, 1, 'attacker', MAX_UNIT_PRICE_CENTS);
    const [blocked] = await accounts(db, 1, 'blocked');
    const others = await accounts(db, 10, 'other');
    await db.query(
      `INSERT INTO usage (account_id, metric, quantity, occurred_at) SELECT $1, 'api.calls', 9000000000000000000, t
       FROM unnest(ARRAY[$2::timestamptz, $2::timestamptz + interval '1 hour']) AS t`,
      [attacker, `${NIGHTLY_DAY}T10:00:00Z`],
    );
    // A transaction of the test inserts the blocked account's invoice and stays open: the redo of
    // range 1, account by account, skips the attacker, then waits on that invoice's key.
    const h = await holder(db);
    await h.c.query('BEGIN');
    await h.c.query(`INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES ($1, $2, ($2::date + 1), 0, 0)`, [blocked, NIGHTLY_DAY]);
    const job = startJob(db, JOB, { JOB_BATCH_SIZE: '2', JOB_BATCH_CONCURRENCY: '2' });
    try {
      await job.waitForLog((l) => l.accountId === attacker && /skipped/.test(l.msg), 30_000);
      // The other lane bills every other range: the run's row then has them all beyond the watermark.
      const laterDone = await eventually(async () => ((await lastCheckpoint(db))?.inserted ?? 0) === others.length, 30_000);
      expect(laterDone).toBe(true);
      const cp = (await lastCheckpoint(db))!;
      // Range 1 is not committed (the watermark is before it), yet its skip is in the row already.
      expect(cp.afterAccountId).toBe('0');
      expect(new RangesDone(cp.afterAccountId, cp.ahead as never).covers({ after: '0', through: blocked! })).toBe(false);
      job.kill('SIGKILL');
      await job.exited;
    } finally {
      await h.release();
    }
    const rerun = await runJob(db, JOB, { JOB_BATCH_SIZE: '2', JOB_BATCH_CONCURRENCY: '2' });
    expect(rerun.code).toBe(0);
    const summary = summaryOf<{ accounts: number; invoicesInserted: number; skippedAccounts: string[] }>(rerun.logs);
    // Fails: [attacker, attacker]. The other lane's checkpoint saved the skip of a range it did
    // not commit; the rerun redoes that range and skips the attacker again.
    expect(summary.skippedAccounts).toEqual([attacker]);
    expect(summary).toMatchObject({ accounts: 2 + others.length, invoicesInserted: 1 + others.length });
    await expectNothingLeft(db);
  });
});

// ---------------------------------------------------------------------------------------------
// A resumed run whose ranges are cut elsewhere than its checkpoint's must count each account once.
// ---------------------------------------------------------------------------------------------
describe('a rerun with another JOB_BATCH_SIZE than the interrupted run', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('reports each eligible account once in `accounts`: its ranges are cut where the checkpoint\'s ranges begin and end', async () => {
    const ids = await accounts(db, 30, 'acct');
    // The test locks the second account: the first range (ids 1-3) waits, the other lane bills the rest.
    const h = await holder(db);
    await h.c.query('BEGIN');
    await h.c.query('SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE', [ids[1]]);
    const job = startJob(db, JOB, { JOB_BATCH_SIZE: '3', JOB_BATCH_CONCURRENCY: '2' });
    try {
      const rest = await eventually(async () => ((await lastCheckpoint(db))?.inserted ?? 0) === 27, 30_000);
      expect(rest).toBe(true);
      expect(await lastCheckpoint(db)).toMatchObject({ afterAccountId: '0', inserted: 27 });
      job.kill('SIGKILL');
      await job.exited;
    } finally {
      await h.release();
    }
    // The operator reruns with bigger batches: the first range is now ids 1-5.
    const rerun = await runJob(db, JOB, { JOB_BATCH_SIZE: '5', JOB_BATCH_CONCURRENCY: '2' });
    expect(rerun.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    // Fails: accounts is 32 (ids 4 and 5 are in the checkpoint's `ahead` and in the redone range).
    expect(summaryOf(rerun.logs)).toMatchObject({ accounts: 30, invoicesInserted: 30 });
  });
});

// ---------------------------------------------------------------------------------------------
// RangesDone, property-tested over ids 1..n, each id one item.
// ---------------------------------------------------------------------------------------------

/** Every `size`-th id after `after`. */
const endsOf = (ids: number[], after: number, size: number) => ids.filter((id) => id > after).filter((_, i) => (i + 1) % size === 0).map(String);
const inRange = (id: number, r: KeyRange) => id > Number(r.after) && (r.through === null || id <= Number(r.through));
const itemsOf = (ids: number[], r: KeyRange) => ids.filter((id) => inRange(id, r)).length;

/** A run cut at `size1` commits some of its ranges (in some order); a rerun cut at `size2` from its checkpoint does the rest. */
const scenario = fc
  .record({ n: fc.integer({ min: 0, max: 40 }), size1: fc.integer({ min: 1, max: 7 }), size2: fc.integer({ min: 1, max: 7 }), seed: fc.integer() })
  .chain(({ n, size1, size2 }) => {
    const ids = Array.from({ length: n }, (_, i) => i + 1);
    const first = cutRanges('0', endsOf(ids, 0, size1));
    return fc.record({
      ids: fc.constant(ids),
      size2: fc.constant(size2),
      firstOrder: fc.shuffledSubarray(first.map((_, i) => i)),
      secondSeed: fc.array(fc.nat(), { maxLength: 50 }),
      first: fc.constant(first),
    });
  });

/** Commits `ranges` in order from `start`, checking the watermark's invariants after each; the last state. */
function commitAll(ids: number[], start: RangesDone, ranges: KeyRange[], committed: Set<number>, onEach?: (d: RangesDone) => void, disjoint = false): RangesDone {
  let d = start;
  for (const r of ranges) {
    const before = BigInt(d.watermark);
    d = d.with(r, itemsOf(ids, r));
    ids.filter((id) => inRange(id, r)).forEach((id) => committed.add(id));
    // Never backwards; never past an id that is not committed.
    expect(BigInt(d.watermark) >= before).toBe(true);
    for (const id of ids) if (id <= Number(d.watermark)) expect(committed.has(id)).toBe(true);
    // `ahead`: sorted, disjoint, beyond the watermark, and all committed.
    let prevEnd = BigInt(d.watermark);
    for (const a of d.ahead) {
      if (disjoint) expect(BigInt(a.after) >= prevEnd, JSON.stringify({ watermark: d.watermark, ahead: d.ahead })).toBe(true);
      expect(a.through === null || BigInt(a.through) > BigInt(a.after)).toBe(true);
      for (const id of ids) if (inRange(id, a)) expect(committed.has(id)).toBe(true);
      prevEnd = a.through === null ? BigInt(Number.MAX_SAFE_INTEGER) : BigInt(a.through);
    }
    onEach?.(d);
  }
  return d;
}

function order<T>(items: T[], seeds: number[]): T[] {
  const rest = [...items];
  const out: T[] = [];
  let i = 0;
  while (rest.length > 0) out.push(...rest.splice((seeds[i++] ?? 0) % rest.length, 1));
  return out;
}

describe('RangesDone.with', () => {
  it('merges the range to the end of the ids with a range it meets or overlaps (`ahead` stays disjoint and small)', () => {
    // Meets: two ranges done beyond the watermark, one of them the last.
    expect(new RangesDone('0', [{ after: '4', through: '8', items: 4 }]).with({ after: '8', through: null }, 3).ahead).toEqual([{ after: '4', through: null, items: 7 }]);
    // Overlaps (a resumed run cut elsewhere): ids 35 and 36 are counted twice.
    const d = new RangesDone('4', [{ after: '32', through: '36', items: 4 }]).with({ after: '34', through: null }, 3);
    expect(d.ahead).toHaveLength(1);
    expect(d.ahead[0]).toMatchObject({ after: '32', through: null });
  });

  it('keeps `ahead` sorted and disjoint over any commit order and a resume cut elsewhere', () => {
    fc.assert(
      fc.property(scenario, ({ ids, size2, firstOrder, secondSeed, first }) => {
        const committed = new Set<number>();
        const cp = commitAll(ids, new RangesDone('0'), firstOrder.map((i) => first[i]!), committed, undefined, true);
        const start = new RangesDone(cp.watermark, cp.ahead);
        const queue = rangesToRun(start, endsOf(ids, Number(start.watermark), size2));
        commitAll(ids, start, order(queue, secondSeed), committed, undefined, true);
      }),
      { numRuns: Number(process.env.FC_NUM_RUNS ?? 300) },
    );
  });

  it('keeps the watermark monotonic and behind every uncommitted id, across a resume cut at another size', () => {
    fc.assert(
      fc.property(scenario, ({ ids, size2, firstOrder, secondSeed, first }) => {
        const committed = new Set<number>();
        const cp = commitAll(ids, new RangesDone('0'), firstOrder.map((i) => first[i]!), committed);
        // Through JSON, as the checkpoint goes.
        const resumed = JSON.parse(JSON.stringify({ afterAccountId: cp.watermark, ahead: cp.ahead })) as { afterAccountId: string; ahead: never[] };
        const start = new RangesDone(resumed.afterAccountId, resumed.ahead);
        const queue = rangesToRun(start, endsOf(ids, Number(start.watermark), size2));
        for (const r of cutRanges(start.watermark, endsOf(ids, Number(start.watermark), size2))) {
          if (start.covers(r)) for (const id of ids) if (inRange(id, r)) expect(committed.has(id)).toBe(true);
        }
        const end = commitAll(ids, start, order(queue, secondSeed), committed);
        // Everything is done: every id is at or below the watermark or in a range ahead.
        for (const id of ids) expect(Number(end.watermark) >= id || end.ahead.some((a) => inRange(id, a))).toBe(true);
      }),
      { numRuns: Number(process.env.FC_NUM_RUNS ?? 300) },
    );
  });

  it('counts each item once (itemsAhead, and what a resumed run reports as processed)', () => {
    fc.assert(
      fc.property(scenario, ({ ids, size2, firstOrder, secondSeed, first }) => {
        const committed = new Set<number>();
        const cp = commitAll(ids, new RangesDone('0'), firstOrder.map((i) => first[i]!), committed);
        const start = new RangesDone(cp.watermark, cp.ahead);
        // What billing-run's plan() and run() compute: done up to the watermark, plus itemsAhead, plus each redone range.
        let processed = ids.filter((id) => id <= Number(start.watermark)).length + start.itemsAhead;
        const queue = rangesToRun(start, endsOf(ids, Number(start.watermark), size2));
        commitAll(ids, start, order(queue, secondSeed), committed, (d) => {
          expect(d.itemsAhead).toBe(ids.filter((id) => id > Number(d.watermark) && d.ahead.some((a) => inRange(id, a))).length);
        });
        for (const r of queue) processed += itemsOf(ids, r);
        expect(processed).toBe(ids.length);
      }),
      { numRuns: Number(process.env.FC_NUM_RUNS ?? 300) },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Kills, reruns, sizes and a terminated lane.
// ---------------------------------------------------------------------------------------------
describe('billing-run side by side, end to end', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
    await seed(db, 120);
  });
  afterAll(async () => {
    await db.drop();
  });
  async function eligible(): Promise<string[]> {
    const rows = await db.query<{ id: string }>(`SELECT id::text FROM accounts WHERE status = 'active' ORDER BY accounts.id`);
    return rows.map((r) => r.id);
  }
  async function reset(): Promise<void> {
    await db.query('DELETE FROM invoices');
    await db.query('DELETE FROM job_runs');
  }

  it('SIGKILL with one lane blocked, then a rerun: one invoice each, exact counts, a sane checkpoint', async () => {
    await reset();
    const active = await eligible();
    const h = await holder(db);
    await h.c.query('BEGIN');
    await h.c.query('SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE', [active[3]]);
    const job = startJob(db, JOB, { JOB_BATCH_SIZE: '10', JOB_BATCH_CONCURRENCY: '2' });
    try {
      expect(await eventually(async () => ((await lastCheckpoint(db))?.inserted ?? 0) > 20, 30_000)).toBe(true);
      // The row and the invoices, in one snapshot: the checkpoint says exactly what is committed.
      const [both] = await db.query<{ checkpoint: { afterAccountId: string; ahead: unknown[]; inserted: number }; invoices: number }>(
        `SELECT (SELECT checkpoint FROM job_runs WHERE job = 'billing-run' ORDER BY id DESC LIMIT 1) AS checkpoint, (SELECT count(*)::int FROM invoices WHERE period_start = $1) AS invoices`,
        [NIGHTLY_DAY],
      );
      expect(both!.checkpoint.afterAccountId).toBe('0');
      expect(both!.checkpoint.ahead.length).toBeLessThanOrEqual(2);
      expect(both!.checkpoint.inserted).toBe(both!.invoices);
      job.kill('SIGKILL');
      await job.exited;
    } finally {
      await h.release();
    }
    const rerun = await runJob(db, JOB, { JOB_BATCH_SIZE: '10', JOB_BATCH_CONCURRENCY: '2' });
    expect(rerun.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    expect(summaryOf(rerun.logs)).toMatchObject({ accounts: active.length, invoicesInserted: active.length, skippedAccounts: [] });
    await expectNothingLeft(db);
  });

  it('an old checkpoint {afterAccountId, inserted} (no `ahead`) resumes: exact counts', async () => {
    await reset();
    const active = await eligible();
    const w = active[29]!;
    await db.query(
      `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) SELECT id, $1, ($1::date + 1), 0, 0 FROM accounts WHERE status = 'active' AND id <= $2`,
      [NIGHTLY_DAY, w],
    );
    await db.query(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, checkpoint, ran_on, finished_at, processed) VALUES ('billing-run', $1, 'interrupted', 1, $2, 'old-release', now(), 30)`,
      [NIGHTLY_TIME, JSON.stringify({ afterAccountId: w, inserted: 30 })],
    );
    const r = await runJob(db, JOB, { JOB_BATCH_SIZE: '7' });
    expect(r.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    expect(summaryOf(r.logs)).toMatchObject({ accounts: active.length, invoicesInserted: active.length });
  });

  it.each([
    ['1', '1'],
    ['1', '7'],
    ['4', '3'],
  ])('JOB_BATCH_CONCURRENCY=%s JOB_BATCH_SIZE=%s, then --force: exact counts', async (lanes, size) => {
    await reset();
    const active = await eligible();
    const r = await runJob(db, JOB, { JOB_BATCH_SIZE: size, JOB_BATCH_CONCURRENCY: lanes });
    expect(r.code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    expect(summaryOf(r.logs)).toMatchObject({ accounts: active.length, invoicesInserted: active.length });
    const forced = await runJob(db, [...JOB, '--force'], { JOB_BATCH_SIZE: size, JOB_BATCH_CONCURRENCY: lanes });
    expect(forced.code).toBe(0);
    expect(summaryOf(forced.logs)).toMatchObject({ accounts: active.length, invoicesInserted: 0 });
    await expectNothingLeft(db);
  });

  it('a lane terminated mid-batch (pg_terminate_backend): the run reconnects and finishes, exact counts', async () => {
    await reset();
    const active = await eligible();
    const h = await holder(db);
    await h.c.query('BEGIN');
    await h.c.query('SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE', [active[3]]);
    const job = startJob(db, JOB, { JOB_BATCH_SIZE: '10', JOB_BATCH_CONCURRENCY: '2', JOB_RECONNECT_BACKOFF_MS: '50' });
    try {
      const waiting = async () =>
        db.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR NO KEY UPDATE%' AND application_name LIKE '%job:billing-run%'`,
        );
      expect(await eventually(async () => (await waiting()).length > 0, 30_000)).toBe(true);
      expect(await eventually(async () => (await lastCheckpoint(db))?.ahead?.some((r) => r.through === null) ?? false, 30_000)).toBe(true);
      for (const { pid } of await waiting()) await db.query('SELECT pg_terminate_backend($1)', [pid]);
      await job.waitForLog((l) => /reconnecting to the database/.test(l.msg), 30_000);
    } finally {
      await h.release();
    }
    expect((await job.exited).code).toBe(0);
    await expectOneInvoicePerActiveAccount(db);
    expect(summaryOf(job.logs)).toMatchObject({ accounts: active.length, invoicesInserted: active.length });
    await expectNothingLeft(db);
  });
});
