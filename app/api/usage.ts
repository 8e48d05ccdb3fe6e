/**
 * Usage events: an account reports them, and reads them back a page at a time.
 *
 * Usage the account would never be billed for is refused, so nothing is stored that no
 * invoice will ever count: dated before the account was created (422), further ahead of the
 * server's clock than MAX_FUTURE_SKEW_MS (422), on a UTC day that already has the account's
 * invoice (409: an invoice is final), or for an account that is not active (409: billing
 * passes over suspended and closed accounts). A retry with the same idempotency key
 * answers the original row (200) when the payload is the same, and 422 when it differs
 * (Stripe's rule); once the original is past retention and gone, 409 (422 for another
 * occurredAt). occurredAt is kept to the millisecond, as it is answered: digits past the
 * third are dropped, before Postgres sees it (app/api/dates.ts).
 */
import { Router } from 'express';
import { z } from 'zod';
import { MAX_USAGE_QUANTITY } from '../billing.js';
import { UserError } from '../errors.js';
import type { Queryable } from '../tenancy.js';
import { instantMs, timestamp, utcInstant } from './dates.js';
import { accountPath, accountRows, page, pageOf, pageRows, parse, requireAccount, type CallerDb } from './request.js';
import { text } from './text.js';

/**
 * How far ahead of the server's clock a usage event may be dated: the 5 minutes AWS allows
 * a signed request's clock (SigV4). An event is reported after it happened; a date further
 * ahead is a wrong clock or a typo (9999), and would sit unbilled until that day.
 */
export const MAX_FUTURE_SKEW_MS = 5 * 60_000;

export const newUsage = z.strictObject({
  metric: z.string().regex(/^[a-z][a-z0-9_.]{0,63}$/, { message: 'must be lower-case letters, digits, "_" or ".", starting with a letter' }),
  quantity: z.number().int().min(0).max(MAX_USAGE_QUANTITY),
  occurredAt: timestamp.optional(),
  idempotencyKey: text(1, 200).optional(),
});
export const usageQuery = page.extend({ from: timestamp.optional(), to: timestamp.optional() });

/** A usage event as the API answers it. */
export const usageEvent = z.strictObject({
  id: z.string(),
  accountId: z.string(),
  metric: z.string(),
  quantity: z.number().int().min(0).max(MAX_USAGE_QUANTITY).describe('one event\'s quantity: an exact JSON integer, bounded by the input'),
  occurredAt: z.iso.datetime(),
  idempotencyKey: z.string().nullable(),
});

// quantity is one event's, at most MAX_USAGE_QUANTITY: an exact JSON integer. occurred_at is
// stored to the millisecond (truncated), the precision every answer has, so the answered
// value is the stored one and a retry that sends it back matches; the comparison truncates
// too, for rows stored to the microsecond before.
const USAGE_COLUMNS = `id::text AS id, account_id::text AS "accountId", metric, quantity::float8 AS quantity, occurred_at AS "occurredAt", idempotency_key AS "idempotencyKey"`;

type NewUsage = z.infer<typeof newUsage>;

// A key's original is found through usage_keys, which says its UTC day, so that Postgres
// reads the one partition that holds it (app/usage-partitions.ts). Keys of the rows from
// before the partitions are not there: those are looked for in every partition. The day's
// end is 24 hours on: `+ interval '1 day'` would count the day in the session's time zone.
const KEY_DAY = `(SELECT date_trunc('day', k.occurred_at, 'UTC') FROM usage_keys k WHERE k.account_id = $1 AND k.idempotency_key = $2)`;

export function usageRouter(db: CallerDb): Router {
  const router = Router();
  router.get('/accounts/:id/usage', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(usageQuery, req.query, 'query');
    const rows = await accountRows(
      db,
      res,
      accountId,
      `SELECT ${USAGE_COLUMNS} FROM usage
       WHERE account_id = $1 AND id > $2 AND occurred_at >= coalesce($3::timestamptz, '-infinity') AND occurred_at < coalesce($4::timestamptz, 'infinity')
       ORDER BY usage.id LIMIT $5`,
      [accountId, q.after ?? '0', q.from === undefined ? null : utcInstant(q.from), q.to === undefined ? null : utcInstant(q.to), pageRows(q.limit)],
    );
    res.json(pageOf(rows, q.limit));
  });

  router.post('/accounts/:id/usage', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const body = parse(newUsage, req.body, 'body');
    if (body.occurredAt !== undefined && instantMs(body.occurredAt) > Date.now() + MAX_FUTURE_SKEW_MS) {
      throw notBillable(`occurredAt ${body.occurredAt} is more than ${MAX_FUTURE_SKEW_MS / 60_000} minutes ahead of the server's clock; report usage once it has happened`);
    }
    const { status, row } = await db.as(res, (c) => recordUsage(c, accountId, body));
    res.status(status).json(row);
  });
  return router;
}

