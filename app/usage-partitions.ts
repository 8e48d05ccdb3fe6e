/**
 * `usage`, partitioned by UTC day: the move from the single table, and the partitions made
 * ahead (docs/operations.md, "Usage partitions").
 *
 * The move runs after the migrations (app/migrate.ts), once no session of a release that
 * predates it is connected: that release inserts usage with `ON CONFLICT (account_id,
 * idempotency_key)`, which Postgres cannot serve on a partitioned table. Sessions say their
 * release in `application_name` (SCHEMA_GENERATION, app/db.ts); while an older one is
 * connected, the move waits for the next migrate (the next deploy). It is online:
 *   1. a range check on the table, added NOT VALID (a moment's lock) and then validated (a
 *      scan that lets writes go on): every row is before the cutover, two UTC days ahead;
 *   2. in one transaction, under a lock of at most LOCK_TIMEOUT: the table becomes
 *      `usage_legacy`, a partitioned `usage` takes its name, policies, grants and identity,
 *      and the old table becomes its partition for everything before the cutover, which the
 *      validated check makes a catalog change; an empty old table is dropped instead;
 *   3. the usage summary (a materialized view, which follows the old table) is built anew
 *      beside the old one and swapped in.
 * If step 1 or 2 fails, step 1's check is removed, so no insert ever meets a passed cutover;
 * a lock not granted within LOCK_TIMEOUT (a long query on usage) leaves the move for the next
 * migrate, any other failure fails the migrate command.
 */
import type { Pool, PoolClient } from './db.js';
import { APPLICATION_NAME_PREFIX, SCHEMA_GENERATION, schemaGenerationTag } from './db.js';
import { LOCK_NOT_AVAILABLE } from './db-errors.js';
import type { Logger } from './logger.js';
import { DAY_MS } from '../lib/time-zones.js';

/** Days of partitions made ahead of today (UTC), and behind it, at each migrate and data-cleanup run. */
export const PARTITION_DAYS_AHEAD = 14;
export const PARTITION_DAYS_BEHIND = 7;
/** Longest wait for a lock the move needs; the move is retried at the next migrate. */
const LOCK_TIMEOUT = '5s';
const CUTOVER_CHECK = 'usage_before_partitioning';
/** Tries at taking step 1's check off again, LOCK_TIMEOUT each. */
const REMOVE_TRIES = 12;

export type MoveOutcome = 'partitioned' | 'moved' | 'deferred';

/**
 * Longest wait for another migrate that is moving usage or making its partitions. Past it
 * (a long validation of a large table), this one goes on without: the API and the jobs work
 * on either layout, and the other migrate, or the next one, finishes the move.
 */
export const MOVER_WAIT_MS = 60_000;
/** The movers' advisory lock, as SQL. */
export const MOVER_LOCK = `hashtextextended('ecs-saas-backend:usage-partitions', 0)`;

/** Moves `usage` to daily partitions if it is not yet, then makes the partitions ahead. */
export async function partitionUsage(pool: Pool, logger: Logger, now = new Date(), moverWaitMs = MOVER_WAIT_MS): Promise<MoveOutcome> {
  const client = await pool.connect();
  let failure: Error | undefined;
  try {
    // One mover at a time: replicas migrating together wait for the first, for a while.
    if (!(await takeMoverLock(client, moverWaitMs))) {
      logger.warn(`usage: another migrate has been moving it to daily partitions, or making its partitions, for over ${moverWaitMs} ms; this one goes on without waiting further, and the next migrate checks again`);
      return 'deferred';
    }
    try {
      const outcome = await moveOnce(client, logger, now);
      if (outcome !== 'deferred') await ensurePartitions(client, logger, now);
      return outcome;
    } finally {
      await client.query(`SELECT pg_advisory_unlock(${MOVER_LOCK})`);
    }
  } catch (err) {
    failure = err as Error;
    throw err;
  } finally {
    client.release(failure);
  }
}

/** Waits at most `waitMs` for the movers' advisory lock (lock_timeout bounds an advisory lock's wait too). */
async function takeMoverLock(client: PoolClient, waitMs: number): Promise<boolean> {
  await client.query(`SET lock_timeout = ${Math.max(1, Math.round(waitMs))}`);
  try {
    await client.query(`SELECT pg_advisory_lock(${MOVER_LOCK})`);
    return true;
  } catch (err) {
    if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) return false;
    throw err;
  } finally {
    await client.query(`RESET lock_timeout`);
  }
}

