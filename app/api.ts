/**
 * The HTTP API: accounts, their usage and their invoices, plus health and debug routes.
 *
 * Errors answer `{ "error": { "code", "message", "details"? } }` with a code from
 * app/errors.ts. Invalid JSON and failed validation answer 400 and name the field; an
 * unknown route 404; anything unexpected 500 with no stack (the stack goes to the log).
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { billAccounts, dayPeriod } from './billing.js';
import type { Config } from './config.js';
import { QUERY_CANCELED, isConnectionError, isPoolTimeout, type Pool } from './db.js';
import { UserError } from './errors.js';
import type { Logger } from './logger.js';

export interface ApiDeps {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly config: Pick<Config, 'BODY_LIMIT_BYTES' | 'ENABLE_DEBUG_ROUTES'>;
  /** True once shutdown has begun: /readyz answers 503 from then on. */
  readonly isDraining: () => boolean;
  /** Why this task should be replaced, or undefined (app/health.ts); /livez, the ALB's check, answers 503 with it. Default: draining only. */
  readonly liveness?: () => string | undefined;
}

/** Seconds a 503 for a busy or unreachable database asks the caller to wait before retrying. */
const RETRY_AFTER_SECONDS = 1;

/** How long /readyz waits for the database before it answers 503. */
const READY_DB_TIMEOUT_MS = 2_000;
const MAX_PAGE = 100;
const MAX_DEBUG_SLEEP_MS = 600_000;

const id = z.string().regex(/^[1-9]\d{0,17}$/, { message: 'must be a positive whole number' });
const page = z.object({
  limit: z.coerce.number().int().min(1).max(MAX_PAGE).default(20),
  after: id.optional(),
});
const isoDay = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, { message: 'must be a date YYYY-MM-DD' }).refine((v) => !Number.isNaN(Date.parse(`${v}T00:00:00Z`)) && new Date(`${v}T00:00:00Z`).toISOString().startsWith(v), { message: 'must be a real calendar date' });

const newAccount = z.strictObject({
  name: z.string().trim().min(1).max(200),
  email: z.email().max(320),
  plan: z.enum(['free', 'standard', 'enterprise']).default('standard'),
  unitPriceCents: z.number().int().min(0).max(1_000_000).default(1),
});
const newUsage = z.strictObject({
  metric: z.string().regex(/^[a-z][a-z0-9_.]{0,63}$/, { message: 'must be lower-case letters, digits, "_" or ".", starting with a letter' }),
  quantity: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  occurredAt: z.iso.datetime({ offset: true }).optional(),
  idempotencyKey: z.string().min(1).max(200).optional(),
});
const newInvoice = z.strictObject({ periodStart: isoDay });
const accountPath = z.object({ id });
const sleepQuery = z.object({ ms: z.coerce.number().int().min(0).max(MAX_DEBUG_SLEEP_MS) });
const crashQuery = z.object({ kind: z.enum(['exception', 'rejection']) });
const usageQuery = page.extend({ from: z.iso.datetime({ offset: true }).optional(), to: z.iso.datetime({ offset: true }).optional() });

/** Parses `input` with `schema`, or throws a 400 naming every bad field. */
function parse<T extends z.ZodType>(schema: T, input: unknown, where: 'body' | 'query' | 'path'): z.infer<T> {
  if (where === 'body' && (input === undefined || input === null || typeof input !== 'object' || Array.isArray(input))) {
    throw new UserError('VALIDATION_FAILED', 'Request body must be a JSON object', 400);
  }
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const fields = result.error.issues.map((issue) => ({
    field: issue.path.length ? issue.path.join('.') : (issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : where),
    message: issue.code === 'unrecognized_keys' ? 'is not a known field' : issue.message,
  }));
  const summary = fields.map((f) => `${f.field}: ${f.message}`).join("; ");
  throw new UserError('VALIDATION_FAILED', `Invalid ${where}: ${summary}`, 400, { fields });
}

