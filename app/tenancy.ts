/**
 * Who a query runs for, enforced by Postgres (app/migrations/*_security.sql).
 *
 * `withIdentity` opens a transaction, switches to the role `ecs_saas_app` (no BYPASSRLS, owns
 * nothing, so every row-level policy binds it) and sets the caller's identity for that
 * transaction only. Whatever SQL runs inside sees only the rows the policies allow: an
 * account's own, or everything for the operator. Both settings end with the transaction, so
 * a pooled connection carries nothing over to its next user, and a connection on which no
 * identity was set sees no tenant rows at all.
 */
import type pg from 'pg';
import type { Pool } from './db.js';

/** The role the policies bind; created by the security migration. */
export const APP_ROLE = 'ecs_saas_app';

export type Identity =
  | { readonly kind: 'operator' }
  | { readonly kind: 'account'; readonly accountId: string };

/** The operator: the admin key's holder, and the jobs and workers. */
export const OPERATOR: Identity = { kind: 'operator' };

export type Queryable = Pick<pg.ClientBase, 'query'>;

/**
 * Runs `fn` in one transaction under `identity`; commits when it resolves, rolls back when it
 * throws. The role and identity go out in a single round trip with the BEGIN.
 */
export async function withIdentity<T>(pool: Pool, identity: Identity, fn: (db: Queryable) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query(preamble(identity, client));
  } catch (err) {
    client.release(err as Error);
    throw err;
  }
  try {
    const result = await fn(client);
    await client.query('COMMIT');
    client.release();
    return result;
  } catch (err) {
    try {
      await client.query('ROLLBACK');
      client.release();
    } catch (rollbackErr) {
      // Still inside the transaction, or broken: never hand it to the next user.
      client.release(rollbackErr as Error);
    }
    throw err;
  }
}

/**
 * A simple-protocol batch (one round trip). The values are literals, not parameters, because
 * the extended protocol takes one statement at a time; an account id is digits only (checked
 * here too) and escapeLiteral quotes it anyway.
 */
function preamble(identity: Identity, client: pg.PoolClient): string {
  if (identity.kind === 'account' && !/^[1-9]\d{0,18}$/.test(identity.accountId)) {
    throw new Error(`not an account id: ${JSON.stringify(identity.accountId)}`);
  }
  const accountId = identity.kind === 'account' ? identity.accountId : '';
  const operator = identity.kind === 'operator' ? 'on' : 'off';
  return `BEGIN; SET LOCAL ROLE ${APP_ROLE}; SELECT set_config('app.account_id', ${client.escapeLiteral(accountId)}, true), set_config('app.operator', ${client.escapeLiteral(operator)}, true)`;
}
