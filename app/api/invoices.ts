/**
 * Invoices: an account reads its own; the operator bills one account for one past day now,
 * by the same rule as billing-run (app/billing.ts). A second call, or the nightly run
 * afterwards, finds the invoice and leaves it as it is.
 *
 * `quantity` and `amountCents` are sums over a day, so they go out as decimal strings: exact
 * at any size (an invoice's bigint passes 2^53, the largest integer a JSON number holds
 * exactly, at about 9,000 events at the maximum quantity and price).
 */
import { Router } from 'express';
import { z } from 'zod';
import { requireOperator } from '../auth.js';
import { DAY_MS } from '../../lib/time-zones.js';
import { billAccounts, dayPeriod, type BillingPeriod } from '../billing.js';
import { UserError } from '../errors.js';
import type { Queryable } from '../tenancy.js';
import { isoDay } from './dates.js';
import { accountPath, accountRows, found, page, pageOf, pageRows, parse, requireAccount, type CallerDb } from './request.js';

export const newInvoice = z.strictObject({ periodStart: isoDay });

/** An invoice as the API answers it. */
export const invoice = z.strictObject({
  id: z.string(),
  accountId: z.string(),
  periodStart: z.string(),
  periodEnd: z.string(),
  quantity: z.string().regex(/^\d+$/).describe('the day\'s summed quantity, a decimal string'),
  amountCents: z.string().regex(/^-?\d+$/).describe('quantity times the unit price, in cents, a decimal string'),
  currency: z.string(),
  createdAt: z.iso.datetime(),
});

const INVOICE_COLUMNS = `id::text AS id, account_id::text AS "accountId", to_char(period_start, 'YYYY-MM-DD') AS "periodStart", to_char(period_end, 'YYYY-MM-DD') AS "periodEnd", quantity::text AS quantity, amount_cents::text AS "amountCents", currency, created_at AS "createdAt"`;

export function invoicesRouter(db: CallerDb): Router {
  const router = Router();
  router.get('/accounts/:id/invoices', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(page, req.query, 'query');
    const rows = await accountRows(db, res, accountId, `SELECT ${INVOICE_COLUMNS} FROM invoices WHERE account_id = $1 AND id > $2 ORDER BY invoices.id LIMIT $3`, [accountId, q.after ?? '0', pageRows(q.limit)]);
    res.json(pageOf(rows, q.limit));
  });

  router.post('/accounts/:id/invoices', async (req, res) => {
    requireOperator(res, 'bill accounts');
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const body = parse(newInvoice, req.body, 'body');
    const start = Date.parse(`${body.periodStart}T00:00:00Z`);
    // Compared as instants: the day after 9999-12-31 has no four-digit year to compare as text.
    // A well-formed day the clock refuses is a 422, as usage ahead of the clock is: the
    // document's schema accepts it, and a 400 would say the schema was broken.
    if (start + DAY_MS > Date.now()) {
      throw new UserError('PERIOD_NOT_BILLABLE', `periodStart ${body.periodStart} has not ended yet (UTC); only past days can be billed`, 422, { field: 'periodStart' });
    }
    const period = dayPeriod(new Date(start));
    const { inserted, invoice } = await db.bill(res, (c) => billOne(c, accountId, period));
    res.status(inserted > 0 ? 201 : 200).json(found(invoice, 'invoice for account', `${accountId} on ${period.start} (the account was created after that day)`));
  });

  router.get('/invoices/:id', async (req, res) => {
    const { id: invoiceId } = parse(accountPath, req.params, 'path');
    const rows = await db.read(res, `SELECT ${INVOICE_COLUMNS} FROM invoices WHERE id = $1`, [invoiceId]);
    res.json(found(rows[0], 'invoice', invoiceId));
  });
  return router;
}

async function billOne(db: Queryable, accountId: string, period: BillingPeriod): Promise<{ inserted: number; invoice: unknown }> {
  const account = await requireAccount(db, accountId);
  if (account.status !== 'active') {
    throw new UserError('CONFLICT', `Account ${accountId} is ${account.status}; only active accounts are billed`, 409);
  }
  // billAccounts' rule: an account is billed for the days that end after it was created.
  if (account.createdAt.getTime() >= Date.parse(`${period.end}T00:00:00Z`)) {
    throw new UserError('PERIOD_NOT_BILLABLE', `periodStart ${period.start} is before account ${accountId} was created (${account.createdAt.toISOString()}); it is billed from that day on`, 422, { field: 'periodStart' });
  }
  const result = await billAccounts(db, period, { accountId });
  const { rows } = await db.query(`SELECT ${INVOICE_COLUMNS} FROM invoices WHERE account_id = $1 AND period_start = $2`, [accountId, period.start]);
  return { inserted: result.inserted, invoice: rows[0] };
}