const ACCOUNT_COLUMNS = `a.id::text AS id, a.name, a.email, a.plan, a.status, a.unit_price_cents AS "unitPriceCents", a.created_at AS "createdAt"`;
const USAGE_COLUMNS = `id::text AS id, account_id::text AS "accountId", metric, quantity::float8 AS quantity, occurred_at AS "occurredAt", idempotency_key AS "idempotencyKey"`;
const INVOICE_COLUMNS = `id::text AS id, account_id::text AS "accountId", to_char(period_start, 'YYYY-MM-DD') AS "periodStart", to_char(period_end, 'YYYY-MM-DD') AS "periodEnd", quantity::float8 AS quantity, amount_cents::float8 AS "amountCents", currency, created_at AS "createdAt"`;

export function createApi({ pool, logger, config, isDraining, liveness = () => (isDraining() ? 'draining' : undefined) }: ApiDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  // The load balancer's check: only what replacing this task would fix, never the shared database.
  app.get('/livez', (_req, res) => {
    const reason = liveness();
    if (reason === undefined) res.json({ status: 'live' });
    else res.status(503).json({ status: reason });
  });

  app.get('/readyz', async (_req, res) => {
    if (isDraining()) {
      res.status(503).json({ status: 'draining' });
      return;
    }
    try {
      await withTimeout(pool.query('SELECT 1'), READY_DB_TIMEOUT_MS);
      res.json({ status: 'ready' });
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'readiness check: database unavailable');
      res.status(503).json({ status: 'database unavailable' });
    }
  });

  // Every request past the health checks gets an id: the caller's X-Request-Id, else the ALB's
  // X-Amzn-Trace-Id, else a new one. It is echoed back and carried by the access log line,
  // written when the response ends. Health checks (every few seconds from the load balancer)
  // are answered above, before this: no id, no log line, no cost.
  app.use((req, res, next) => {
    const id = headerValue(req.headers['x-request-id']) ?? headerValue(req.headers['x-amzn-trace-id']) ?? randomUUID();
    res.setHeader('X-Request-Id', id);
    res.locals.requestId = id;
    const t0 = performance.now();
    res.once('close', () => {
      logger.info(
        { requestId: id, method: req.method, path: req.path, status: res.statusCode, ms: Math.round(performance.now() - t0), completed: res.writableFinished },
        'request',
      );
    });
    next();
  });

  if (config.ENABLE_DEBUG_ROUTES) {
    app.get('/debug/sleep', async (req, res) => {
      const { ms } = parse(sleepQuery, req.query, 'query');
      await sleep(ms);
      await pool.query('SELECT 1');
      res.json({ sleptMs: ms });
    });
    // Raises an error outside any request, to show (and test) that a crash drains like a SIGTERM and exits 1.
    app.post('/debug/crash', (req, res) => {
      const { kind } = parse(crashQuery, req.query, 'query');
      setImmediate(() => {
        if (kind === 'exception') throw new Error('debug crash: uncaught exception');
        void Promise.reject(new Error('debug crash: unhandled rejection'));
      });
      res.status(202).json({ crashing: kind });
    });
  }

  // Only the routes that take a body parse one; GETs skip the parser altogether.
  const parseJson = express.json({ limit: config.BODY_LIMIT_BYTES, strict: true });
  const requireJson: express.RequestHandler = (req, res, next) => {
    if (!req.is('application/json')) {
      throw new UserError('UNSUPPORTED_MEDIA_TYPE', 'Request body must be JSON (Content-Type: application/json)', 415);
    }
    parseJson(req, res, next);
  };

  app.get('/accounts', async (req, res) => {
    const q = parse(page, req.query, 'query');
    const { rows } = await pool.query(
      `SELECT ${ACCOUNT_COLUMNS} FROM accounts a WHERE a.id > $1 ORDER BY a.id LIMIT $2`,
      [q.after ?? '0', q.limit],
    );
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1).id : null });
  });

  app.post('/accounts', requireJson, async (req, res) => {
    const body = parse(newAccount, req.body, 'body');
    const { rows } = await pool.query(
      `INSERT INTO accounts AS a (name, email, plan, unit_price_cents) VALUES ($1, $2, $3, $4)
       ON CONFLICT (lower(email)) DO NOTHING RETURNING ${ACCOUNT_COLUMNS}`,
      [body.name, body.email, body.plan, body.unitPriceCents],
    );
    if (rows.length === 0) throw new UserError('CONFLICT', `An account with email ${body.email} already exists`, 409, { field: 'email' });
    res.status(201).location(`/accounts/${rows[0].id}`).json(rows[0]);
  });

  app.get('/accounts/:id', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const { rows } = await pool.query(
      `SELECT ${ACCOUNT_COLUMNS},
              json_build_object('quantity', coalesce(s.quantity, 0)::float8, 'lastUsageAt', s.last_usage_at, 'refreshedAt', s.refreshed_at) AS "usage30d"
       FROM accounts a LEFT JOIN account_usage_30d s ON s.account_id = a.id WHERE a.id = $1`,
      [accountId],
    );
    res.json(found(rows[0], 'account', accountId));
  });

  app.get('/accounts/:id/usage', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(usageQuery, req.query, 'query');
    await requireAccount(accountId);
    const { rows } = await pool.query(
      `SELECT ${USAGE_COLUMNS} FROM usage
       WHERE account_id = $1 AND id > $2 AND occurred_at >= coalesce($3::timestamptz, '-infinity') AND occurred_at < coalesce($4::timestamptz, 'infinity')
       ORDER BY usage.id LIMIT $5`,
      [accountId, q.after ?? '0', q.from ?? null, q.to ?? null, q.limit],
    );
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1).id : null });
  });

  app.post('/accounts/:id/usage', requireJson, async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const body = parse(newUsage, req.body, 'body');
    await requireAccount(accountId);
    const inserted = await pool.query(
      `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
       VALUES ($1, $2, $3, coalesce($4::timestamptz, now()), $5)
       ON CONFLICT (account_id, idempotency_key) DO NOTHING RETURNING ${USAGE_COLUMNS}`,
      [accountId, body.metric, body.quantity, body.occurredAt ?? null, body.idempotencyKey ?? null],
    );
    if (inserted.rows.length > 0) {
      res.status(201).json(inserted.rows[0]);
      return;
    }
    // The same idempotency key was reported before: answer with the original row.
    const { rows } = await pool.query(`SELECT ${USAGE_COLUMNS} FROM usage WHERE account_id = $1 AND idempotency_key = $2`, [accountId, body.idempotencyKey]);
    res.status(200).json(rows[0]);
  });

  app.get('/accounts/:id/invoices', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(page, req.query, 'query');
    await requireAccount(accountId);
    const { rows } = await pool.query(
      `SELECT ${INVOICE_COLUMNS} FROM invoices WHERE account_id = $1 AND id > $2 ORDER BY invoices.id LIMIT $3`,
      [accountId, q.after ?? '0', q.limit],
    );
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1).id : null });
  });

  // Bills one account for one day now, by the same rule as billing-run: a second call, or the
  // nightly run afterwards, finds the invoice and leaves it as it is.
  app.post('/accounts/:id/invoices', requireJson, async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const body = parse(newInvoice, req.body, 'body');
    const period = dayPeriod(new Date(`${body.periodStart}T00:00:00Z`));
    if (period.end > new Date().toISOString().slice(0, 10)) {
      throw new UserError('VALIDATION_FAILED', `Invalid body: periodStart ${body.periodStart} has not ended yet; only past days can be billed`, 400, { fields: [{ field: 'periodStart', message: 'must be a day that has ended (UTC)' }] });
    }
    const account = await requireAccount(accountId);
    if (account.status !== 'active') {
      throw new UserError('CONFLICT', `Account ${accountId} is ${account.status}; only active accounts are billed`, 409);
    }
    const result = await billAccounts(pool, period, { accountId });
    const { rows } = await pool.query(`SELECT ${INVOICE_COLUMNS} FROM invoices WHERE account_id = $1 AND period_start = $2`, [accountId, period.start]);
    const invoice = found(rows[0], 'invoice for account', `${accountId} on ${period.start} (the account was created after that day)`);
    res.status(result.inserted > 0 ? 201 : 200).json(invoice);
  });

  app.get('/invoices/:id', async (req, res) => {
    const { id: invoiceId } = parse(accountPath, req.params, 'path');
    const { rows } = await pool.query(`SELECT ${INVOICE_COLUMNS} FROM invoices WHERE id = $1`, [invoiceId]);
    res.json(found(rows[0], 'invoice', invoiceId));
  });

  app.use((req: Request) => {
    throw new UserError('NOT_FOUND', `No route for ${req.method} ${req.path}`, 404);
  });

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const e = toUserError(err);
    if (e.code === 'UNAVAILABLE') {
      logger.warn({ requestId: res.locals.requestId, err: (err as Error)?.message, method: req.method, path: req.path }, `request answered 503: ${e.message}`);
    } else if (e.status >= 500) {
      logger.error({ requestId: res.locals.requestId, err: (err as Error)?.message, stack: (err as Error)?.stack, method: req.method, path: req.path }, 'request failed');
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (e.code === 'UNAVAILABLE') res.setHeader('Retry-After', String(RETRY_AFTER_SECONDS));
    res.status(e.status).json({ error: { code: e.code, message: e.message, ...(e.details === undefined ? {} : { details: e.details }) } });
  });

  async function requireAccount(accountId: string): Promise<{ status: string }> {
    const { rows } = await pool.query<{ status: string }>('SELECT status FROM accounts WHERE id = $1', [accountId]);
    return found(rows[0], 'account', accountId);
  }

  return app;
}

