/**
 * API keys: the operator mints them; the operator or the account lists and revokes them.
 *
 * Account keys cannot mint keys. A leaked key therefore cannot leave a key behind that
 * survives its revocation, and revoking it (from the account or by the operator) ends what
 * it could do. An account holds at most MAX_LIVE_KEYS live keys. The key itself is in the
 * creation's answer only; listings show its prefix.
 */
import { Router } from 'express';
import { z } from 'zod';
import { newApiKey, requireOperator } from '../auth.js';
import { UserError } from '../errors.js';
import type { Queryable } from '../tenancy.js';
import { accountPath, accountRows, found, id, page, pageOf, pageRows, parse, requireAccount, type CallerDb } from './request.js';

/**
 * Live (unrevoked) keys per account: one per client or environment, plus one being rotated
 * in. A cap keeps a runaway script from filling the table and every listing.
 */
export const MAX_LIVE_KEYS = 10;

export const keyPath = z.object({ id, keyId: id });
/** Minting takes no input: a body, when one is sent, is an empty object, and any field in it is refused as everywhere. */
export const newKey = z.strictObject({});

/** A key as listings show it: never the key itself. */
export const apiKey = z.strictObject({
  id: z.string(),
  accountId: z.string(),
  prefix: z.string(),
  createdAt: z.iso.datetime(),
  revokedAt: z.iso.datetime().nullable(),
});
export const mintedKey = apiKey.extend({ key: z.string().regex(/^sbk_[A-Za-z0-9_-]{43}$/) });

const KEY_COLUMNS = `id::text AS id, account_id::text AS "accountId", prefix, created_at AS "createdAt", revoked_at AS "revokedAt"`;

export function keysRouter(db: CallerDb): Router {
  const router = Router();
  router.post('/accounts/:id/api-keys', async (req, res) => {
    requireOperator(res, 'create API keys');
    const { id: accountId } = parse(accountPath, req.params, 'path');
    if (req.body !== undefined) parse(newKey, req.body, 'body');
    const created = newApiKey();
    const row = await db.as(res, (c) => mintKey(c, accountId, created));
    res.status(201).location(`/accounts/${accountId}/api-keys/${row.id}`).json({ ...row, key: created.key });
  });

  router.get('/accounts/:id/api-keys', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(page, req.query, 'query');
    const rows = await accountRows(db, res, accountId, `SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = $1 AND id > $2 ORDER BY api_keys.id LIMIT $3`, [accountId, q.after ?? '0', pageRows(q.limit)]);
    res.json(pageOf(rows, q.limit));
  });

  // Revoking is immediate: authentication looks the key up on every request.
  router.delete('/accounts/:id/api-keys/:keyId', async (req, res) => {
    const { id: accountId, keyId } = parse(keyPath, req.params, 'path');
    const { rows } = await db.as(res, (c) =>
      c.query(`UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND account_id = $2 RETURNING ${KEY_COLUMNS}`, [keyId, accountId]),
    );
    res.json(found(rows[0], 'API key', `${keyId} of account ${accountId}`));
  });
  return router;
}

async function mintKey(db: Queryable, accountId: string, created: ReturnType<typeof newApiKey>): Promise<{ id: string }> {
  // The account row's lock makes two mints at once count one after the other.
  await requireAccount(db, accountId, 'FOR NO KEY UPDATE');
  const { rows: live } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL`, [accountId]);
  if (live[0]!.n >= MAX_LIVE_KEYS) {
    throw new UserError('TOO_MANY_KEYS', `Account ${accountId} already has ${MAX_LIVE_KEYS} live API keys, the most allowed; revoke one first`, 409);
  }
  const { rows } = await db.query(`INSERT INTO api_keys (account_id, prefix, key_hash) VALUES ($1, $2, $3) RETURNING ${KEY_COLUMNS}`, [accountId, created.prefix, created.hash]);
  return rows[0];
}
