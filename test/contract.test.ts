/**
 * The document and the server agree at the edges a client meets first. Each case is judged
 * by the document (ajv over docs/openapi.json, test/fuzz/contract.ts, the fuzzer's
 * differential check) and sent to the real app on a real Postgres; the two must agree, and
 * the case must land where it is listed. The date patterns are checked against the calendar.
 */
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../app/api.js';
import { ACCOUNT_STATUSES } from '../app/api/accounts.js';
import { DATE_TIME_PATTERN, DAY_PATTERN } from '../app/api/dates.js';
import { MAX_OFFSET_HOURS, MAX_OFFSET_MINUTES, MIN_YEAR } from '../app/instants.js';
import { openApiDocument } from '../app/api/openapi.js';
import { loadConfig } from '../app/config.js';
import { createPool, type Pool } from '../app/db.js';
import { DrainableServer } from '../app/http-server.js';
import { createLogger } from '../app/logger.js';
import { documentVerdict } from './fuzz/contract.js';
import { operationsOf } from './fuzz/requests.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const ops = operationsOf(openApiDocument());
const opAt = (method: string, template: string) => ops.find((o) => o.method === method && o.template === template)!;

describe('the date patterns', () => {
  it(`take every real calendar day from ${MIN_YEAR} to 9999 and no other`, () => {
    const wrong: string[] = [];
    const years = [...Array.from({ length: 2500 - 1960 }, (_, i) => 1960 + i), 2800, 3000, 3200, 4000, 9996, 9999];
    for (const year of years) {
      for (let month = 1; month <= 12; month++) {
        for (let day = 1; day <= 31; day++) {
          const text = `${year}-${String(month).padStart(2, '0')}-${String(day).padStart(2, '0')}`;
          const real = year >= MIN_YEAR && new Date(Date.UTC(year, month - 1, day)).getUTCDate() === day;
          if (DAY_PATTERN.test(text) !== real) wrong.push(text);
          if (DATE_TIME_PATTERN.test(`${text}T00:00:00Z`) !== real) wrong.push(`${text}T00:00:00Z`);
        }
      }
    }
    expect(wrong).toEqual([]);
  });

  it('take offsets to ±18:00, no leap second, any fractional digits, upper-case T and Z only', () => {
    const at = (rest: string) => DATE_TIME_PATTERN.test(`2026-06-01T${rest}`);
    for (const ok of ['12:00:00Z', '12:00:00+18:00', '12:00:00-18:00', '12:00:00+17:59', '12:00:00.1234567Z', '23:59:59-00:00']) expect(at(ok), ok).toBe(true);
    for (const no of ['12:00:00+18:01', '12:00:00-23:59', '12:00:00+1800', '12:00:00', '23:59:60Z', '24:00:00Z', '12:00:00z', '12:00:00.Z', '12:00Z']) expect(at(no), no).toBe(false);
    expect(DATE_TIME_PATTERN.test('2026-06-01t12:00:00Z')).toBe(false);
  });

  it('take a date-time around 1970 exactly when its instant, once the offset is applied, is 1970 or later', () => {
    const two = (n: number) => String(n).padStart(2, '0');
    const near = fc.record({
      day: fc.constantFrom(['1969-12-31', Date.UTC(1969, 11, 31)], ['1970-01-01', 0], ['1970-01-02', Date.UTC(1970, 0, 2)]),
      h: fc.integer({ min: 0, max: 23 }), m: fc.integer({ min: 0, max: 59 }), s: fc.integer({ min: 0, max: 59 }),
      fraction: fc.constantFrom('', '.0', '.999', '.000000001'),
      east: fc.boolean(), oh: fc.integer({ min: 0, max: MAX_OFFSET_HOURS + 1 }), om: fc.integer({ min: 0, max: 59 }),
    });
    fc.assert(fc.property(near, ({ day: [day, midnight], h, m, s, fraction, east, oh, om }) => {
      const text = `${day}T${two(h)}:${two(m)}:${two(s)}${fraction}${east ? '+' : '-'}${two(oh)}:${two(om)}`;
      const offset = oh * 60 + om;
      const utc = midnight + ((h * 60 + m - (east ? offset : -offset)) * 60 + s) * 1_000;
      const taken = offset <= MAX_OFFSET_MINUTES && !day.startsWith('1969') && utc >= 0;
      expect(DATE_TIME_PATTERN.test(text), text).toBe(taken);
    }), { numRuns: Number(process.env.FC_NUM_RUNS ?? 2_000) });
    for (const [text, taken] of [['1970-01-01T00:00:00+01:00', false], ['1970-01-01T00:59:59.999+01:00', false], ['1970-01-01T01:00:00+01:00', true], ['1970-01-01T05:29:59+05:30', false], ['1970-01-01T05:30:00+05:30', true], ['1970-01-01T10:09:59+10:10', false], ['1970-01-01T10:10:00+10:10', true], ['1970-01-01T17:59:59.9+18:00', false], ['1970-01-01T00:00:00-00:00', true]] as const) {
      expect(DATE_TIME_PATTERN.test(text), text).toBe(taken);
    }
  });
});

