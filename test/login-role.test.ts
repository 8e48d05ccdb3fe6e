/**
 * The login role of the API and the jobs (app/login-role.ts): the migrate command creates and
 * updates it; it owns nothing, can create no role, cannot become the owner; and the API (its
 * worker's refresh included) and a job work as it, the way they run in AWS.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { ensureLoginRole } from '../app/login-role.js';
import { createLogger } from '../app/logger.js';
import { asLoginRole, createTestDatabase, eventually, newClient, TEST_LOGIN_ROLE, type TestDatabase } from './helpers/db.js';
import { NIGHTLY_TIME, invoiceCounts, runJob, seed } from './helpers/jobs.js';
import { run, startServer } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();

/** Runs `sql` as `url`'s user; resolves with the (last statement's) rows, or the error Postgres answered. */
async function as(url: string, sql: string): Promise<{ rows?: Record<string, unknown>[]; error?: string }> {
  const client = newClient({ connectionString: url, application_name: 'test-login-role' });
  try {
    await client.connect();
    const result = (await client.query(sql)) as pg.QueryResult | pg.QueryResult[];
    return { rows: (Array.isArray(result) ? result.at(-1)! : result).rows };
  } catch (err) {
    return { error: (err as Error).message };
  } finally {
    await client.end().catch(() => undefined);
  }
}

