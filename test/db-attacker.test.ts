/**
 * The database as an attacker finds it: connected as the login role of the API and the jobs
 * (as a SQL injection or a leaked login secret would be), and as each role it may SET ROLE to,
 * every statement that would break the API's promises or reach further is refused with its
 * SQLSTATE. Each attempt runs in a transaction that is rolled back, with the operator's
 * setting and an account's identity set, the widest an attacker could choose. The table in
 * docs/security.md ("Least privilege") is this file's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { MAX_UNIT_PRICE_CENTS, MAX_USAGE_QUANTITY } from '../app/billing.js';
import { JOB_ROLES, OPERATOR_ROLE, APP_ROLE } from '../app/tenancy.js';
import { createTestDatabase, newClient, TEST_LOGIN_ROLE, type TestDatabase } from './helpers/db.js';
import { run } from './helpers/process.js';

const LOGIN = TEST_LOGIN_ROLE.name;
/** Every role the login role may act as: itself, and those it may SET ROLE to. */
const ROLES = [LOGIN, APP_ROLE, OPERATOR_ROLE, ...Object.values(JOB_ROLES)] as const;
type Role = (typeof ROLES)[number];

/** What an attempt came to: a SQLSTATE, `01007` (a GRANT that granted nothing), or `ok:<rows>`. */
type Outcome = string;
const DENIED = '42501';
const INVARIANT = '23000';

interface Attack {
  readonly what: string;
  readonly sql: string;
  /** The outcome for the roles named; every other role gets DENIED. */
  readonly except?: Partial<Record<Role, Outcome>>;
  /** Run outside a transaction block (CREATE DATABASE cannot run in one). */
  readonly outside?: true;
}

/** The roles that hold SELECT on invoices: a GRANT of it without the grant option grants nothing (a warning). */
const READ_INVOICES = { [APP_ROLE]: '01007', [OPERATOR_ROLE]: '01007', [JOB_ROLES.billing]: '01007', [JOB_ROLES.retention]: '01007', [JOB_ROLES.export]: '01007' };

