/** Per-test databases on the run's Postgres, and the queries tests use to prove nothing leaked. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { APPLICATION_NAME_PREFIX } from '../../app/db.js';

export const TEMPLATE_DATABASE = 'ecs_saas_template';

/**
 * The API's and the jobs' login role in the tests, as in AWS: global-setup creates it once per
 * cluster (roles are per cluster) through the migrate command's own code (app/login-role.ts).
 */
export const TEST_LOGIN_ROLE = { name: 'ecs_saas_login', password: 'test-login-password-0123456789' } as const;

export interface TestDatabase {
  readonly name: string;
  /** As the cluster's superuser: for set-up and checks, and for what runs locally as the owner. */
  readonly url: string;
  /** As the login role (TEST_LOGIN_ROLE), the way the API and the jobs connect in AWS. */
  readonly loginUrl: string;
  /** Runs `fn` with a client of this database, closed afterwards. */
  withClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T>;
  query<R extends pg.QueryResultRow = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<R[]>;
  /** Connections of ours (application_name ecs-saas-backend:*) to this database. */
  ourConnections(): Promise<number>;
  /** Advisory locks held on this database, by anyone. */
  advisoryLocks(): Promise<number>;
  drop(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** `url` with the login role's credentials instead of its own. */
export function asLoginRole(url: string, role: { readonly name: string; readonly password: string } = TEST_LOGIN_ROLE): string {
  const u = new URL(url);
  u.username = role.name;
  u.password = role.password;
  return u.toString();
}

/**
 * A client that survives its session being ended while idle (a restart, pg_terminate_backend,
 * DROP DATABASE ... WITH (FORCE)): pg emits such an error as an 'error' event, which with no
 * listener would crash the test worker. A query in flight rejects with the error itself, and
 * the next query on a dead client rejects too, so nothing is hidden from the test.
 */
export function newClient(config: pg.ClientConfig): pg.Client {
  const client = new pg.Client(config);
  client.on('error', () => {});
  return client;
}

/** `withClient` for the database at `url`: a client of its own per call, closed afterwards. */
export function clientOf(url: string): <T>(fn: (client: pg.Client) => Promise<T>) => Promise<T> {
  return async (fn) => {
    const client = newClient({ connectionString: url, application_name: 'test-helper' });
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end();
    }
  };
}

async function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = newClient({ connectionString: inject('adminDatabaseUrl') });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** A fresh database for one test file; `migrated` copies the migrated template (fast). */
export async function createTestDatabase({ migrated = true }: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}${migrated ? ` TEMPLATE ${TEMPLATE_DATABASE}` : ''}`));
  const url = withDatabase(inject('adminDatabaseUrl'), name);
  const withClient = clientOf(url);
  return {
    name,
    url,
    loginUrl: asLoginRole(url),
    withClient,
    query: (sql, params) => withClient(async (c) => (await c.query(sql, params)).rows),
    ourConnections: () =>
      withAdmin(async (c) => {
        const { rows } = await c.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE $2`,
          [name, `${APPLICATION_NAME_PREFIX}%`],
        );
        return rows[0]!.n;
      }),
    advisoryLocks: () =>
      withAdmin(async (c) => {
        const { rows } = await c.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = $1`,
          [name],
        );
        return rows[0]!.n;
      }),
    drop: () => withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/** Polls `fn` until it returns true or `timeoutMs` passes; returns the last result. */
export async function eventually(fn: () => Promise<boolean>, timeoutMs = 5_000, everyMs = 50): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
