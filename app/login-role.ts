/**
 * The login role of the API and the jobs (DB_LOGIN_ROLE), created or brought up to date by
 * the migrate command once the migrations are applied, as the user that migrates.
 *
 * The role can log in and do nothing else on its own: no SUPERUSER, CREATEROLE, CREATEDB,
 * REPLICATION or BYPASSRLS, and it owns nothing. Its rights all come from the group
 * ecs_saas_runtime (app/migrations/*_runtime-role.sql), of which it is made a member. A role
 * of that name that holds more, or owns something, is refused rather than used, with the
 * command that fixes it.
 *
 * What Postgres lets any role do to itself, this undoes on every run, so every deploy (whose
 * migrations task runs it) starts from a clean role: a setting the role gave itself (`ALTER
 * ROLE ... SET`, here or in one database) is reset, its password is set again, and large
 * objects it made (nothing of the app's makes any) are removed.
 *
 * The password never travels in clear: the role gets a SCRAM-SHA-256 verifier computed here
 * (as psql's \password does), so a statement that Postgres logs, on an error say, holds no
 * password. Running it again with the same password changes nothing that matters; with a new
 * one, it sets the new one (a rotation: docs/operations.md).
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Logger } from './logger.js';

/** The group whose rights the login role gets; created by the runtime-role migration. */
export const RUNTIME_GROUP = 'ecs_saas_runtime';

/** A role name the statements can quote as it is: lower case, as Postgres folds unquoted names. */
export const LOGIN_ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export interface LoginRole {
  readonly name: string;
  readonly password: string;
}

/** What a password may hold: what Secrets Manager generates. */
export const PRINTABLE_ASCII = /^[\x21-\x7e]+$/;

/** SCRAM-SHA-256's iteration count in Postgres's own verifiers (scram_iterations' default). */
const SCRAM_ITERATIONS = 4096;
/** One transaction-scoped advisory lock key, so two migrate commands at once do not race on CREATE ROLE. */
const LOCK_KEY = "hashtext('ecs-saas-backend login role')";

type Queryable = Pick<pg.ClientBase, 'query'>;

export class LoginRoleError extends Error {}

