/**
 * billing-run's plan (app/jobs/billing-run.ts `plan`), against the same rule in plain code, on
 * accounts with gaps in their ids, of every status, some created after the billed day: it counts
 * the accounts the day bills and those done up to `after`, and ends a range at every `size`-th
 * account after `after`, whatever its status. Run as the billing role, as the job runs it.
 */
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { plan } from '../../app/jobs/billing-run.js';
import { JOB_ROLES } from '../../app/tenancy.js';
import { createTestDatabase, newClient, type TestDatabase } from '../helpers/db.js';

const NUM_RUNS = Number(process.env.FC_NUM_RUNS ?? 200);
const PERIOD_END = '2025-03-10';

interface Account {
  readonly id: number;
  readonly status: string;
  readonly createdAt: string;
}

let db: TestDatabase;
let client: pg.Client;
let accounts: Account[];

beforeAll(async () => {
  db = await createTestDatabase();
  // 120 accounts of every status, some created on or after the period's end, then a third of
  // them deleted, so the ids have gaps.
  await db.query(
    `INSERT INTO accounts (name, email, status, created_at)
     SELECT format('plan %s', i), format('plan-%s@example.com', i), (ARRAY['active', 'active', 'suspended', 'closed'])[1 + i % 4],
            CASE WHEN i % 7 = 0 THEN timestamptz '2025-03-10 00:00:00+00' WHEN i % 11 = 0 THEN timestamptz '2025-03-12 00:00:00+00' ELSE timestamptz '2025-01-01 00:00:00+00' END
     FROM generate_series(1, 120) AS i ORDER BY i`,
  );
  await db.query(`DELETE FROM accounts WHERE id % 3 = 0 OR id BETWEEN 40 AND 55`);
  accounts = (await db.query<{ id: string; status: string; created_at: Date }>(`SELECT id::text, status, created_at FROM accounts ORDER BY accounts.id`)).map((r) => ({
    id: Number(r.id),
    status: r.status,
    createdAt: r.created_at.toISOString(),
  }));
  client = newClient({ connectionString: db.url });
  await client.connect();
  await client.query('BEGIN');
  await client.query(`SELECT set_config('role', $1, true), set_config('app.account_id', '', true), set_config('app.operator', 'on', true)`, [JOB_ROLES.billing]);
});

afterAll(async () => {
  await client?.query('ROLLBACK').catch(() => {});
  await client?.end();
  await db?.drop();
});

/** The rule, in plain code. */
function expected(after: number, size: number) {
  const billed = accounts.filter((a) => a.status === 'active' && a.createdAt < `${PERIOD_END}T00:00:00.000Z`);
  const later = accounts.filter((a) => a.id > after);
  return {
    total: billed.length,
    done: billed.filter((a) => a.id <= after).length,
    ends: later.filter((_, i) => (i + 1) % size === 0).map((a) => String(a.id)),
  };
}

describe("billing-run's plan", () => {
  it('has gaps, every status and late accounts to plan over', () => {
    expect(accounts.length).toBeGreaterThan(60);
    expect(new Set(accounts.map((a) => a.status))).toEqual(new Set(['active', 'suspended', 'closed']));
    expect(accounts.at(-1)!.id - accounts[0]!.id + 1).toBeGreaterThan(accounts.length);
  });

  it('counts the billed accounts and cuts a range at every size-th account after any point', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 130 }), fc.integer({ min: 1, max: 130 }), async (after, size) => {
        expect(await plan(client, PERIOD_END, String(after), size)).toEqual(expected(after, size));
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('cuts no range after the last account, and one per account at size 1', async () => {
    expect(await plan(client, PERIOD_END, String(accounts.at(-1)!.id), 1)).toEqual(expect.objectContaining({ ends: [] }));
    expect((await plan(client, PERIOD_END, '0', 1)).ends).toEqual(accounts.map((a) => String(a.id)));
    expect((await plan(client, PERIOD_END, '0', 1_000_000)).ends).toEqual([]);
  });
});
