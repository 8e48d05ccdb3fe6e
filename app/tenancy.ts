/**
 * Who a query runs for, enforced by Postgres (app/migrations/*_security.sql).
 *
 * Every query of a request runs under the role `ecs_saas_app`, or `ecs_saas_operator` for the
 * operator (no BYPASSRLS, own nothing, so every row-level policy binds them), with the
 * caller's identity set for that transaction only (`set_config('role', ..., true)`, which is
 * `SET LOCAL ROLE`, and `set_config(..., true)`). Whatever SQL runs there sees only the rows
 * the policies allow: an account's own, or everything for the operator. Both settings end
 * with the transaction, so a pooled connection carries nothing over to its next user, and a
 * connection on which no identity was set sees no tenant rows at all.
 *
 * An account key is resolved in the same round trip as the role and the identity: the
 * identity is then "whoever owns this key's hash", looked up by Postgres (api_key_account).
 */
import type pg from 'pg';
import type { Pool } from './db.js';
import { checkin, checkout, type Lease } from './deadline.js';
import { querySpan, tracedQueryable } from './tracing/query-span.js';
import { inSpan, tracingOn } from './tracing/trace.js';

/** The role the policies bind for an account; created by the security migration. */
export const APP_ROLE = 'ecs_saas_app';
/**
 * The operator's role: bound by row-level security too, with policies that let it see every
 * row. Its own role rather than a setting tested on every row, so the planner knows its
 * queries see every row (app/migrations/*_operator-role.sql says what that saves).
 */
export const OPERATOR_ROLE = 'ecs_saas_operator';

/**
 * The roles of the jobs' work, each with only the rights its job needs
 * (app/migrations/*_least-privilege.sql): like the operator's, their policies let them see
 * every row of the tables they work on, and nothing of the others.
 */
export const JOB_ROLES = {
  billing: 'ecs_saas_billing',
  reporting: 'ecs_saas_reporting',
  retention: 'ecs_saas_retention',
  export: 'ecs_saas_export',
} as const;

/** The roles that see every row: the operator's and the jobs'. */
export type OperatorRole = typeof OPERATOR_ROLE | (typeof JOB_ROLES)[keyof typeof JOB_ROLES];

export type Identity =
  | { readonly kind: 'operator'; readonly role: OperatorRole }
  | { readonly kind: 'account'; readonly accountId: string }
  | KeyIdentity;

/** An account known by its API key's hash, until Postgres has matched it to a live key. */
export interface KeyIdentity {
  readonly kind: 'key';
  readonly hash: Buffer;
  /** Set once Postgres has matched the hash to a live key. */
  accountId?: string;
}

/** The operator: the admin key's holder. */
export const OPERATOR: Identity = { kind: 'operator', role: OPERATOR_ROLE };
/** billing-run, and the operator's POST /accounts/:id/invoices: the one writer of invoices. */
export const BILLING: Identity = { kind: 'operator', role: JOB_ROLES.billing };
/** report-aggregation: the one writer of the daily rollups. */
export const REPORTING: Identity = { kind: 'operator', role: JOB_ROLES.reporting };
/** data-cleanup: the one that deletes usage (accounted for) and old job runs. */
export const RETENTION: Identity = { kind: 'operator', role: JOB_ROLES.retention };
/** weekly-export: reads invoices and accounts, writes nothing. */
export const EXPORT: Identity = { kind: 'operator', role: JOB_ROLES.export };

/** A key that matches no live key: unknown, or revoked. */
export class UnknownKeyError extends Error {
  /** What it answers: a caller's mistake, not a failure of the service (app/tracing/trace.ts). */
  readonly status = 401;

  constructor() {
    super('Invalid API key');
    this.name = 'UnknownKeyError';
  }
}

export type Queryable = Pick<pg.ClientBase, 'query'>;

/**
 * Runs `fn` in one transaction under `identity`; commits when it resolves, rolls back when it
 * throws. `lease`: the request's deadline (app/deadline.ts), which may close the connection. BEGIN, the role and the identity go out in one round trip.
 */
export function withIdentity<T>(pool: Pool, identity: Identity, fn: (db: Queryable) => Promise<T>, lease?: Lease): Promise<T> {
  if (!tracingOn()) return inTransaction(pool, identity, fn, lease);
  // The tenancy batch's span: the wait for a connection, the identity, each statement, the commit.
  return inSpan('tenancy transaction', { 'tenancy.identity': identity.kind }, () => inTransaction(pool, identity, (db) => fn(tracedQueryable(db)), lease));
}

async function inTransaction<T>(pool: Pool, identity: Identity, fn: (db: Queryable) => Promise<T>, lease: Lease | undefined): Promise<T> {
  const client = await checkout(pool, lease);
  const known = preparedStatements(client);
  const { sql: identitySql, prepared } = identityStatement(identity, known);
  try {
    const results = (await client.query(`BEGIN; ${identitySql}`)) as unknown as pg.QueryResult[];
    prepared.forEach((name) => known.add(name));
    resolveKey(identity, results.at(-1)!);
  } catch (err) {
    // A PREPARE in a failed batch may or may not have stuck: drop the connection rather than guess.
    if (prepared.length > 0 && !known.has(prepared[0]!)) checkin(client, lease, err as Error);
    else await client.query('ROLLBACK').then(() => checkin(client, lease), (e: Error) => checkin(client, lease, e));
    throw err;
  }
  try {
    const result = await fn(client);
    await client.query('COMMIT');
    checkin(client, lease);
    return result;
  } catch (err) {
    try {
      await client.query('ROLLBACK');
      checkin(client, lease);
    } catch (rollbackErr) {
      // Still inside the transaction, or broken: never hand it to the next user.
      checkin(client, lease, rollbackErr as Error);
    }
    throw err;
  }
}