/** A header's value when it is one short, printable string; anything else is ignored. */
function headerValue(value: string | string[] | undefined): string | undefined {
  return typeof value === 'string' && /^[\x21-\x7e]{1,200}$/.test(value) ? value : undefined;
}

function found<T>(row: T | undefined, what: string, key: string): T {
  if (row === undefined) throw new UserError('NOT_FOUND', `No ${what} ${key}`, 404);
  return row;
}

/** Maps body-parser's and Postgres's errors to the catalogue; anything else is a 500. */
function toUserError(err: unknown): UserError {
  if (err instanceof UserError) return err;
  const e = err as { type?: string; status?: number; message?: string; code?: string; limit?: number };
  if (e?.type === 'entity.parse.failed') return new UserError('INVALID_JSON', `Request body is not valid JSON: ${e.message}`, 400);
  if (e?.type === 'entity.too.large') return new UserError('BODY_TOO_LARGE', `Request body is larger than the limit of ${e.limit} bytes`, 413);
  if (e?.type === 'encoding.unsupported' || e?.type === 'charset.unsupported') return new UserError('UNSUPPORTED_MEDIA_TYPE', e.message ?? 'Unsupported body encoding', 415);
  if (e?.code === '22003') return new UserError('VALIDATION_FAILED', 'A number in the request is out of range', 400);
  // The database is slow or away: the same request may well succeed in a moment, on this task.
  if (isPoolTimeout(err)) return new UserError('UNAVAILABLE', 'The database is busy: no connection came free in time; retry shortly', 503);
  if (e?.code === QUERY_CANCELED) return new UserError('UNAVAILABLE', 'The database did not answer in time; retry shortly', 503);
  if (isConnectionError(err)) return new UserError('UNAVAILABLE', 'The database is unreachable; retry shortly', 503);
  return new UserError('INTERNAL', 'Internal server error', 500);
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