describe('the document and the server at the edges', () => {
  let db: TestDatabase;
  let pool: Pool;
  let server: DrainableServer;
  let base: string;
  let account: string;
  beforeAll(async () => {
    db = await createTestDatabase();
    const config = loadConfig({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY });
    pool = createPool(config.database, { role: 'test-contract', max: 3, logger: createLogger('silent'), waitMs: 2_000, statementTimeoutMs: 5_000 });
    server = new DrainableServer(createApi({ pool, logger: createLogger('silent'), config, isDraining: () => false }), config);
    base = `http://127.0.0.1:${((await server.listen(0)) as AddressInfo).port}`;
    account = (await send('POST', '/accounts', '', JSON.stringify({ name: 'Edges', email: 'edges@example.com' }))).body.id;
    await db.query(`UPDATE accounts SET created_at = '2026-01-01' WHERE id = $1`, [account]);
  });
  afterAll(async () => {
    await server?.drain();
    await pool?.end();
    await db?.drop();
  });

  async function send(method: string, path: string, query: string, body: string | undefined): Promise<{ status: number; body: any }> {
    const res = await fetch(`${base}${path}${query ? `?${query}` : ''}`, { method, headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body });
    return { status: res.status, body: await res.json() };
  }

  const usage = (occurredAt: string) => JSON.stringify({ metric: 'api_calls', quantity: 1, occurredAt });
  const named = (name: string) => JSON.stringify({ name, email: `n${Math.random().toString(36).slice(2)}@example.com` });
  // [what, method, template, query, body, accepted]
  const CASES: [string, string, string, string, string | undefined, boolean][] = [
    ['a name of spaces', 'POST', '/accounts', '', named('   '), false],
    ['201 characters with a leading space', 'POST', '/accounts', '', named(` ${'x'.repeat(200)}`), false],
    ['200 emoji', 'POST', '/accounts', '', named('\u{1F600}'.repeat(200)), true],
    ['a NUL in a name', 'POST', '/accounts', '', named('a\u0000b'), false],
    ['offset +23:59', 'POST', '/accounts/{id}/usage', '', usage('2026-06-01T00:00:00+23:59'), false],
    ['offset +18:00', 'POST', '/accounts/{id}/usage', '', usage('2026-06-01T00:00:00+18:00'), true],
    ['1969 in the query', 'GET', '/accounts/{id}/usage', `from=${encodeURIComponent('1969-12-31T23:59:59Z')}`, undefined, false],
    ['1970 in +18:00, which is 1969 in UTC', 'GET', '/accounts/{id}/usage', `from=${encodeURIComponent('1970-01-01T00:00:00+18:00')}`, undefined, false],
    ['the epoch in +18:00', 'GET', '/accounts/{id}/usage', `from=${encodeURIComponent('1970-01-01T18:00:00+18:00')}`, undefined, true],
    ['seven fractional digits', 'POST', '/accounts/{id}/usage', '', usage('2026-03-01T23:59:59.9999995Z'), true],
    ['periodStart 2026-02-30', 'POST', '/accounts/{id}/invoices', '', JSON.stringify({ periodStart: '2026-02-30' }), false],
    ['periodStart 2024-02-29', 'POST', '/accounts/{id}/invoices', '', JSON.stringify({ periodStart: '2024-02-29' }), true],
    ['periodStart 9999-12-31 (422: not ended)', 'POST', '/accounts/{id}/invoices', '', JSON.stringify({ periodStart: '9999-12-31' }), true],
    ['an unknown field when minting a key', 'POST', '/accounts/{id}/api-keys', '', JSON.stringify({ x: 1 }), false],
    ['no body when minting a key', 'POST', '/accounts/{id}/api-keys', '', undefined, true],
    ['limit 05', 'GET', '/accounts', 'limit=05', undefined, false],
    ['limit 100', 'GET', '/accounts', 'limit=100', undefined, true],
    ['limit given twice', 'GET', '/accounts', 'limit=5&limit=6', undefined, false],
    ['a parameter the route does not take, twice and with a NUL', 'GET', '/accounts', 'colour=%00&colour=red', undefined, true],
  ];

  it("declares the account states the database's CHECK constraint allows", async () => {
    const rows = await db.query<{ def: string }>(`SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'accounts'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%status%'`);
    expect(rows).toHaveLength(1);
    expect([...rows[0]!.def.matchAll(/'(\w+)'/g)].map((m) => m[1]).sort()).toEqual([...ACCOUNT_STATUSES].sort());
  });

  it.each(CASES)('%s: both accept or both refuse', async (_what, method, template, query, body, accepted) => {
    const path = template.replace('{id}', account);
    const verdict = documentVerdict(opAt(method, template), path, query, body);
    const answer = await send(method, path, query, body);
    expect({ document: verdict.accepts, server: answer.status !== 400 }, JSON.stringify({ verdict, answer })).toEqual({ document: accepted, server: accepted });
  });
});