/**
 * Makes the partitions from PARTITION_DAYS_BEHIND days ago to PARTITION_DAYS_AHEAD days ahead,
 * none for a day before `notBefore` (data-cleanup's retention cutoff: a day it would make there
 * it would retire in the same run, an exclusive lock on usage each time for nothing). A day
 * whose locks are not granted within usage_make_partition's lock_timeout (a long query on
 * usage) is skipped, with the days after it, and said in the log: the next run makes them.
 */
export async function ensurePartitions(db: Pick<PoolClient, 'query'>, logger: Logger, now = new Date(), notBefore?: Date): Promise<number> {
  const behind = utcDay(now, -PARTITION_DAYS_BEHIND);
  const cutoff = notBefore === undefined ? behind : utcDay(notBefore, 0);
  // ISO dates compare as strings.
  const first = cutoff > behind ? cutoff : behind;
  const { rows } = await db.query<{ made: number; skipped: string[] }>(
    `SELECT made, skipped::text[] AS skipped FROM usage_ensure_days($1::date, $2::date)`,
    [first, utcDay(now, PARTITION_DAYS_AHEAD)],
  );
  const { made, skipped } = rows[0]!;
  if (skipped.length > 0) {
    logger.warn({ skipped }, `usage partitions of ${skipped.length} day(s) not made (${skipped[0]} to ${skipped.at(-1)}): a lock was not granted in time (a long query on usage); usage for those days goes to usage_default meanwhile, and the next migrate or data-cleanup run makes them and moves it`);
  }
  return made;
}

async function moveOnce(client: PoolClient, logger: Logger, now: Date): Promise<MoveOutcome> {
  if (await isPartitioned(client)) {
    // A move whose last steps failed (a lock wait ran out) finishes here.
    await finishMove(client);
    return 'partitioned';
  }
  const older = await olderSessions(client);
  if (older.length > 0) {
    logger.warn(
      { sessions: older },
      `usage stays one table for now: ${older.length} session(s) of an earlier release are connected (${older.slice(0, 3).map((s) => `pid ${s.pid} ${s.app}`).join(', ')}); it moves to daily partitions at the next migrate, once they are gone`,
    );
    return 'deferred';
  }
  const cutover = utcDay(now, 2);
  const t0 = performance.now();
  const hasRows = (await client.query(`SELECT EXISTS (SELECT FROM usage) AS yes`)).rows[0].yes as boolean;
  try {
    if (hasRows) await addCutoverCheck(client, cutover);
    await swap(client, cutover, hasRows);
  } catch (err) {
    await removeCutoverCheck(client, cutover);
    if ((err as { code?: string }).code !== LOCK_NOT_AVAILABLE) throw err;
    logger.warn(`usage stays one table for now: a lock the move needs was not granted within ${LOCK_TIMEOUT} (a long query on usage); nothing was changed, and the next migrate tries again`);
    return 'deferred';
  }
  await finishMove(client);
  logger.info({ cutover, ms: Math.round(performance.now() - t0) }, `usage moved to daily partitions${hasRows ? `; the former table holds the rows before ${cutover}` : ''}`);
  return 'moved';
}

async function isPartitioned(db: Pick<PoolClient, 'query'>): Promise<boolean> {
  const { rows } = await db.query<{ kind: string }>(`SELECT relkind::text AS kind FROM pg_class WHERE oid = 'usage'::regclass`);
  return rows[0]?.kind === 'p';
}

/** Sessions of this database from a release older than SCHEMA_GENERATION. */
async function olderSessions(db: Pick<PoolClient, 'query'>): Promise<{ pid: number; app: string }[]> {
  const { rows } = await db.query<{ pid: number; app: string }>(
    `SELECT pid, application_name AS app FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND application_name LIKE $1 AND application_name NOT LIKE $2 ORDER BY pid`,
    [`${APPLICATION_NAME_PREFIX}:%`, `%${schemaGenerationTag(SCHEMA_GENERATION)}`],
  );
  return rows;
}

async function addCutoverCheck(client: PoolClient, cutover: string): Promise<void> {
  await client.query(`SET lock_timeout = '${LOCK_TIMEOUT}'`);
  try {
    await client.query(`ALTER TABLE usage DROP CONSTRAINT IF EXISTS ${CUTOVER_CHECK}`);
    // A concurrent build that failed leaves an invalid index, which IF NOT EXISTS would keep.
    const { rows } = await client.query<{ valid: boolean | null }>(`SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('usage_account_id')) AS valid`);
    if (rows[0]!.valid === false) await client.query(`DROP INDEX CONCURRENTLY usage_account_id`);
    await client.query(`ALTER TABLE usage ADD CONSTRAINT ${CUTOVER_CHECK} CHECK (occurred_at < '${cutover}T00:00:00Z') NOT VALID`);
    // Postgres matches the old table's index to the partitioned one's, rather than building it under the lock.
    await client.query(`CREATE INDEX CONCURRENTLY IF NOT EXISTS usage_account_id ON usage (account_id, id)`);
    await client.query(`ALTER TABLE usage VALIDATE CONSTRAINT ${CUTOVER_CHECK}`);
  } finally {
    await client.query(`RESET lock_timeout`);
  }
}

