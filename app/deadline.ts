/**
 * Every keyed request's deadline (REQUEST_DEADLINE_MS). `statement_timeout` is Postgres's own
 * bound and cannot fire on a server that does not run (stopped, or its host frozen), and a
 * pooled connection waits for ever on a socket that says nothing. So the deadline is kept on
 * the client side: past it the request answers 503 DEADLINE_EXCEEDED with Retry-After, the
 * connection it holds is closed under its query (the query fails, and the pool drops the
 * connection rather than take it back half-used), and the handler's later answer, if any, is
 * dropped (app/api/errors.ts). The pool is whole again at once: a new connection replaces the
 * closed one on the next checkout.
 *
 * Per request: one small object and one timer, cleared when the answer is out.
 */
import type { RequestHandler, Response } from 'express';
import type { Pool, PoolClient } from './db.js';
import { UserError } from './errors.js';
import type { Logger } from './logger.js';

/** Seconds a 503 past the deadline asks the caller to wait before retrying. */
const RETRY_AFTER_SECONDS = 1;

/** What a request holds of the database, and whether its deadline has passed. */
export interface Lease {
  /** The pooled connection the request is using now, if any. */
  client: PoolClient | undefined;
  expired: boolean;
  timer: NodeJS.Timeout | undefined;
}

export function deadlineExceeded(ms: number): UserError {
  return new UserError('DEADLINE_EXCEEDED', `The request did not complete within its deadline (REQUEST_DEADLINE_MS, ${ms} ms); retry shortly`, 503, undefined, {
    'Retry-After': String(RETRY_AFTER_SECONDS),
  });
}

export function leaseOf(res: Response): Lease | undefined {
  return res.locals.lease as Lease | undefined;
}

/** Starts the request's deadline; the routes' database access takes its connections through `checkout`. */
export function requestDeadline(ms: number, logger: Logger): RequestHandler {
  const error = deadlineExceeded(ms);
  function expire(res: Response, lease: Lease): void {
    lease.expired = true;
    const client = lease.client;
    lease.client = undefined;
    // With a query in flight, pg destroys the socket: the query fails at once, whatever the server does.
    if (client !== undefined) client.end().catch(() => undefined);
    if (res.headersSent) return;
    logger.warn({ requestId: res.locals.requestId, method: res.req.method, path: res.req.path, held: client !== undefined }, `request answered 503: past its deadline of ${ms} ms`);
    res.set(error.headers).status(error.status).json({ error: { code: error.code, message: error.message } });
  }
  return (_req, res, next) => {
    const lease: Lease = { client: undefined, expired: false, timer: undefined };
    lease.timer = setTimeout(expire, ms, res, lease);
    res.locals.lease = lease;
    res.once('close', clear);
    next();
  };
}

function clear(this: Response): void {
  clearTimeout(leaseOf(this)!.timer);
}

/** A pooled connection for the request: refused once its deadline has passed, and closed by the deadline while held. */
export async function checkout(pool: Pool, lease: Lease | undefined): Promise<PoolClient> {
  const client = await pool.connect();
  if (lease === undefined) return client;
  if (lease.expired) {
    client.release();
    throw new UserError('DEADLINE_EXCEEDED', 'The request is past its deadline', 503);
  }
  lease.client = client;
  return client;
}

/** Gives the connection back (or drops it, with `err`); the deadline no longer reaches it. */
export function checkin(client: PoolClient, lease: Lease | undefined, err?: Error): void {
  if (lease?.client === client) lease.client = undefined;
  client.release(err);
}