function notBillable(message: string): UserError {
  return new UserError('USAGE_NOT_BILLABLE', message, 422, { field: 'occurredAt' });
}

async function recordUsage(db: Queryable, accountId: string, body: NewUsage): Promise<{ status: number; row: unknown }> {
  // FOR SHARE: billing locks the account before it sums the day (app/billing.ts), so this
  // report either commits before that sum or sees the invoice below.
  const account = await requireAccount(db, accountId, 'FOR SHARE');
  if (body.occurredAt !== undefined && instantMs(body.occurredAt) < account.createdAt.getTime()) {
    throw notBillable(`occurredAt ${body.occurredAt} is before account ${accountId} was created (${account.createdAt.toISOString()}); no invoice would count it`);
  }
  // Only active accounts are billed (app/billing.ts); a retry of an event stored while the
  // account was active still finds its row below.
  const at = body.occurredAt === undefined ? null : utcInstant(body.occurredAt);
  const inserted = account.status !== 'active' ? { rows: [] } : await db.query(
    `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
     SELECT $1, $2, $3, at, $5 FROM (SELECT date_trunc('milliseconds', coalesce($4::timestamptz, now())) AS at) t
     WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE i.account_id = $1 AND i.period_start = (t.at AT TIME ZONE 'UTC')::date)
     ON CONFLICT DO NOTHING RETURNING ${USAGE_COLUMNS}`,
    [accountId, body.metric, body.quantity, at, body.idempotencyKey ?? null],
  );
  if (inserted.rows.length > 0) return { status: 201, row: inserted.rows[0] };
  if (body.idempotencyKey !== undefined) {
    const { rows } = await db.query(
      `SELECT ${USAGE_COLUMNS}, (metric = $3 AND quantity = $4 AND ($5::timestamptz IS NULL OR date_trunc('milliseconds', occurred_at) = date_trunc('milliseconds', $5::timestamptz))) AS same
       FROM usage WHERE account_id = $1 AND idempotency_key = $2
         AND occurred_at >= coalesce(${KEY_DAY}, '-infinity') AND occurred_at < coalesce(${KEY_DAY} + interval '24 hours', 'infinity')`,
      [accountId, body.idempotencyKey, body.metric, body.quantity, at],
    );
    if (rows[0]) {
      const { same, ...original } = rows[0];
      if (!same) {
        throw new UserError('IDEMPOTENCY_KEY_REUSED', `Idempotency key ${JSON.stringify(body.idempotencyKey)} was already used with a different payload (usage ${original.id})`, 422);
      }
      return { status: 200, row: original };
    }
  }
  if (body.idempotencyKey !== undefined) await refuseSpentKey(db, accountId, body.idempotencyKey, at);
  if (account.status !== 'active') {
    throw new UserError('CONFLICT', `Account ${accountId} is ${account.status}; only active accounts are billed, so its usage is refused`, 409);
  }
  const day = (at ?? new Date().toISOString()).slice(0, 10);
  throw new UserError('CONFLICT', `Account ${accountId} is already invoiced for ${day} (UTC); usage for an invoiced day is refused`, 409, { field: 'occurredAt' });
}

/**
 * A key whose original usage is gone, its day retired by data-cleanup while usage_keys still
 * holds the key (until the last day of its month goes): the original cannot be answered, and
 * the key cannot be used again. A different occurredAt is a different payload (422); for the
 * rest only the original's day is known, so the answer says what happened to it.
 */
async function refuseSpentKey(db: Queryable, accountId: string, key: string, at: string | null): Promise<void> {
  const { rows } = await db.query<{ id: string; occurredAt: Date; same: boolean }>(
    `SELECT usage_id::text AS id, occurred_at AS "occurredAt",
            ($3::timestamptz IS NULL OR date_trunc('milliseconds', occurred_at) = date_trunc('milliseconds', $3::timestamptz)) AS same
     FROM usage_keys WHERE account_id = $1 AND idempotency_key = $2`,
    [accountId, key, at],
  );
  const spent = rows[0];
  if (spent === undefined) return;
  const original = `usage ${spent.id}, dated ${spent.occurredAt.toISOString()}`;
  if (!spent.same) {
    throw new UserError('IDEMPOTENCY_KEY_REUSED', `Idempotency key ${JSON.stringify(key)} was already used with a different payload (${original})`, 422);
  }
  throw new UserError('CONFLICT', `Idempotency key ${JSON.stringify(key)} was already used (${original}); that usage is past retention and no longer kept, so it cannot be answered, and the key cannot be used again`, 409);
}