function attacks(ids: { account: string; invoicedDay: string; owner: string }): Attack[] {
  const usageOn = (at: string, quantity = 1) => `INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES (${ids.account}, 'api_calls', ${quantity}, '${at}')`;
  return [
    // What the adversary did.
    { what: 'own a large object', sql: 'SELECT lo_create(0)' },
    { what: 'set a lasting default on the login role', sql: `ALTER ROLE ${LOGIN} SET statement_timeout = '1ms'`, except: { [LOGIN]: 'ok:0' } },
    { what: 'change the login role\'s password', sql: `ALTER ROLE ${LOGIN} PASSWORD 'attacker-chosen-password'`, except: { [LOGIN]: 'ok:0' } },
    { what: 'create a temporary table', sql: 'CREATE TEMP TABLE t_attack (id int)' },
    { what: 'un-revoke keys', sql: 'UPDATE api_keys SET revoked_at = NULL WHERE revoked_at IS NOT NULL', except: { [APP_ROLE]: INVARIANT, [OPERATOR_ROLE]: INVARIANT } },
    { what: 'mint a key', sql: `INSERT INTO api_keys (account_id, prefix, key_hash) VALUES (${ids.account}, 'sbk_z', sha256('minted'::bytea))`, except: { [OPERATOR_ROLE]: 'ok:1' } },
    { what: 'insert an invoice with any amount', sql: `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES (${ids.account}, '2025-01-01', '2025-01-02', 1, 999999999)` },
    { what: 'insert usage on an invoiced day', sql: usageOn(`${ids.invoicedDay}T12:00:00Z`) },
    { what: 'insert usage before the account existed', sql: usageOn('1999-06-01T00:00:00Z') },
    { what: 'insert usage past its range', sql: usageOn(new Date().toISOString(), MAX_USAGE_QUANTITY + 1) },
    { what: 'create an account past the price range', sql: `INSERT INTO accounts (name, email, unit_price_cents) VALUES ('x', 'x@example.com', ${MAX_UNIT_PRICE_CENTS + 1})` },
    { what: 'delete an account\'s usage', sql: `DELETE FROM usage WHERE account_id = ${ids.account}`, except: { [JOB_ROLES.retention]: 'ok:0' } },
    { what: 'empty job_runs', sql: 'DELETE FROM job_runs', except: { [JOB_ROLES.retention]: 'ok:0' } },
    { what: 'truncate job_runs', sql: 'TRUNCATE job_runs' },
    { what: 'rewrite a finished job run', sql: `UPDATE job_runs SET status = 'failed', error = 'x' WHERE status <> 'running'`, except: { [LOGIN]: INVARIANT } },
    { what: 'change an invoice', sql: 'UPDATE invoices SET amount_cents = 0' },
    { what: 'delete invoices', sql: 'DELETE FROM invoices' },
    // DDL and DCL.
    { what: 'create a table', sql: 'CREATE TABLE public.t_attack (id int)' },
    { what: 'create a schema', sql: 'CREATE SCHEMA t_attack' },
    { what: 'create a function', sql: 'CREATE FUNCTION public.t_attack() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$' },
    { what: 'create a role', sql: 'CREATE ROLE t_attack LOGIN SUPERUSER' },
    { what: 'create a database', sql: 'CREATE DATABASE t_attack', outside: true },
    { what: 'grant a table right onward', sql: 'GRANT SELECT ON invoices TO PUBLIC', except: READ_INVOICES },
    { what: 'grant a role onward', sql: `GRANT ${OPERATOR_ROLE} TO ${JOB_ROLES.export}` },
    { what: 'give a role a right', sql: `ALTER ROLE ${OPERATOR_ROLE} BYPASSRLS` },
    { what: 'give itself a right', sql: `ALTER ROLE ${LOGIN} CREATEROLE` },
    // Postgres lets any role set its own defaults; a NOLOGIN role's never apply (SET ROLE reads none), and migrate resets them all.
    { what: 'set a default on the role it is', sql: `ALTER ROLE CURRENT_USER SET search_path = 'pg_temp'`, except: Object.fromEntries(ROLES.map((r) => [r, 'ok:0'])) },
    { what: 'set a default on another role', sql: `ALTER ROLE ecs_saas_runtime SET statement_timeout = '1ms'` },
    { what: 'SET ROLE to the owner', sql: `SET LOCAL ROLE ${ids.owner}` },
    { what: 'SET ROLE to a role that reads server files', sql: 'SET LOCAL ROLE pg_read_server_files' },
    { what: 'SET ROLE to a role that runs programs', sql: 'SET LOCAL ROLE pg_execute_server_program' },
    { what: 'become the owner by session authorization', sql: `SET SESSION AUTHORIZATION ${ids.owner}` },
    { what: 'drop a table', sql: 'DROP TABLE invoices' },
    { what: 'turn row-level security off', sql: 'ALTER TABLE usage DISABLE ROW LEVEL SECURITY' },
    { what: 'turn a trigger off', sql: 'ALTER TABLE invoices DISABLE TRIGGER immutable' },
    { what: 'COPY a table to a server file', sql: `COPY invoices TO '/tmp/t_attack.csv'` },
    { what: 'COPY from a program', sql: `COPY job_runs (job) FROM PROGRAM 'id'` },
    // Usage's partitions and what retiring them relies on (app/usage-partitions.ts).
    { what: 'read a day\'s partition by its name', sql: `SELECT * FROM usage_d${ids.invoicedDay.replaceAll('-', '')}` },
    { what: 'write the default partition past the policies', sql: `INSERT INTO usage_default (account_id, metric, quantity) VALUES (${ids.account}, 'api_calls', 1)` },
    { what: 'forge an idempotency key', sql: `INSERT INTO usage_keys (account_id, idempotency_key, occurred_at, usage_id) VALUES (${ids.account}, 'k', now(), 0)` },
    { what: 'forget the idempotency keys', sql: 'DELETE FROM usage_keys' },
    { what: 'turn the key guard off', sql: 'ALTER TABLE usage DISABLE TRIGGER key_guard' },
    { what: 'detach a partition', sql: 'ALTER TABLE usage DETACH PARTITION usage_default' },
    { what: 'mark a day billed', sql: `INSERT INTO usage_days (day, billed_at) VALUES ('2020-01-01', now())`, except: { [JOB_ROLES.billing]: 'ok:1' } },
    { what: 'mark a day retired', sql: `UPDATE usage_days SET retired_at = now()` },
    { what: 'read the usage no invoice counted', sql: 'SELECT * FROM usage_unbilled' },
    { what: 'erase the status history retiring reads', sql: 'DELETE FROM account_status_changes' },
    { what: 'retire a day that is not accounted for', sql: `SELECT usage_retire_day('${ids.invoicedDay}')`, except: { [JOB_ROLES.retention]: 'ok:1' } },
    { what: 'make partitions', sql: `SELECT usage_ensure_partitions(current_date, current_date + 1)`, except: { [JOB_ROLES.retention]: 'ok:1' } },
    { what: 'make a partition of any table', sql: `SELECT usage_make_partition('invoices', 't_attack', now(), now())` },
    { what: 'read a server file', sql: `SELECT pg_read_file('postgresql.conf')` },
    { what: 'list a server directory', sql: `SELECT pg_ls_dir('.')` },
    { what: 'import a server file as a large object', sql: `SELECT lo_import('/etc/hostname')` },
  ];
}