/**
 * One read-only statement under `identity`, in a single round trip: the role, the identity
 * and the statement go out as one simple-protocol batch, which Postgres runs as one implicit
 * transaction. The statement is prepared once per connection (named after its text) and run
 * with EXECUTE, so its plan, row-level policies included, is not made again on every
 * request; that protocol takes no parameters, so EXECUTE's arguments are quoted literals.
 */
export function queryAs<R extends pg.QueryResultRow>(pool: Pool, identity: Identity, sql: string, params: readonly unknown[], lease?: Lease): Promise<R[]> {
  let name = statementNames.get(sql);
  if (name === undefined) statementNames.set(sql, (name = `tenant_statement_${statementNames.size + 1}`));
  if (!tracingOn()) return queryOnce(pool, identity, sql, name, params, lease);
  const statement = name;
  return querySpan(sql, { 'db.statement.name': statement, 'tenancy.identity': identity.kind }, () => queryOnce<R>(pool, identity, sql, statement, params, lease));
}

async function queryOnce<R extends pg.QueryResultRow>(pool: Pool, identity: Identity, sql: string, name: string, params: readonly unknown[], lease: Lease | undefined): Promise<R[]> {
  const client = await checkout(pool, lease);
  const known = preparedStatements(client);
  const { sql: identitySql, prepared } = identityStatement(identity, known);
  const prepare = known.has(name) ? '' : `PREPARE ${name} AS ${sql}; `;
  const args = params.length ? `(${params.map(literal).join(', ')})` : '';
  let results: pg.QueryResult<R>[];
  try {
    results = (await client.query(`${identitySql}; ${prepare}EXECUTE ${name}${args}`)) as unknown as pg.QueryResult<R>[];
  } catch (err) {
    // Whether the PREPAREs stuck is unknown: drop the connection rather than guess.
    checkin(client, lease, err as Error);
    throw err;
  }
  prepared.forEach((n) => known.add(n));
  known.add(name);
  checkin(client, lease);
  resolveKey(identity, results[prepared.length]!);
  return results.at(-1)!.rows;
}

/** Statement names by SQL text, shared by every connection. */
const statementNames = new Map<string, string>();
/** The statements each connection has prepared. */
const preparedOn = new WeakMap<pg.PoolClient, Set<string>>();

function preparedStatements(client: pg.PoolClient): Set<string> {
  let known = preparedOn.get(client);
  if (known === undefined) preparedOn.set(client, (known = new Set()));
  return known;
}

function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'number' && Number.isFinite(value)) return `'${value}'`;
  if (typeof value === 'string') return escapeLiteral(value);
  throw new TypeError(`queryAs takes strings, finite numbers and null, got ${typeof value}`);
}

/** Postgres's quoting (as pg's Client#escapeLiteral): quotes doubled, backslashes in an E'' string. */
function escapeLiteral(value: string): string {
  const quoted = value.replace(/'/g, "''");
  return value.includes('\\') ? `E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}

/**
 * The role and the identity, as one prepared SELECT per kind of identity: `set_config('role',
 * ..., true)` is `SET LOCAL ROLE` (PostgREST sets its role the same way), so the batch holds
 * one statement that Postgres need not parse and plan on every request, instead of a SET and
 * a SELECT. Its one row says whose account it is. Prepared on each connection on first use.
 */
const IDENTITY_STATEMENTS = {
  key: {
    name: 'tenant_identity_key',
    sql: `PREPARE tenant_identity_key(bytea) AS SELECT set_config('role', '${APP_ROLE}', true), set_config('app.account_id', coalesce(api_key_account($1)::text, ''), true) AS account_id, set_config('app.operator', 'off', true)`,
  },
  account: {
    name: 'tenant_identity_account',
    sql: `PREPARE tenant_identity_account(text) AS SELECT set_config('role', '${APP_ROLE}', true), set_config('app.account_id', $1, true) AS account_id, set_config('app.operator', 'off', true)`,
  },
} as const;

/** The statement of a role that sees every row: `tenant_identity_ecs_saas_operator`, and so on. */
function operatorStatement(role: OperatorRole): { name: string; sql: string } {
  const name = `tenant_identity_${role}`;
  return { name, sql: `PREPARE ${name} AS SELECT set_config('role', '${role}', true), set_config('app.account_id', '', true) AS account_id, set_config('app.operator', 'on', true)` };
}

/** The SQL that sets `identity` on a connection that has prepared `known`, and what it prepares. */
function identityStatement(identity: Identity, known: ReadonlySet<string>): { sql: string; prepared: string[] } {
  const statement = identity.kind === 'operator' ? operatorStatement(identity.role) : IDENTITY_STATEMENTS[identity.kind];
  let args = '';
  if (identity.kind === 'account') {
    if (!/^[1-9]\d{0,18}$/.test(identity.accountId)) throw new Error(`not an account id: ${JSON.stringify(identity.accountId)}`);
    args = `('${identity.accountId}')`;
  } else if (identity.kind === 'key') {
    args = `('\\x${identity.hash.toString('hex')}')`;
  }
  const execute = `EXECUTE ${statement.name}${args}`;
  return known.has(statement.name) ? { sql: execute, prepared: [] } : { sql: `${statement.sql}; ${execute}`, prepared: [statement.name] };
}

function resolveKey(identity: Identity, result: pg.QueryResult): void {
  if (identity.kind !== 'key') return;
  const accountId = (result.rows[0] as { account_id: string }).account_id;
  if (accountId === '') throw new UnknownKeyError();
  identity.accountId = accountId;
}