describe('the migrate command', () => {
  let db: TestDatabase;
  // Roles are per cluster, which every test file shares: this one's own name.
  const role = { name: `t_login_${randomBytes(4).toString('hex')}`, password: `first-${randomBytes(12).toString('hex')}` };
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
  });
  afterAll(async () => {
    await db.drop();
    await db.query(`DROP ROLE IF EXISTS ${role.name}`).catch(() => undefined);
  });

  it('migrates, then creates the login role; a second run with a new password updates it; no password is logged', async () => {
    const env = { DATABASE_URL: db.url, DB_LOGIN_ROLE: role.name, DB_LOGIN_PASSWORD: role.password };
    const first = await run(['migrate'], env);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect(first.logs.map((l) => l.msg)).toContain(`created the login role ${role.name} (member of ecs_saas_runtime; the API and the jobs log in as it)`);
    expect(await as(asLoginRole(db.url, role), 'SELECT current_user AS me')).toEqual({ rows: [{ me: role.name }] });

    const second = { ...role, password: `second-${randomBytes(12).toString('hex')}` };
    const again = await run(['migrate'], { ...env, DB_LOGIN_PASSWORD: second.password });
    expect(again.code, again.stdout + again.stderr).toBe(0);
    expect(again.logs.map((l) => l.msg)).toEqual(expect.arrayContaining(['database schema is up to date', `updated the login role ${role.name} (member of ecs_saas_runtime; the API and the jobs log in as it)`]));
    expect((await as(asLoginRole(db.url, role), 'SELECT 1')).error).toMatch(/password authentication failed/);
    expect(await as(asLoginRole(db.url, second), 'SELECT current_user AS me')).toEqual({ rows: [{ me: role.name }] });
    // Postgres holds a SCRAM verifier, and neither password reached a log line.
    const [stored] = await db.query<{ rolpassword: string }>('SELECT rolpassword FROM pg_authid WHERE rolname = $1', [role.name]);
    expect(stored!.rolpassword).toMatch(/^SCRAM-SHA-256\$4096:/);
    for (const out of [first.stdout, first.stderr, again.stdout, again.stderr]) {
      expect(out).not.toContain(role.password);
      expect(out).not.toContain(second.password);
    }
  });

  it('repairs a tampered login role: its own settings reset, its large object removed, its password set again', async () => {
    const env = { DATABASE_URL: db.url, DB_LOGIN_ROLE: role.name, DB_LOGIN_PASSWORD: role.password };
    const before = await run(['migrate'], env);
    expect(before.code, before.stdout + before.stderr).toBe(0);
    // What Postgres lets any role do to itself: a lasting default that breaks every new connection, a new password.
    const tamper = await as(asLoginRole(db.url, role), `ALTER ROLE ${role.name} SET statement_timeout = '1ms'; ALTER ROLE ${role.name} IN DATABASE ${db.name} SET lock_timeout = '1ms'; ALTER ROLE ${role.name} PASSWORD 'attacker-chosen-password'`);
    expect(tamper.error).toBeUndefined();
    // A large object it owns, as on a server where the migration could not revoke lo_create from PUBLIC.
    await db.query(`SELECT lo_create(0) AS oid`).then(([r]) => db.query(`ALTER LARGE OBJECT ${r!.oid as number} OWNER TO ${role.name}`));

    const repaired = await run(['migrate'], env);
    expect(repaired.code, repaired.stdout + repaired.stderr).toBe(0);
    expect(repaired.logs.map((l) => l.msg)).toEqual(expect.arrayContaining([
      `reset the settings role ${role.name} had given itself (statement_timeout)`,
      `reset the settings role ${role.name} had given itself (lock_timeout) in database ${db.name}`,
      `removed 1 large object(s) the login role had made: nothing of the app's makes one`,
    ]));
    expect(await as(asLoginRole(db.url, role), 'SHOW statement_timeout')).toEqual({ rows: [{ statement_timeout: '0' }] });
    const [left] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_largeobject_metadata WHERE lomowner = $1::regrole`, [role.name]);
    expect(left!.n).toBe(0);
    // The next deploy's migrate and the jobs work as before.
    const next = await run(['migrate'], env);
    expect(next.code, next.stdout + next.stderr).toBe(0);
    const runs = await run(['runs'], { DATABASE_URL: asLoginRole(db.url, role) });
    expect(runs.code, runs.stdout + runs.stderr).toBe(0);
  });

  it('refuses half a login role, naming the variable, with exit code 2', async () => {
    const r = await run(['migrate'], { DATABASE_URL: db.url, DB_LOGIN_ROLE: role.name });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('DB_LOGIN_PASSWORD=(unset): DB_LOGIN_ROLE and DB_LOGIN_PASSWORD go together');
  });

  it('refuses a login role that owns something or holds more than LOGIN, and changes nothing', async () => {
    const owner = `t_owner_${randomBytes(4).toString('hex')}`;
    await db.query(`CREATE ROLE ${owner} LOGIN CREATEROLE`);
    await db.query(`CREATE TABLE ${owner}_table (id int)`);
    await db.query(`ALTER TABLE ${owner}_table OWNER TO ${owner}`);
    try {
      const r = await run(['migrate'], { DATABASE_URL: db.url, DB_LOGIN_ROLE: owner, DB_LOGIN_PASSWORD: role.password });
      expect(r.code).toBe(1);
      expect(r.stdout).toContain(`the login role ${owner} has CREATEROLE and owns 1 object(s); the API and the jobs must log in as a role that owns nothing`);
      const [after] = await db.query<{ member: boolean }>(`SELECT pg_has_role($1, 'ecs_saas_runtime', 'MEMBER') AS member`, [owner]);
      expect(after!.member).toBe(false);
    } finally {
      await db.query(`DROP TABLE ${owner}_table`);
      await db.query(`DROP ROLE ${owner}`);
    }
  });
});

describe('the login role', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('is no superuser, may create no role or database, bypasses no policy, and owns nothing in any database', async () => {
    const [r] = await db.query('SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = $1', [TEST_LOGIN_ROLE.name]);
    expect(r).toEqual({ rolsuper: false, rolcreaterole: false, rolcreatedb: false, rolreplication: false, rolbypassrls: false, rolcanlogin: true });
    const [owned] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_shdepend WHERE refclassid = 'pg_authid'::regclass AND refobjid = (SELECT oid FROM pg_roles WHERE rolname = $1) AND deptype = 'o'`,
      [TEST_LOGIN_ROLE.name],
    );
    expect(owned!.n).toBe(0);
  });

  it('cannot create a role, a table or a database, become the owner, or drop or empty a table', async () => {
    const [{ owner }] = (await db.query<{ owner: string }>(`SELECT tableowner AS owner FROM pg_tables WHERE tablename = 'usage'`)) as [{ owner: string }];
    const url = db.loginUrl;
    expect((await as(url, 'CREATE ROLE t_escalate LOGIN SUPERUSER')).error).toMatch(/permission denied to create role/);
    expect((await as(url, 'CREATE TABLE t_mine (id int)')).error).toMatch(/permission denied for schema public/);
    expect((await as(url, 'CREATE DATABASE t_mine')).error).toMatch(/permission denied to create database/);
    expect((await as(url, `SET ROLE ${owner}`)).error).toMatch(/permission denied to set role/);
    expect((await as(url, 'DROP TABLE usage')).error).toMatch(/must be owner of table usage/);
    expect((await as(url, 'TRUNCATE job_runs')).error).toMatch(/permission denied for table job_runs/);
    expect((await as(url, 'ALTER TABLE usage DISABLE ROW LEVEL SECURITY')).error).toMatch(/must be owner of table usage/);
    // What it is for: SET ROLE to the roles the policies bind.
    expect(await as(url, 'SET ROLE ecs_saas_operator; SELECT current_user AS me')).toMatchObject({ rows: [{ me: 'ecs_saas_operator' }] });
  });

  it('runs billing-run: every active account invoiced, exit 0', async () => {
    await seed(db, 30);
    const r = await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const counts = await invoiceCounts(db);
    expect(counts.invoices).toBe(counts.activeAccounts);
    expect(counts.activeAccounts).toBeGreaterThan(0);
    const [run] = await db.query<{ status: string }>(`SELECT status FROM job_runs WHERE job = 'billing-run' ORDER BY id DESC LIMIT 1`);
    expect(run!.status).toBe('succeeded');
  });

  it('serves the API with MIGRATE_ON_START=false, and its worker refreshes the usage summary it does not own', async () => {
    const server = await startServer({
      DATABASE_URL: db.loginUrl, MIGRATE_ON_START: 'false', ADMIN_API_KEY: ADMIN_KEY, USAGE_SUMMARY_REFRESH_MS: '200', SHUTDOWN_TIMEOUT_MS: '5000',
    });
    try {
      const call = async (method: string, path: string, body?: unknown) => {
        const res = await fetch(`${server.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(body ? { 'content-type': 'application/json' } : {}) },
          body: body ? JSON.stringify(body) : undefined,
        });
        return { status: res.status, body: await res.json() as any };
      };
      expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
      const account = await call('POST', '/accounts', { name: 'Login role', email: `login-${randomBytes(4).toString('hex')}@example.com` });
      expect(account.status).toBe(201);
      const key = await call('POST', `/accounts/${account.body.id}/api-keys`);
      expect(key.status).toBe(201);
      const usage = await fetch(`${server.url}/accounts/${account.body.id}/usage`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key.body.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ metric: 'api_calls', quantity: 7 }),
      });
      expect(usage.status).toBe(201);
      // The worker's REFRESH runs as the login role (MAINTAIN on the view, no ownership).
      const refreshed = await eventually(async () => (await call('GET', `/accounts/${account.body.id}`)).body.usage30d?.quantity === '7', 30_000, 200);
      expect(refreshed).toBe(true);
      expect(server.logs.filter((l) => /permission denied/.test(JSON.stringify(l)))).toEqual([]);
    } finally {
      server.kill('SIGTERM');
      expect((await server.exited).code).toBe(0);
    }
  });

  it('is created by the same function in-process, and refuses the user that migrates', async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const [{ me }] = (await client.query<{ me: string }>('SELECT current_user AS me')).rows as [{ me: string }];
      await expect(ensureLoginRole(client, { name: me, password: TEST_LOGIN_ROLE.password }, createLogger('silent'))).rejects.toThrow(`the login role ${me} is the user that migrates`);
      await expect(ensureLoginRole(client, TEST_LOGIN_ROLE, createLogger('silent'))).resolves.toBe('updated');
    } finally {
      await client.end();
    }
  });
});
