/**
 * Migrations under concurrency, lock keys, and the local launcher behind `npm start`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LOCK_NAMESPACE, lockKey } from '../app/lock.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { run, start } from './helpers/process.js';

const dbs: TestDatabase[] = [];
afterAll(async () => {
  await Promise.all(dbs.map((d) => d.drop()));
});

describe('migrations', () => {
  it('applies each migration once when three replicas start together', async () => {
    const db = await createTestDatabase({ migrated: false });
    dbs.push(db);
    const results = await Promise.all([1, 2, 3].map(() => run(['migrate'], { DATABASE_URL: db.url })));
    expect(results.map((r) => r.code)).toEqual([0, 0, 0]);
    const applied = results.map((r) => (r.logs.find((l) => Array.isArray(l.applied))?.applied as string[]) ?? []);
    // One replica applied everything; the others waited on the lock and found nothing to do.
    expect(applied.filter((a) => a.length > 0)).toHaveLength(1);
    const rows = await db.query<{ name: string; n: number }>('SELECT name, count(*)::int AS n FROM pgmigrations GROUP BY name');
    expect(rows.length).toBe(applied.find((a) => a.length > 0)!.length);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    expect(await db.advisoryLocks()).toBe(0);
  });
});

describe('MIGRATE_ON_START', () => {
  it('false: the server listens without migrating (in AWS the deploy\'s migrations task did it)', async () => {
    const db = await createTestDatabase({ migrated: false });
    dbs.push(db);
    const server = start([], { DATABASE_URL: db.url, PORT: '0', MIGRATE_ON_START: 'false', ENABLE_WORKERS: 'false' });
    try {
      await server.waitForLog((l) => /^listening on port/.test(l.msg), 30_000);
      expect(server.logs.some((l) => /MIGRATE_ON_START=false: not migrating/.test(l.msg))).toBe(true);
      expect(await db.query<{ t: string | null }>(`SELECT to_regclass('public.pgmigrations')::text AS t`)).toEqual([{ t: null }]);
    } finally {
      server.kill('SIGTERM');
      await server.exited;
    }
  });
});

describe('advisory lock keys', () => {
  it('are stable, namespaced 64-bit integers, distinct across kinds of name', () => {
    expect(lockKey('worker:usage-summary')).toBe(lockKey('worker:usage-summary'));
    expect(BigInt(lockKey('worker:usage-summary'))).toBeGreaterThanOrEqual(-(2n ** 63n));
    expect(BigInt(lockKey('worker:usage-summary'))).toBeLessThan(2n ** 63n);
    const names = ['worker:billing-run', 'job:billing-run', 'run:billing-run@2026-01-01T00:00:00.000Z'];
    expect(new Set(names.map(lockKey)).size).toBe(3);
    expect(LOCK_NAMESPACE).toBe('ecs-saas-backend:');
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

describe('npm start (the local launcher)', () => {
  it('starts its own Postgres, serves, and on Ctrl-C stops the API and then Postgres', async () => {
    const dataDir = mkdtempSync(path.resolve('.data/launcher-'));
    const [pgPort, apiPort] = [await freePort(), await freePort()];
    const child = spawn(process.execPath, ['dist/app/dev/local.js'], {
      detached: true, // its own process group, like a terminal's foreground job
      env: { PATH: process.env.PATH, PORT: String(apiPort), LOCAL_PG_PORT: String(pgPort), LOCAL_PG_DATA_DIR: dataDir, LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout!.on('data', (c) => (out += c));
    child.stderr!.on('data', (c) => (out += c));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      for (let i = 0; i < 300 && !out.includes('listening on port'); i++) await new Promise((r) => setTimeout(r, 100));
      expect(out).toContain('local Postgres ready');
      expect((await fetch(`http://127.0.0.1:${apiPort}/readyz`)).status).toBe(200);
      // It prints the development admin key it gave the API, so the docs' curl examples work as pasted.
      const key = /development admin key \(from \.data\/admin-api-key\): (\S+)/.exec(out)?.[1];
      expect(key).toBe(readFileSync('.data/admin-api-key', 'utf8').trim());
      expect((await fetch(`http://127.0.0.1:${apiPort}/accounts`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
      expect((await fetch(`http://127.0.0.1:${apiPort}/accounts`)).status).toBe(401);

      process.kill(-child.pid!, 'SIGINT'); // what Ctrl-C does: SIGINT to the whole foreground group
      expect(await exited).toBe(0);
      expect(out).toMatch(/received SIGINT; shutting down/);
      // Postgres is gone too: its port refuses connections.
      const refused = await new Promise<boolean>((resolve) => {
        const s = net.connect(pgPort, '127.0.0.1');
        s.once('connect', () => (s.destroy(), resolve(false)));
        s.once('error', () => resolve(true));
      });
      expect(refused).toBe(true);
    } finally {
      if (child.exitCode === null) process.kill(-child.pid!, 'SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