/**
 * Takes step 1's check off a table that did not move, so that no insert ever meets the
 * cutover. It needs the table's lock for a moment: tried for a minute, then the migrate
 * command fails naming what to run.
 */
async function removeCutoverCheck(client: PoolClient, cutover: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const { rows } = await client.query(`SELECT FROM pg_constraint WHERE conrelid = 'usage'::regclass AND conname = $1`, [CUTOVER_CHECK]);
    if (rows.length === 0) return;
    try {
      await client.query(`SET lock_timeout = '${LOCK_TIMEOUT}'`);
      await client.query(`ALTER TABLE usage DROP CONSTRAINT IF EXISTS ${CUTOVER_CHECK}`);
      return;
    } catch (err) {
      if (attempt >= REMOVE_TRIES) {
        throw new Error(`usage still carries the check ${CUTOVER_CHECK} (occurred_at < ${cutover}) after a failed move, and its lock was not granted in ${REMOVE_TRIES} tries (${(err as Error).message}); drop it before ${cutover}, or usage reports fail from then on: ALTER TABLE usage DROP CONSTRAINT ${CUTOVER_CHECK}`);
      }
    } finally {
      await client.query(`RESET lock_timeout`).catch(() => undefined);
    }
  }
}

/** Step 2: the partitioned table takes the old one's place, in one transaction. */
async function swap(client: PoolClient, cutover: string, hasRows: boolean): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
    await client.query(`LOCK TABLE usage IN ACCESS EXCLUSIVE MODE`);
    const policies = await client.query<{ sql: string }>(
      `SELECT format('CREATE POLICY %I ON usage AS %s FOR %s TO %s%s%s', policyname, permissive, cmd,
                     array_to_string(ARRAY(SELECT quote_ident(r) FROM unnest(roles) r), ', '),
                     CASE WHEN qual IS NULL THEN '' ELSE ' USING (' || qual || ')' END,
                     CASE WHEN with_check IS NULL THEN '' ELSE ' WITH CHECK (' || with_check || ')' END) AS sql
       FROM pg_policies WHERE schemaname = 'public' AND tablename = 'usage'`,
    );
    const grants = await client.query<{ grantee: string; privilege: string }>(
      `SELECT g.grantee::regrole::text AS grantee, g.privilege_type AS privilege
       FROM pg_class c, aclexplode(c.relacl) g WHERE c.oid = 'usage'::regclass AND g.grantee <> c.relowner AND g.grantee <> 0`,
    );
    const constraints = await client.query<{ def: string }>(
      `SELECT format('CONSTRAINT %I %s', conname, pg_get_constraintdef(oid)) AS def FROM pg_constraint
       WHERE conrelid = 'usage'::regclass AND contype IN ('c', 'f') AND conname <> $1 ORDER BY conname`,
      [CUTOVER_CHECK],
    );
    const next = Number((await client.query(`SELECT coalesce(max(id), 0) + 1 AS n FROM usage`)).rows[0].n);
    await client.query(`ALTER TABLE usage RENAME TO usage_legacy`);
    for (const [from, to] of [['usage_pkey', 'usage_legacy_pkey'], ['usage_account_id_idempotency_key_key', 'usage_legacy_account_key'], ['usage_account_occurred', 'usage_legacy_account_occurred'], ['usage_occurred', 'usage_legacy_occurred'], ['usage_account_id', 'usage_legacy_account_id']]) {
      await client.query(`ALTER INDEX IF EXISTS ${from} RENAME TO ${to}`);
    }
    await client.query(`ALTER TABLE usage_legacy ALTER COLUMN id DROP IDENTITY`);
    await client.query(
      `CREATE TABLE usage (
         id              bigint      GENERATED ALWAYS AS IDENTITY (START WITH ${next}),
         account_id      bigint      NOT NULL,
         metric          text        NOT NULL,
         quantity        bigint      NOT NULL,
         occurred_at     timestamptz NOT NULL DEFAULT now(),
         idempotency_key text,
         created_at      timestamptz NOT NULL DEFAULT now(),
         ${constraints.rows.map((r) => r.def).join(',\n')}
       ) PARTITION BY RANGE (occurred_at)`,
    );
    await client.query(`CREATE INDEX usage_account_occurred ON usage (account_id, occurred_at)`);
    await client.query(`CREATE INDEX usage_occurred ON usage (occurred_at)`);
    await client.query(`CREATE INDEX usage_account_id ON usage (account_id, id)`);
    if (hasRows) {
      await client.query(`ALTER TABLE usage ATTACH PARTITION usage_legacy FOR VALUES FROM (MINVALUE) TO ('${cutover}T00:00:00Z')`);
      await client.query(`ALTER TABLE usage_legacy DROP CONSTRAINT ${CUTOVER_CHECK}`);
    }
    await client.query(`CREATE TABLE usage_default PARTITION OF usage DEFAULT`);
    await client.query(`ALTER TABLE usage ENABLE ROW LEVEL SECURITY`);
    for (const p of policies.rows) await client.query(p.sql);
    for (const g of grants.rows) {
      await client.query(`GRANT ${g.privilege} ON usage TO ${g.grantee}`);
      // The partitions are reached through usage alone, where its policies apply.
      await client.query(`REVOKE ALL ON usage_legacy FROM ${g.grantee}`);
    }
    await client.query(`CREATE TRIGGER key_guard BEFORE INSERT ON usage FOR EACH ROW EXECUTE FUNCTION usage_key_guard()`);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** Step 3, and what a failed step 3 left: the summary moved to the partitioned table, an empty old table dropped. */