/** The verifier Postgres stores for `password` (RFC 5802 and 7677; its text form is Postgres's). */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16)): string {
  // SASLprep, which Postgres applies to a password first, leaves printable ASCII as it is; for
  // anything else this would have to repeat its tables, so such a password is refused.
  if (!PRINTABLE_ASCII.test(password)) throw new LoginRoleError('the login role\'s password must be printable ASCII without spaces');
  const salted = pbkdf2Sync(password, salt, SCRAM_ITERATIONS, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${SCRAM_ITERATIONS}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/**
 * Creates the login role, or updates its password and membership; then checks that it holds
 * no attribute beyond LOGIN and owns nothing. One transaction: a failure leaves the role as it was.
 */
export async function ensureLoginRole(db: Queryable, role: LoginRole, logger: Logger): Promise<'created' | 'updated'> {
  if (!LOGIN_ROLE_NAME.test(role.name)) {
    throw new LoginRoleError(`the login role's name must be a lower-case Postgres identifier (letters, digits, _), got ${JSON.stringify(role.name)}`);
  }
  const quoted = `"${role.name}"`;
  const verifier = `'${scramVerifier(role.password)}'`;
  await db.query('BEGIN');
  try {
    await db.query(`SELECT pg_advisory_xact_lock(${LOCK_KEY})`);
    const { rows } = await db.query<{ me: boolean }>('SELECT rolname = current_user AS me FROM pg_roles WHERE rolname = $1', [role.name]);
    if (rows[0]?.me) throw new LoginRoleError(`the login role ${role.name} is the user that migrates; give the API and the jobs a role of their own`);
    const created = rows.length === 0;
    // Only LOGIN, PASSWORD and INHERIT are named: the other attributes default to off, and only a
    // role holding REPLICATION or BYPASSRLS itself may name those (RDS's master user holds neither).
    await db.query(created
      ? `CREATE ROLE ${quoted} LOGIN INHERIT PASSWORD ${verifier}`
      : `ALTER ROLE ${quoted} LOGIN INHERIT PASSWORD ${verifier}`);
    await db.query(`GRANT ${RUNTIME_GROUP} TO ${quoted}`);
    if (!created) await repair(db, role.name, logger);
    const excess = await excessOf(db, role.name);
    if (excess.problems.length > 0) {
      throw new LoginRoleError(`the login role ${role.name} ${excess.problems.join(' and ')}; the API and the jobs must log in as a role that owns nothing and can do nothing but log in (docs/security.md). Remove that (${excess.fixes.join('; ')}), or choose another name`);
    }
    await db.query('COMMIT');
    logger.info({ role: role.name, group: RUNTIME_GROUP }, `${created ? 'created' : 'updated'} the login role ${role.name} (member of ${RUNTIME_GROUP}; the API and the jobs log in as it)`);
    return created ? 'created' : 'updated';
  } catch (err) {
    await db.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/**
 * Undoes what the role could do to itself: the settings it, or a role it may SET ROLE to, gave
 * itself, and its large objects in this database.
 */
async function repair(db: Queryable, name: string, logger: Logger): Promise<void> {
  const { rows: settings } = await db.query<{ role: string; datname: string | null; settings: string[] }>(
    `SELECT r.rolname AS role, d.datname, s.setconfig AS settings
     FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole LEFT JOIN pg_database d ON d.oid = s.setdatabase
     WHERE pg_has_role($1, r.oid, 'SET') ORDER BY 1, 2`,
    [name],
  );
  for (const s of settings) {
    const role = `"${s.role.replace(/"/g, '""')}"`;
    await db.query(s.datname === null ? `ALTER ROLE ${role} RESET ALL` : `ALTER ROLE ${role} IN DATABASE "${s.datname.replace(/"/g, '""')}" RESET ALL`);
    const names = s.settings.map((kv) => kv.split('=')[0]);
    logger.warn({ role: s.role, database: s.datname, settings: names }, `reset the settings role ${s.role} had given itself (${names.join(', ')})${s.datname === null ? '' : ` in database ${s.datname}`}`);
  }
  const { rows: objects } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_largeobject_metadata WHERE lomowner = (SELECT oid FROM pg_roles WHERE rolname = $1)', [name]);
  if (objects[0]!.n === 0) return;
  await db.query('SAVEPOINT large_objects');
  try {
    await db.query('SELECT lo_unlink(oid) FROM pg_largeobject_metadata WHERE lomowner = (SELECT oid FROM pg_roles WHERE rolname = $1)', [name]);
    await db.query('RELEASE SAVEPOINT large_objects');
    logger.warn({ role: name, largeObjects: objects[0]!.n }, `removed ${objects[0]!.n} large object(s) the login role had made: nothing of the app's makes one`);
  } catch (err) {
    if ((err as { code?: string }).code !== '42501') throw err;
    await db.query('ROLLBACK TO SAVEPOINT large_objects');
    throw new LoginRoleError(
      `the login role ${name} owns ${objects[0]!.n} large object(s), which the user that migrates may not remove; remove them as the login role itself (psql "<its connection>" -c "SELECT lo_unlink(oid) FROM pg_largeobject_metadata WHERE lomowner = current_user::regrole"), then migrate again`,
    );
  }
}

/** What `name` holds beyond a login role's due (attributes, objects it owns in any database, other groups), and the commands that remove it. */
async function excessOf(db: Queryable, name: string): Promise<{ problems: string[]; fixes: string[] }> {
  const { rows } = await db.query<{ attributes: string[]; owned: number; member_of: string[] }>(
    `SELECT array_remove(ARRAY[
              CASE WHEN r.rolsuper THEN 'SUPERUSER' END, CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
              CASE WHEN r.rolcreatedb THEN 'CREATEDB' END, CASE WHEN r.rolreplication THEN 'REPLICATION' END,
              CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END], NULL) AS attributes,
            (SELECT count(*)::int FROM pg_shdepend d WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid AND d.deptype = 'o') AS owned,
            ARRAY(SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
                  WHERE m.member = r.oid AND g.rolname <> $2 ORDER BY 1) AS member_of
     FROM pg_roles r WHERE r.rolname = $1`,
    [name, RUNTIME_GROUP],
  );
  const r = rows[0]!;
  const problems: string[] = [];
  const fixes: string[] = [];
  if (r.attributes.length > 0) {
    problems.push(`has ${r.attributes.join(', ')}`);
    fixes.push(`ALTER ROLE ${name} ${r.attributes.map((a) => `NO${a}`).join(' ')}`);
  }
  if (r.owned > 0) {
    problems.push(`owns ${r.owned} object(s)`);
    fixes.push(`REASSIGN OWNED BY ${name} TO <another role>, in each database where it owns something`);
  }
  if (r.member_of.length > 0) {
    problems.push(`is a member of ${r.member_of.join(', ')}`);
    fixes.push(`REVOKE ${r.member_of.join(', ')} FROM ${name}`);
  }
  return { problems, fixes };
}
