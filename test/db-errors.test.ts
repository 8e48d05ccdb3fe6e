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

  it('a connection the database refuses at login is connection lost: a wrong password (28P01), a database not accepting connections (55000), none by that name (3D000)', async () => {
    const role = `refused_${Date.now()}`;
    const dbName = `closed_${Date.now()}`;
    await db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`);
    await db.query(`CREATE DATABASE ${dbName}`);
    await db.query(`ALTER DATABASE ${dbName} ALLOW_CONNECTIONS false`);
    const loginError = async (user: string, password: string, database: string) => {
      const url = new URL(db.url);
      Object.assign(url, { username: user, password, pathname: `/${database}` });
      const client = new pg.Client({ connectionString: url.toString() });
      const err = await client.connect().then(() => undefined, (e: unknown) => e);
      await client.end().catch(() => undefined);
      return err as { code: string };
    };
    try {
      const own = new URL(db.url);
      const cases = [
        [await loginError(role, 'wrong', own.pathname.slice(1)), '28P01'],
        [await loginError(decodeURIComponent(own.username), decodeURIComponent(own.password), dbName), '55000'],
        [await loginError(decodeURIComponent(own.username), decodeURIComponent(own.password), `${dbName}_missing`), '3D000'],
      ] as const;
      for (const [err, code] of cases) {
        expect(err.code).toBe(code);
        expect(dbTrouble(err), code).toBe('connection-lost');
      }
    } finally {
      await db.query(`DROP DATABASE ${dbName}`);
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
    // The last: 55000 raised by a statement (currval before nextval), not by a login.
    for (const sql of ["SELECT '2026-01-01T00:00:00+20:00'::timestamptz", 'SELECT 1/0', "SELECT 'x'::int", 'SELECT * FROM missing_table', 'CREATE TEMP SEQUENCE s; SELECT currval(\'s\')']) {
      const err = await errorOf(sql);
      expect(err, sql).toBeInstanceOf(Error);
      expect(isTransientDbError(err), sql).toBe(false);
    }
    expect(((await errorOf("CREATE TEMP SEQUENCE s2; SELECT currval('s2')")) as { code: string }).code).toBe('55000');
    expect(isTransientDbError(new Error('boom'))).toBe(false);
    expect(isTransientDbError(undefined)).toBe(false);
  });
});
