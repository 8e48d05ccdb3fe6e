/**
 * Who is calling: `Authorization: Bearer <key>` with the admin key (ADMIN_API_KEY, the
 * operator) or an account API key.
 *
 * Account keys are `sbk_` + 43 base64url characters (32 random bytes): the prefix makes a
 * leaked key recognisable in a log or to a secret scanner. Only the key's SHA-256 is stored,
 * and a key is found by that hash. The admin key is compared as a SHA-256 digest with
 * timingSafeEqual, so the comparison takes the same time whatever the caller sent.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Pool } from './db.js';
import { UserError } from './errors.js';
import type { Identity } from './tenancy.js';

export const KEY_PREFIX = 'sbk_';
const KEY_PATTERN = /^sbk_[A-Za-z0-9_-]{43}$/;
/** Characters of a key kept in clear in listings: the prefix and 8 more. */
const SHOWN_CHARS = KEY_PREFIX.length + 8;
/** An admin key shorter than this is refused at start-up. */
export const ADMIN_KEY_MIN_LENGTH = 32;

export interface NewKey {
  /** The key itself: returned once, never stored. */
  readonly key: string;
  readonly prefix: string;
  readonly hash: Buffer;
}

export function newApiKey(): NewKey {
  const key = `${KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
  return { key, prefix: key.slice(0, SHOWN_CHARS), hash: sha256(key) };
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/** A 401 that tells the client how to authenticate (RFC 6750). */
function unauthorized(message: string): UserError {
  return new UserError('UNAUTHORIZED', message, 401, undefined, { 'WWW-Authenticate': 'Bearer realm="api"' });
}

/**
 * Sets `res.locals.identity`, or answers 401. One query for an account key (a lookup by its
 * hash through a function that reveals nothing else); none for the admin key.
 */
export function authenticate(pool: Pool, adminKey: string | undefined): (req: Request, res: Response, next: NextFunction) => Promise<void> {
  const adminDigest = adminKey === undefined ? undefined : sha256(adminKey);
  return async (req, res, next) => {
    const header = req.headers.authorization;
    if (header === undefined) throw unauthorized('Authorization required: send Authorization: Bearer <API key>');
    const match = /^Bearer ([\x21-\x7e]{1,512})$/.exec(header);
    if (!match) throw unauthorized('Malformed Authorization header: expected Bearer <API key>');
    const key = match[1]!;
    const digest = sha256(key);
    if (adminDigest !== undefined && timingSafeEqual(digest, adminDigest)) {
      res.locals.identity = { kind: 'operator' } satisfies Identity;
      next();
      return;
    }
    if (!KEY_PATTERN.test(key)) throw unauthorized('Invalid API key');
    const { rows } = await pool.query<{ account_id: string | null }>('SELECT api_key_account($1)::text AS account_id', [digest]);
    const accountId = rows[0]?.account_id;
    if (!accountId) throw unauthorized('Invalid API key');
    res.locals.identity = { kind: 'account', accountId } satisfies Identity;
    next();
  };
}

export function identityOf(res: Response): Identity {
  return res.locals.identity as Identity;
}

/** Answers 403 unless the caller is the operator. */
export function requireOperator(res: Response, what: string): void {
  if (identityOf(res).kind !== 'operator') throw new UserError('FORBIDDEN', `Only the operator (admin key) may ${what}`, 403);
}
