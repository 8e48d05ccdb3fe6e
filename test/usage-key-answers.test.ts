/**
 * What a retry of an idempotency key answers when its day is not the server's to count in the
 * session's time zone, and once its original is past retention and gone (app/api/usage.ts);
 * and what a tenant learns of another account's keys: nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { utcDay } from '../app/usage-partitions.js';
import { randomAdminKey } from './helpers/admin-key.js';
import { startApi, type InProcessApi } from './helpers/api.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';

const ADMIN_KEY = randomAdminKey();

describe('retries of an idempotency key', () => {
  let db: TestDatabase;
  let api: InProcessApi;
  beforeAll(async () => {
    db = await createTestDatabase();
    // A session time zone with a 23-hour day: the API's answers are UTC whatever it is.
    const url = new URL(db.url);
    url.searchParams.set('options', '-c TimeZone=America/New_York');
    api = await startApi({ DATABASE_URL: url.toString(), ADMIN_API_KEY: ADMIN_KEY });
  });
  afterAll(async () => {
    await api?.stop();
    await db?.drop();
  });

  async function newAccount(email: string): Promise<string> {
    const [row] = await db.query<{ id: string }>(`INSERT INTO accounts (name, email, created_at) VALUES ($1, $1, now() - interval '400 days') RETURNING id::text`, [email]);
    return row!.id;
  }

  async function report(account: string, body: Record<string, unknown>): Promise<{ status: number; body: { id?: string; error?: { code: string; message: string } } }> {
    const res = await fetch(`${api.base}/accounts/${account}/usage`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ metric: 'api.calls', quantity: 3, ...body }),
    });
    return { status: res.status, body: (await res.json()) as never };
  }

  it('answers the original late on a UTC day that is 23 hours long in the session time zone', async () => {
    const account = await newAccount('spring-forward@example.com');
    // 2026-03-08, when New York moved its clocks forward: 23:30 UTC is still that UTC day.
    const body = { idempotencyKey: 'late-on-dst-day', occurredAt: '2026-03-08T23:30:00.000Z' };
    const first = await report(account, body);
    expect(first.status).toBe(201);
    const retry = await report(account, body);
    expect(retry).toEqual({ status: 200, body: first.body });
  });

  it('says the original is past retention once its day is retired, and refuses another occurredAt with 422', async () => {
    const account = await newAccount('retired-key@example.com');
    const d = utcDay(new Date(), -3);
    const body = { idempotencyKey: 'retired', occurredAt: `${d}T08:00:00.000Z` };
    const first = await report(account, body);
    expect(first.status).toBe(201);
    await db.query(`INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES ($1, $2::date, $2::date + 1, 3, 3)`, [account, d]);
    await db.query(`INSERT INTO usage_days (day, billed_at, rolled_up_at) VALUES ($1, now(), now() + interval '1 second')`, [d]);
    await db.withClient(async (c) => {
      await c.query('BEGIN');
      await c.query('SET LOCAL ROLE ecs_saas_retention');
      expect((await c.query(`SELECT usage_retire_day($1::date) AS outcome`, [d])).rows).toEqual([{ outcome: 'retired' }]);
      await c.query('COMMIT');
    });

    const spent = `Idempotency key "retired" was already used (usage ${first.body.id}, dated ${body.occurredAt}); that usage is past retention and no longer kept`;
    for (const retry of [body, { idempotencyKey: 'retired' }]) {
      const answer = await report(account, retry);
      expect(answer.status).toBe(409);
      expect(answer.body.error).toMatchObject({ code: 'CONFLICT', message: expect.stringContaining(spent) });
    }
    const moved = await report(account, { idempotencyKey: 'retired', occurredAt: `${utcDay(new Date(), -1)}T08:00:00.000Z` });
    expect(moved.status).toBe(422);
    expect(moved.body.error?.code).toBe('IDEMPOTENCY_KEY_REUSED');
  });
});

describe("another account's idempotency key", () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.drop());

  it("refuses a tenant's row for another account alike, whether that account used the key or not", async () => {
    const [own, other] = await Promise.all(['own-keys@example.com', 'other-keys@example.com'].map(async (email) =>
      (await db.query<{ id: string }>(`INSERT INTO accounts (name, email) VALUES ($1, $1) RETURNING id::text`, [email]))[0]!.id));
    await db.query(`INSERT INTO usage (account_id, metric, quantity, idempotency_key) VALUES ($1, 'api.calls', 1, 'used')`, [other]);
    await db.withClient(async (c) => {
      for (const key of ['used', 'never-used']) {
        await c.query('BEGIN');
        await c.query(`SELECT set_config('role', 'ecs_saas_app', true), set_config('app.account_id', $1, true), set_config('app.operator', 'off', true)`, [own]);
        await expect(c.query(`INSERT INTO usage (account_id, metric, quantity, idempotency_key) VALUES ($1, 'api.calls', 1, $2)`, [other, key]), key)
          .rejects.toMatchObject({ code: '42501' });
        await c.query('ROLLBACK');
      }
    });
  });
});
