/**
 * Who is calling: `Authorization: Bearer <key>` with the admin key (ADMIN_API_KEY, the
 * operator) or an account API key.
 *
 * Account keys have the format of app/key-format.ts. Only the key's SHA-256 is stored,
 * and a key is found by that hash with an index lookup in Postgres: nothing compares the
 * secret itself, and the lookup's timing says nothing about the key, since a hash cannot be
 * steered. The admin key is compared as a SHA-256 digest with timingSafeEqual, so the
 * comparison takes the same time whatever the caller sent.
 */
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Pool } from './db.js';
import { checkin, checkout, type Lease } from './deadline.js';
import { UserError } from './errors.js';
import { KEY_PATTERN, KEY_PREFIX, SHOWN_CHARS } from './key-format.js';
import { OPERATOR, type Identity } from './tenancy.js';


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
  // The one-shot form: no Hash object per request.
  return hash('sha256', value, 'buffer');
}

/** A 401 that tells the client how to authenticate (RFC 6750). */
export function unauthorized(message: string): UserError {
  return new UserError('UNAUTHORIZED', message, 401, undefined, { 'WWW-Authenticate': 'Bearer realm="api"' });
}

/**
 * Sets `res.locals.identity`, or answers 401. No query here: the admin key is compared in
 * memory, and an account key is matched by Postgres in the same round trip as the request's
 * first query (app/tenancy.ts), which answers 401 when it matches no live key.
 */
export function authenticate(adminKey: string | undefined): (req: Request, res: Response, next: NextFunction) => void {
  const adminDigest = adminKey === undefined ? undefined : sha256(adminKey);
  return (req, res, next) => {
    const header = req.headers.authorization;
    if (header === undefined) throw unauthorized('Authorization required: send Authorization: Bearer <API key>');
    // The scheme is case-insensitive (RFC 9110, section 11.1), and may be followed by more than one space.
    const match = /^bearer +([\x21-\x7e]{1,512})$/i.exec(header);
    if (!match) throw unauthorized('Malformed Authorization header: expected Bearer <API key>');
    const key = match[1]!;
    const digest = sha256(key);
    if (adminDigest !== undefined && timingSafeEqual(digest, adminDigest)) {
      res.locals.identity = OPERATOR;
    } else if (KEY_PATTERN.test(key)) {
      res.locals.identity = { kind: 'key', hash: digest } satisfies Identity;
    } else {
      throw unauthorized('Invalid API key');
    }
    next();
  };
}

/**
 * Whether the caller's key is live, checked before a body is read and for an answer given
 * before any query ran (a 400, a 403, a 404 for a route): a caller whose key matches nothing
 * gets 401 there too. A live key's account is kept on the identity; every later query still
 * checks the key, so a revocation in between is seen.
 */
export async function keyIsLive(pool: Pool, identity: Identity | undefined, lease?: Lease): Promise<boolean> {
  if (identity?.kind !== 'key' || identity.accountId !== undefined) return true;
  const client = await checkout(pool, lease);
  let account: string | null;
  try {
    const { rows } = await client.query<{ account: string | null }>({ name: 'api-key-account', text: 'SELECT api_key_account($1)::text AS account', values: [identity.hash] });
    account = rows[0]!.account;
  } catch (err) {
    checkin(client, lease, err as Error);
    throw err;
  }
  checkin(client, lease);
  if (account === null) return false;
  identity.accountId = account;
  return true;
}

export function identityOf(res: Response): Identity {
  return res.locals.identity as Identity;
}

/** Answers 403 unless the caller is the operator. */
export function requireOperator(res: Response, what: string): void {
  if (identityOf(res).kind !== 'operator') throw new UserError('FORBIDDEN', `Only the operator (admin key) may ${what}`, 403);
}
