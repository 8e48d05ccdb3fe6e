/**
 * The database-trouble classification, on errors a real Postgres and a real pg pool raise:
 * each kind of trouble is classified as such, and a caller's own mistake is not.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dbTrouble, isConnectionLost, isPoolTimeout, isTransientDbError } from '../app/db-errors.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db.drop());

/** The error `sql` raises on a fresh connection. */
async function errorOf(sql: string): Promise<unknown> {
  return db.withClient(async (c) => c.query(sql).then(() => undefined, (err: unknown) => err));
}

describe('database trouble', () => {
  it('a read-only transaction (what a writer turned standby answers) is read-only, 25006', async () => {
    const err = await errorOf('BEGIN READ ONLY; CREATE TABLE t (x int)');
    expect((err as { code: string }).code).toBe('25006');
    expect(dbTrouble(err)).toBe('read-only');
    expect(isTransientDbError(err)).toBe(true);
    expect(isConnectionLost(err)).toBe(false);
  });

  it('too many connections is busy, class 53', async () => {
    const role = `limited_${Date.now()}`;
    await db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw' CONNECTION LIMIT 0`);
    try {
      const url = new URL(db.url);
      url.username = role;
      url.password = 'pw';
      const client = new pg.Client({ connectionString: url.toString() });
      const err = await client.connect().then(() => undefined, (e: unknown) => e);
      await client.end().catch(() => undefined);
      expect((err as { code: string }).code).toBe('53300');
      expect(dbTrouble(err)).toBe('busy');
      expect(isTransientDbError(err)).toBe(true);
    } finally {
      await db.query(`DROP ROLE ${role}`);
    }
  });

  it('a statement past statement_timeout timed out, 57014', async () => {
    const err = await errorOf("SET statement_timeout = '20ms'; SELECT pg_sleep(5)");
    expect(dbTrouble(err)).toBe('timed-out');
  });

  it('a terminated backend and a pool with no free connection are connection lost', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1, connectionTimeoutMillis: 1_500 });
    try {
      const held = await pool.connect();
      const waited = await pool.connect().then((c) => c.release(), (e: unknown) => e);
      expect(isPoolTimeout(waited)).toBe(true);
      expect(dbTrouble(waited)).toBe('connection-lost');
      held.on('error', () => undefined);
      const { rows } = await held.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      await db.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
      const err = await held.query('SELECT 1').then(() => undefined, (e: unknown) => e);
      held.release(true);
      expect(isConnectionLost(err)).toBe(true);
      expect(isTransientDbError(err)).toBe(true);
    } finally {
      await pool.end();
    }
  });

  it("a caller's mistake is no database trouble", async () => {
    for (const sql of ["SELECT '2026-01-01T00:00:00+20:00'::timestamptz", 'SELECT 1/0', "SELECT 'x'::int", 'SELECT * FROM missing_table']) {
      const err = await errorOf(sql);
      expect(err, sql).toBeInstanceOf(Error);
      expect(isTransientDbError(err), sql).toBe(false);
    }
    expect(isTransientDbError(new Error('boom'))).toBe(false);
    expect(isTransientDbError(undefined)).toBe(false);
  });
});