async function finishMove(client: PoolClient): Promise<void> {
  const { rows } = await client.query<{ summary_on_old: boolean; old_alone: boolean }>(
    `SELECT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                    WHERE r.ev_class = 'account_usage_30d'::regclass AND d.refobjid = to_regclass('usage_legacy')) AS summary_on_old,
            to_regclass('usage_legacy') IS NOT NULL AND NOT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass('usage_legacy')) AS old_alone`,
  );
  if (rows[0]!.summary_on_old) await rebuildSummary(client);
  if (rows[0]!.old_alone) await client.query(`DROP TABLE usage_legacy`);
}

/** account_usage_30d reads the old table: a new one is built beside it and swapped in. */
async function rebuildSummary(client: PoolClient): Promise<void> {
  await client.query(`DROP MATERIALIZED VIEW IF EXISTS account_usage_30d_next`);
  const { rows } = await client.query<{ def: string }>(`SELECT pg_get_viewdef('account_usage_30d'::regclass) AS def`);
  const grants = await client.query<{ object: string; grantee: string; privilege: string }>(
    `SELECT c.relname AS object, g.grantee::regrole::text AS grantee, g.privilege_type AS privilege
     FROM pg_class c, aclexplode(c.relacl) g
     WHERE c.oid IN ('account_usage_30d'::regclass, 'tenant_account_usage_30d'::regclass) AND g.grantee <> c.relowner AND g.grantee <> 0`,
  );
  const tenantView = (await client.query<{ def: string }>(`SELECT pg_get_viewdef('tenant_account_usage_30d'::regclass) AS def`)).rows[0]!.def;
  const definition = rows[0]!.def.replace(/\busage_legacy\b/g, 'usage');
  await client.query(`CREATE MATERIALIZED VIEW account_usage_30d_next AS ${definition.replace(/;\s*$/, '')}`);
  await client.query(`CREATE UNIQUE INDEX account_usage_30d_next_account ON account_usage_30d_next (account_id)`);
  await client.query('BEGIN');
  try {
    await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
    await client.query(`DROP VIEW tenant_account_usage_30d`);
    await client.query(`DROP MATERIALIZED VIEW account_usage_30d`);
    await client.query(`ALTER MATERIALIZED VIEW account_usage_30d_next RENAME TO account_usage_30d`);
    await client.query(`ALTER INDEX account_usage_30d_next_account RENAME TO account_usage_30d_account`);
    await client.query(`CREATE VIEW tenant_account_usage_30d WITH (security_barrier) AS ${tenantView.replace(/;\s*$/, '')}`);
    for (const g of grants.rows) await client.query(`GRANT ${g.privilege} ON ${g.object} TO ${g.grantee}`);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** The UTC day `offset` days from `now`, as YYYY-MM-DD. */
export function utcDay(now: Date, offset: number): string {
  return new Date(now.getTime() + offset * DAY_MS).toISOString().slice(0, 10);
}
