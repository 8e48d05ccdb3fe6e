/**
 * The API's last two steps: 404 for a route that does not exist, and the error handler that
 * turns anything thrown into `{ "error": { "code", "message", "details"? } }` with no stack.
 * Database trouble (app/db-errors.ts) answers 503 with Retry-After; anything unexpected 500.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { keyIsLive, unauthorized } from '../auth.js';
import type { Pool } from '../db.js';
import { leaseOf } from '../deadline.js';
import { dbTrouble, isPoolTimeout, type DbTrouble } from '../db-errors.js';
import { UserError } from '../errors.js';
import type { Logger } from '../logger.js';
import { UnknownKeyError } from '../tenancy.js';

/** Seconds a 503 for a busy or unreachable database asks the caller to wait before retrying. */
export const RETRY_AFTER_SECONDS = 1;

const UNAVAILABLE_MESSAGES: Record<DbTrouble, string> = {
  'connection-lost': 'The database is unreachable; retry shortly',
  busy: 'The database is busy; retry shortly',
  'read-only': 'The database is read-only for now (a failover); retry shortly',
  'timed-out': 'The database did not answer in time; retry shortly',
};

export const notFound: RequestHandler = (req) => {
  throw new UserError('NOT_FOUND', `No route for ${req.method} ${req.path}`, 404);
};

export function errorHandler(pool: Pool, logger: Logger) {
  return (err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const answer = (e: UserError, cause: unknown) => {
      // Answered already, by the deadline or by a 413 while the body parser still read: what failed after is moot.
      if (res.writableEnded) return;
      if (e.code === 'UNAVAILABLE') {
        logger.warn({ requestId: res.locals.requestId, err: (cause as Error)?.message, method: req.method, path: req.path }, `request answered 503: ${e.message}`);
      } else if (e.status >= 500) {
        logger.error({ requestId: res.locals.requestId, err: (cause as Error)?.message, stack: (cause as Error)?.stack, method: req.method, path: req.path }, 'request failed');
      }
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (e.headers) res.set(e.headers);
      res.status(e.status).json({ error: { code: e.code, message: e.message, ...(e.details === undefined ? {} : { details: e.details }) } });
    };
    const e = toUserError(err);
    // An account key is checked by the request's first query; an answer that comes before
    // any (a 400, a 403, an unknown route) checks the key first, so a dead key always gets 401.
    // Not a 429: the rate limit is there to spare the database that query.
    if (e.status >= 400 && e.status < 500 && e.status !== 401 && e.status !== 429 && !res.headersSent) {
      keyIsLive(pool, res.locals.identity, leaseOf(res)).then(
        (live) => answer(live ? e : unauthorized('Invalid API key'), err),
        (checkErr: unknown) => answer(toUserError(checkErr), checkErr),
      );
      return;
    }
    answer(e, err);
  };
}

/** Maps body-parser's and Postgres's errors to the catalogue; anything else is a 500. */
export function toUserError(err: unknown): UserError {
  if (err instanceof UserError) return err;
  if (err instanceof UnknownKeyError) return unauthorized(err.message);
  const e = err as { type?: string; status?: number; message?: string; code?: string; limit?: number };
  if (e?.type === 'entity.parse.failed') return new UserError('INVALID_JSON', `Request body is not valid JSON: ${e.message}`, 400);
  if (e?.type === 'entity.too.large') return new UserError('BODY_TOO_LARGE', `Request body is larger than the limit of ${e.limit} bytes`, 413);
  if (e?.type === 'encoding.unsupported' || e?.type === 'charset.unsupported') return new UserError('UNSUPPORTED_MEDIA_TYPE', e.message ?? 'Unsupported body encoding', 415);
  if (e?.code === '22003') return new UserError('VALIDATION_FAILED', 'A number in the request is out of range', 400);
  if (err instanceof URIError) return new UserError('BAD_REQUEST', 'The path has a malformed %-escape', 400);
  // body-parser's own 4xx: a gzip or br body that does not decode, a request aborted mid-body.
  if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500) return new UserError('BAD_REQUEST', `Request body could not be read: ${e.message}`, e.status);
  // The database is slow or away: the same request may well succeed in a moment, on this task.
  const unavailable = (message: string) => new UserError('UNAVAILABLE', message, 503, undefined, { 'Retry-After': String(RETRY_AFTER_SECONDS) });
  if (isPoolTimeout(err)) return unavailable('The database is busy: no connection came free in time; retry shortly');
  const trouble = dbTrouble(err);
  if (trouble !== undefined) return unavailable(UNAVAILABLE_MESSAGES[trouble]);
  return new UserError('INTERNAL', 'Internal server error', 500);
}