describe('an attacker connected as the login role', () => {
  let db: TestDatabase;
  let client: pg.Client;
  let ids: { account: string; invoicedDay: string; owner: string };

  beforeAll(async () => {
    // (The migrate command below runs in a process of its own.)
    // Migrated by the migrate command itself: the database's own rights (TEMPORARY) are not
    // copied from the migrated template.
    db = await createTestDatabase({ migrated: false });
    const migrated = await run(['migrate'], { DATABASE_URL: db.url, DB_LOGIN_ROLE: LOGIN, DB_LOGIN_PASSWORD: TEST_LOGIN_ROLE.password });
    expect(migrated.code, migrated.stdout + migrated.stderr).toBe(0);
    // As the owner: an account ten days old with a revoked key, an invoiced day, a rolled-up
    // day, a running and a just-finished job run.
    const [seeded] = await db.query<{ account: string; invoiced_day: string; owner: string }>(
      `WITH a AS (INSERT INTO accounts (name, email, unit_price_cents, created_at) VALUES ('victim', 'victim@example.com', 2, now() - interval '10 days') RETURNING id),
            k AS (INSERT INTO api_keys (account_id, prefix, key_hash, revoked_at) SELECT id, 'sbk_x', sha256('leaked'::bytea), now() FROM a),
            i AS (INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents)
                  SELECT id, current_date - 3, current_date - 2, 5, 10 FROM a)
       SELECT (SELECT id::text FROM a) AS account, (current_date - 3)::text AS invoiced_day, current_user AS owner`,
    );
    ids = { account: seeded!.account, invoicedDay: seeded!.invoiced_day, owner: seeded!.owner };
    await db.query(`INSERT INTO usage (account_id, metric, quantity, occurred_at) VALUES ($1, 'api_calls', 5, $2::date + time '12:00' AT TIME ZONE 'UTC'), ($1, 'api_calls', 7, $2::date - 1 + time '12:00' AT TIME ZONE 'UTC')`, [ids.account, ids.invoicedDay]);
    await db.query(`INSERT INTO job_runs (job, scheduled_time, status, ran_on) VALUES ('billing-run', now(), 'running', 'test')`);
    await db.query(`INSERT INTO job_runs (job, scheduled_time, status, finished_at, ran_on) VALUES ('billing-run', now() - interval '1 day', 'succeeded', now(), 'test')`);
    client = newClient({ connectionString: db.loginUrl, application_name: 'test-attacker' });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await db?.drop();
  }, 60_000);

  /** Runs `sql` as `role` in a transaction it rolls back (`outside` one, then resets the role); what came of it. */
  async function attempt(role: Role, sql: string, outside = false): Promise<Outcome> {
    const warnings: string[] = [];
    const onNotice = (n: { code?: string }) => n.code && warnings.push(n.code);
    client.on('notice', onNotice);
    try {
      await client.query(outside ? 'RESET ROLE' : 'BEGIN');
      if (role !== LOGIN) await client.query(`SET ${outside ? '' : 'LOCAL '}ROLE ${role}`);
      await client.query(`SELECT set_config('app.operator', 'on', true), set_config('app.account_id', $1, true)`, [ids.account]);
      const r = await client.query(sql);
      return warnings.includes('01007') ? '01007' : `ok:${r.rowCount ?? 0}`;
    } catch (err) {
      return (err as { code?: string }).code ?? String(err);
    } finally {
      client.off('notice', onNotice);
      await client.query(outside ? 'RESET ROLE' : 'ROLLBACK');
    }
  }

  it('reaches exactly the roles of its work, none of which owns, creates or bypasses anything', async () => {
    const rows = await db.query<{ rolname: string }>(
      `SELECT rolname FROM pg_roles WHERE pg_has_role($1, oid, 'SET') ORDER BY 1`, [LOGIN],
    );
    expect(rows.map((r) => r.rolname)).toEqual([...ROLES, 'ecs_saas_runtime'].sort());
    const [excess] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_roles r WHERE pg_has_role($1, r.oid, 'SET')
         AND (r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolbypassrls OR r.rolreplication
              OR EXISTS (SELECT 1 FROM pg_shdepend d WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid AND d.deptype = 'o'))`,
      [LOGIN],
    );
    expect(excess!.n).toBe(0);
  });

  it('is refused every attack, as every role it can reach, with the expected SQLSTATE', async () => {
    const got: Record<string, Record<string, Outcome>> = {};
    const want: Record<string, Record<string, Outcome>> = {};
    for (const a of attacks(ids)) {
      got[a.what] = {};
      want[a.what] = {};
      for (const role of ROLES) {
        got[a.what]![role] = await attempt(role, a.sql, a.outside);
        want[a.what]![role] = a.except?.[role] ?? DENIED;
      }
    }
    expect(got).toEqual(want);
  });

  it('still does its work: each role the statements of its job', async () => {
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    const today = new Date().toISOString().slice(0, 10);
    // Billing: a correct invoice for a day that has ended; the operator and the account: usage now.
    expect(await attempt(JOB_ROLES.billing, `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES (${ids.account}, '${yesterday}', '${today}', 3, 6)`)).toBe('ok:1');
    // An invoice for a day that has not ended, or of a negative amount, is refused.
    expect(await attempt(JOB_ROLES.billing, `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES (${ids.account}, '${today}', '${today}'::date + 1, 3, 6)`)).toBe(DENIED);
    expect(await attempt(JOB_ROLES.billing, `INSERT INTO invoices (account_id, period_start, period_end, quantity, amount_cents) VALUES (${ids.account}, '${yesterday}', '${today}', 3, -6)`)).toBe(DENIED);
    for (const role of [OPERATOR_ROLE, APP_ROLE] as const) {
      expect(await attempt(role, `INSERT INTO usage (account_id, metric, quantity) VALUES (${ids.account}, 'api_calls', ${MAX_USAGE_QUANTITY})`)).toBe('ok:1');
    }
    // Retention: usage of an invoiced, rolled-up day; the account's other usage stays.
    await db.query(`INSERT INTO usage_daily (day, account_id, metric, quantity, events) VALUES ($1, $2, 'api_calls', 5, 1)`, [ids.invoicedDay, ids.account]);
    expect(await attempt(JOB_ROLES.retention, `DELETE FROM usage WHERE account_id = ${ids.account}`)).toBe('ok:1');
    // The operator revokes a live key; revoking it again changes nothing.
    await db.query(`INSERT INTO api_keys (account_id, prefix, key_hash) VALUES ($1, 'sbk_y', sha256('live'::bytea))`, [ids.account]);
    expect(await attempt(OPERATOR_ROLE, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE account_id = ${ids.account}`)).toBe('ok:2');
  });

  it('the invariants that are triggers bind the tables\' owner too', async () => {
    await expect(db.query('UPDATE invoices SET amount_cents = 0')).rejects.toMatchObject({ code: INVARIANT });
    await expect(db.query('UPDATE api_keys SET revoked_at = NULL')).rejects.toMatchObject({ code: INVARIANT });
    await expect(db.query(`UPDATE job_runs SET error = 'x' WHERE status = 'succeeded'`)).rejects.toMatchObject({ code: INVARIANT });
  });
});
