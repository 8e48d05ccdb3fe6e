/**
 * A database that is shutting down, made for real: Postgres's smart shutdown (SIGTERM to the
 * postmaster) lets the sessions open go on and refuses every new connection with SQLSTATE
 * 57P03, "the database system is shutting down", as an RDS instance does while it stops for a
 * reboot or a failover. The API must answer 503 with Retry-After, never 500.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dbTrouble } from '../app/db-errors.js';
import { startApi } from './helpers/api.js';
import { startOwnPostgres, type OwnPostgres } from './helpers/own-postgres.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
let own: OwnPostgres;
beforeAll(async () => {
  own = await startOwnPostgres();
});
afterAll(() => own.destroy());

describe('a database shutting down (57P03)', () => {
  it('answers 503 with Retry-After to keyed and admin requests while new connections are refused', async () => {
    const api = await startApi({ DATABASE_URL: own.url, ADMIN_API_KEY: ADMIN_KEY }, { max: 3 });
    const { base } = api;
    // The session that keeps the smart shutdown waiting, so that Postgres stays up and refusing.
    const held = new pg.Client({ connectionString: own.url });
    held.on('error', () => {});
    await held.connect();
    try {
      const { rows } = await held.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const postmaster = Number(/^PPid:\s+(\d+)$/m.exec(readFileSync(`/proc/${rows[0]!.pid}/status`, 'utf8'))![1]);
      process.kill(postmaster, 'SIGTERM');
      // A new connection is refused from now on; the pool of the API has none open yet.
      const refused = await new pg.Client({ connectionString: own.url }).connect().then(() => undefined, (e: unknown) => e);
      expect((refused as { code?: string }).code).toBe('57P03');
      expect(dbTrouble(refused)).toBe('connection-lost');
      for (const [key, method, path] of [[ADMIN_KEY, 'GET', '/accounts'], [ADMIN_KEY, 'POST', '/accounts'], [`sbk_${'Q'.repeat(43)}`, 'GET', '/accounts/1']] as const) {
        const r = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: method === 'POST' ? JSON.stringify({ name: 'A', email: 'a@example.com' }) : undefined });
        expect(r.status, `${method} ${path}`).toBe(503);
        expect(r.headers.get('retry-after')).toBe('1');
        expect(((await r.json()) as { error: { code: string } }).error.code).toBe('UNAVAILABLE');
      }
    } finally {
      await api.stop();
      await held.end().catch(() => undefined);
    }
  });
});
