/**
 * What a failed query says about the database, by SQLSTATE (Postgres, Appendix A) and by
 * node-postgres's own messages: one classification for the API (which answers 503 with
 * Retry-After) and the job runner (which reconnects and retries).
 *
 * - connection lost: the connection itself failed, not the statement, and a new connection
 *   may well work: class 08, 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect
 *   now (starting up or shutting down), 57P05 idle session timeout, a socket error, a socket
 *   closed under a query, or no pooled connection came free in time; and a connection the
 *   database refused at login: class 28 (the password or role refused, as while a secret
 *   rotates), 3D000 (no such database) and 55000 "not currently accepting connections"
 *   (ALTER DATABASE ... ALLOW_CONNECTIONS false). None of these is the caller's doing.
 * - busy: class 53, insufficient resources (53300 too many connections, 53200 out of memory,
 *   53100 disk full, 53400 configuration limit exceeded).
 * - read-only: 25006, what a writer that has just become a standby (a failover) answers.
 * - timed out: 57014, the statement ran past statement_timeout and Postgres cancelled it.
 *
 * Each of these may succeed when the same work is tried again in a moment; a caller's own
 * mistake (a bad value, a broken constraint) never falls in any of them.
 */

export type DbTrouble = 'connection-lost' | 'busy' | 'read-only' | 'timed-out';

/** Postgres cancelled the statement at statement_timeout (or on request). */
export const QUERY_CANCELED = '57014';
/** A read-write statement on a read-only server or transaction. */
export const READ_ONLY_SQL_TRANSACTION = '25006';
/** lock_not_available: a lock wait ran past lock_timeout. */
export const LOCK_NOT_AVAILABLE = '55P03';

/** Shutdown, crash, start-up and idle-session codes of class 57 that end the connection. */
const CONNECTION_ENDED = new Set(['57P01', '57P02', '57P03', '57P05']);
/**
 * Login refused: class 28 and 3D000 are raised only while a connection starts; 55000 is
 * also a statement's error (a sequence's currval before nextval), so only its login message
 * counts.
 */
const LOGIN_REFUSED = new Set(['3D000']);
const NOT_ACCEPTING_CONNECTIONS = /is not currently accepting connections/;
/** Node's socket errors: the server or the network went away. */
const SOCKET_ERRORS = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
/** node-postgres reports a socket that closed under a query without a code. */
const CONNECTION_CLOSED = /Connection terminated|connection error and is not queryable|Client was closed and is not queryable/i;
/** pg-pool's message when no connection came free within connectionTimeoutMillis. */
const POOL_TIMEOUT = /timeout exceeded when trying to connect/;

function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** No pooled connection came free in time: the database is slow or the pool is too small. */
export function isPoolTimeout(err: unknown): boolean {
  return err instanceof Error && POOL_TIMEOUT.test(err.message);
}

/** The connection failed, not the statement: worth a retry on a new connection. */
export function isConnectionLost(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = codeOf(err);
  if (code !== undefined && (code.startsWith('08') || CONNECTION_ENDED.has(code) || SOCKET_ERRORS.has(code))) return true;
  if (code !== undefined && (code.startsWith('28') || LOGIN_REFUSED.has(code) || (code === '55000' && NOT_ACCEPTING_CONNECTIONS.test(err.message)))) return true;
  return CONNECTION_CLOSED.test(err.message) || isPoolTimeout(err);
}

/** Which kind of database trouble `err` is, or undefined when it is something else (a bug, bad input). */
export function dbTrouble(err: unknown): DbTrouble | undefined {
  if (isConnectionLost(err)) return 'connection-lost';
  const code = codeOf(err);
  if (code === undefined) return undefined;
  if (code.startsWith('53')) return 'busy';
  if (code === READ_ONLY_SQL_TRANSACTION) return 'read-only';
  if (code === QUERY_CANCELED) return 'timed-out';
  return undefined;
}

/** The database is busy, away, read-only or slow: the same work may succeed in a moment. */
export function isTransientDbError(err: unknown): boolean {
  return dbTrouble(err) !== undefined;
}
