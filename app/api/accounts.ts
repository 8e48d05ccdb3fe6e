/**
 * Accounts: the operator creates and pages through them; an account sees itself only.
 */
import { Router } from 'express';
import { z } from 'zod';
import { requireOperator } from '../auth.js';
import { MAX_UNIT_PRICE_CENTS } from '../billing.js';
import { UserError } from '../errors.js';
import type { Queryable } from '../tenancy.js';
import { trimmedText } from './text.js';
import { accountPath, found, page, pageOf, pageRows, parse, type CallerDb } from './request.js';

/** An account's states: the accounts table's CHECK constraint (app/migrations/) holds the same list. */
export const ACCOUNT_STATUSES = ['active', 'suspended', 'closed'] as const;

export const newAccount = z.strictObject({
  name: trimmedText(1, 200),
  email: z.email().max(320),
  plan: z.enum(['free', 'standard', 'enterprise']).default('standard'),
  unitPriceCents: z.number().int().min(0).max(MAX_UNIT_PRICE_CENTS).default(1),
});

const timestampOut = z.iso.datetime();
/** An account as the API answers it. */
export const account = z.strictObject({
  id: z.string(),
  name: z.string(),
  email: z.string(),
  plan: z.enum(['free', 'standard', 'enterprise']),
  status: z.enum(ACCOUNT_STATUSES),
  unitPriceCents: z.number().int().min(0).max(MAX_UNIT_PRICE_CENTS).describe('an exact JSON integer, bounded by the input'),
  createdAt: timestampOut,
});
export const accountWithUsage = account.extend({
  usage30d: z.strictObject({
    quantity: z.string().regex(/^\d+$/).describe('the sum of the last 30 days, a decimal string'),
    lastUsageAt: timestampOut.nullable(),
    refreshedAt: timestampOut.nullable(),
  }),
});

const ACCOUNT_COLUMNS = `a.id::text AS id, a.name, a.email, a.plan, a.status, a.unit_price_cents AS "unitPriceCents", a.created_at AS "createdAt"`;

export function accountsRouter(db: CallerDb): Router {
  const router = Router();
  router.get('/accounts', async (req, res) => {
    const q = parse(page, req.query, 'query');
    const rows = await db.read(res, `SELECT ${ACCOUNT_COLUMNS} FROM accounts a WHERE a.id > $1 ORDER BY a.id LIMIT $2`, [q.after ?? '0', pageRows(q.limit)]);
    res.json(pageOf(rows as { id: string }[], q.limit));
  });

  router.post('/accounts', async (req, res) => {
    requireOperator(res, 'create accounts');
    const body = parse(newAccount, req.body, 'body');
    const row = await db.as(res, (c) => createAccount(c, body));
    if (row === undefined) throw new UserError('CONFLICT', `An account with email ${body.email} already exists`, 409, { field: 'email' });
    res.status(201).location(`/accounts/${row.id}`).json(row);
  });

  router.get('/accounts/:id', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const rows = await db.read(res, ACCOUNT_WITH_USAGE, [accountId]);
    const { usageQuantity, lastUsageAt, refreshedAt, ...account } = found(rows[0], 'account', accountId);
    res.json({ ...account, usage30d: { quantity: usageQuantity, lastUsageAt, refreshedAt } });
  });
  return router;
}

async function createAccount(db: Queryable, body: z.infer<typeof newAccount>): Promise<Record<string, unknown> & { id: string } | undefined> {
  const { rows } = await db.query(
    `INSERT INTO accounts AS a (name, email, plan, unit_price_cents) VALUES ($1, $2, $3, $4)
     ON CONFLICT (lower(email)) DO NOTHING RETURNING ${ACCOUNT_COLUMNS}`,
    [body.name, body.email, body.plan, body.unitPriceCents],
  );
  return rows[0];
}

// The summary's timestamps come back as columns, so they are serialized like every other
// timestamp (ISO 8601 in UTC with milliseconds); inside json_build_object Postgres would write
// its own text form. The 30-day sum is a decimal string: it is exact at any size.
export const ACCOUNT_WITH_USAGE = `SELECT ${ACCOUNT_COLUMNS}, coalesce(s.quantity, 0)::text AS "usageQuantity", s.last_usage_at AS "lastUsageAt", s.refreshed_at AS "refreshedAt"
  FROM accounts a LEFT JOIN tenant_account_usage_30d s ON s.account_id = a.id WHERE a.id = $1`;
