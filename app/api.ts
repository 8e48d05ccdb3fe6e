/**
 * The HTTP API: accounts, their usage and their invoices, plus health and debug routes.
 *
 * Errors answer `{ "error": { "code", "message", "details"? } }` with a code from
 * app/errors.ts. Invalid JSON and failed validation answer 400 and name the field; an
 * unknown route 404; anything unexpected 500 with no stack (the stack goes to the log).
 *
 * Every route past the health and debug ones needs `Authorization: Bearer <key>`
 * (app/auth.ts) and runs its SQL as the caller (app/tenancy.ts: `queryAs` for one-statement
 * reads, `withIdentity` for the rest), so Postgres's row-level policies, not the handlers'
 * WHERE clauses, decide which rows a caller can reach: another tenant's row is simply not
 * there, and answers the same 404 as a missing one.
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { authenticate, identityOf, keyIsLive, newApiKey, requireOperator, unauthorized } from './auth.js';
import { billAccounts, dayPeriod, MAX_UNIT_PRICE_CENTS, MAX_USAGE_QUANTITY } from './billing.js';
import type { Config } from './config.js';
import type { Pool } from './db.js';
import { dbTrouble, isPoolTimeout, type DbTrouble } from './db-errors.js';
import { UserError } from './errors.js';
import type { Logger } from './logger.js';
import { queryAs, UnknownKeyError, withIdentity, type Queryable } from './tenancy.js';

export interface ApiDeps {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly config: Pick<Config, 'BODY_LIMIT_BYTES' | 'ENABLE_DEBUG_ROUTES' | 'ADMIN_API_KEY'>;
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
/** One year: browsers then keep to HTTPS between visits. */
const HSTS_MAX_AGE_SECONDS = 31_536_000;

const id = z.string().regex(/^[1-9]\d{0,17}$/, { message: 'must be a positive whole number' });
/**
 * Years before 1970 are refused: nothing was metered then, and JavaScript's Date.UTC reads
 * years 0-99 as 1900-1999, which would move such a date silently. Postgres has no year 0.
 */
const MIN_YEAR = 1970;
const plausibleYear = (v: string) => Number(v.slice(0, 4)) >= MIN_YEAR;
const yearMessage = { message: `must be in ${MIN_YEAR} or later` };
const timestamp = z.iso.datetime({ offset: true }).refine(plausibleYear, yearMessage);
const page = z.object({
  limit: z.coerce.number().int().min(1).max(MAX_PAGE).default(20),
  after: id.optional(),
});
const isoDay = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, { message: 'must be a date YYYY-MM-DD' }).refine((v) => !Number.isNaN(Date.parse(`${v}T00:00:00Z`)) && new Date(`${v}T00:00:00Z`).toISOString().startsWith(v), { message: 'must be a real calendar date' }).refine(plausibleYear, yearMessage);

const newAccount = z.strictObject({
  name: z.string().trim().min(1).max(200),
  email: z.email().max(320),
  plan: z.enum(['free', 'standard', 'enterprise']).default('standard'),
  unitPriceCents: z.number().int().min(0).max(MAX_UNIT_PRICE_CENTS).default(1),
});
const newUsage = z.strictObject({
  metric: z.string().regex(/^[a-z][a-z0-9_.]{0,63}$/, { message: 'must be lower-case letters, digits, "_" or ".", starting with a letter' }),
  quantity: z.number().int().min(0).max(MAX_USAGE_QUANTITY),
  occurredAt: timestamp.optional(),
  idempotencyKey: z.string().min(1).max(200).optional(),
});
const newInvoice = z.strictObject({ periodStart: isoDay });
const accountPath = z.object({ id });
const keyPath = z.object({ id, keyId: id });
const sleepQuery = z.object({ ms: z.coerce.number().int().min(0).max(MAX_DEBUG_SLEEP_MS) });
const crashQuery = z.object({ kind: z.enum(['exception', 'rejection']) });
const usageQuery = page.extend({ from: timestamp.optional(), to: timestamp.optional() });

/** Parses `input` with `schema`, or throws a 400 naming every bad field. */
function parse<T extends z.ZodType>(schema: T, input: unknown, where: 'body' | 'query' | 'path'): z.infer<T> {
  if (where === 'body' && (input === undefined || input === null || typeof input !== 'object' || Array.isArray(input))) {
    throw new UserError('VALIDATION_FAILED', 'Request body must be a JSON object', 400);
  }
  const nul = nulAt(input, []);
  if (nul !== undefined) {
    const field = nul.length ? nul.join('.') : where;
    throw new UserError('VALIDATION_FAILED', `Invalid ${where}: ${field}: must not contain a NUL character`, 400, { fields: [{ field, message: 'must not contain a NUL character' }] });
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

/** The path to the first string (or key) holding U+0000, which Postgres text cannot store. */
function nulAt(value: unknown, path: (string | number)[]): (string | number)[] | undefined {
  if (typeof value === 'string') return value.includes('\0') ? path : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  for (const [k, v] of Object.entries(value)) {
    if (k.includes('\0')) return [...path, k];
    const found = nulAt(v, [...path, k]);
    if (found) return found;
  }
  return undefined;
}

const ACCOUNT_COLUMNS = `a.id::text AS id, a.name, a.email, a.plan, a.status, a.unit_price_cents AS "unitPriceCents", a.created_at AS "createdAt"`;
const USAGE_COLUMNS = `id::text AS id, account_id::text AS "accountId", metric, quantity::float8 AS quantity, occurred_at AS "occurredAt", idempotency_key AS "idempotencyKey"`;
const KEY_COLUMNS = `id::text AS id, account_id::text AS "accountId", prefix, created_at AS "createdAt", revoked_at AS "revokedAt"`;
const INVOICE_COLUMNS = `id::text AS id, account_id::text AS "accountId", to_char(period_start, 'YYYY-MM-DD') AS "periodStart", to_char(period_end, 'YYYY-MM-DD') AS "periodEnd", quantity::float8 AS quantity, amount_cents::float8 AS "amountCents", currency, created_at AS "createdAt"`;

export function createApi({ pool, logger, config, isDraining, liveness = () => (isDraining() ? 'draining' : undefined) }: ApiDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);

  app.use((req, res, next) => {
    res.setHeader('X-Content-Type-Options', 'nosniff');
    // The ALB terminates TLS and says so in X-Forwarded-Proto; over plain HTTP the header means nothing.
    if (req.headers['x-forwarded-proto'] === 'https') res.setHeader('Strict-Transport-Security', `max-age=${HSTS_MAX_AGE_SECONDS}`);
    next();
  });

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
    // Everything from here on may carry personal data (emails, usage, invoices, keys).
    res.setHeader('Cache-Control', 'no-store');
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

  app.use(authenticate(config.ADMIN_API_KEY));

  /** Runs `fn`'s SQL as the caller, in one transaction. */
  const asCaller = <T>(res: Response, fn: (db: Queryable) => Promise<T>) => withIdentity(pool, identityOf(res), fn);
  /** One read-only statement as the caller, in one round trip (authentication included). */
  const readAs = (res: Response, sql: string, params: readonly unknown[]) => queryAs<Record<string, any>>(pool, identityOf(res), sql, params);

  // Only the routes that take a body parse one; GETs skip the parser altogether.
  const parseJson = express.json({ limit: config.BODY_LIMIT_BYTES, strict: true });
  const requireJson: express.RequestHandler = (req, res, next) => {
    if (!req.is('application/json')) {
      throw new UserError('UNSUPPORTED_MEDIA_TYPE', 'Request body must be JSON (Content-Type: application/json)', 415);
    }
    if (Number(req.headers['content-length']) > config.BODY_LIMIT_BYTES) {
      tooLarge(req, res, config.BODY_LIMIT_BYTES);
      return;
    }
    // body-parser, past its limit, still reads the body to its end before it answers (2.7 GB
    // in the issue). Counting the bytes as they come answers 413 as soon as they pass it.
    let seen = 0;
    const count = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen <= config.BODY_LIMIT_BYTES) return;
      req.off('data', count);
      tooLarge(req, res, config.BODY_LIMIT_BYTES);
    };
    req.on('data', count);
    parseJson(req, res, next);
  };

  // The operator pages through every account; an account sees itself only.
  app.get('/accounts', async (req, res) => {
    const q = parse(page, req.query, 'query');
    const rows = await readAs(res, `SELECT ${ACCOUNT_COLUMNS} FROM accounts a WHERE a.id > $1 ORDER BY a.id LIMIT $2`, [q.after ?? '0', q.limit]);
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1)!.id : null });
  });

  app.post('/accounts', requireJson, async (req, res) => {
    requireOperator(res, 'create accounts');
    const body = parse(newAccount, req.body, 'body');
    const { rows } = await asCaller(res, (db) =>
      db.query(
        `INSERT INTO accounts AS a (name, email, plan, unit_price_cents) VALUES ($1, $2, $3, $4)
         ON CONFLICT (lower(email)) DO NOTHING RETURNING ${ACCOUNT_COLUMNS}`,
        [body.name, body.email, body.plan, body.unitPriceCents],
      ),
    );
    if (rows.length === 0) throw new UserError('CONFLICT', `An account with email ${body.email} already exists`, 409, { field: 'email' });
    res.status(201).location(`/accounts/${rows[0].id}`).json(rows[0]);
  });

  app.get('/accounts/:id', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const rows = await readAs(
      res,
      `SELECT ${ACCOUNT_COLUMNS},
              json_build_object('quantity', coalesce(s.quantity, 0)::float8, 'lastUsageAt', s.last_usage_at, 'refreshedAt', s.refreshed_at) AS "usage30d"
       FROM accounts a LEFT JOIN tenant_account_usage_30d s ON s.account_id = a.id WHERE a.id = $1`,
      [accountId],
    );
    res.json(found(rows[0], 'account', accountId));
  });

  app.get('/accounts/:id/usage', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(usageQuery, req.query, 'query');
    const rows = await asCaller(res, async (db) => {
      await requireAccount(db, accountId);
      const result = await db.query(
        `SELECT ${USAGE_COLUMNS} FROM usage
         WHERE account_id = $1 AND id > $2 AND occurred_at >= coalesce($3::timestamptz, '-infinity') AND occurred_at < coalesce($4::timestamptz, 'infinity')
         ORDER BY usage.id LIMIT $5`,
        [accountId, q.after ?? '0', q.from ?? null, q.to ?? null, q.limit],
      );
      return result.rows;
    });
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1).id : null });
  });

  // Usage for a UTC day that already has the account's invoice is refused with 409: that
  // invoice is final, and the usage would otherwise be stored and never billed. A retry with
  // the same idempotency key answers the original row (200) when the payload is the same,
  // and 422 when it differs (Stripe's rule).
  app.post('/accounts/:id/usage', requireJson, async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const body = parse(newUsage, req.body, 'body');
    const { status, row } = await asCaller(res, async (db) => {
      // FOR SHARE: billing locks the account before it sums the day (app/billing.ts), so this
      // report either commits before that sum or sees the invoice below.
      await requireAccount(db, accountId, 'FOR SHARE');
      const inserted = await db.query(
        `INSERT INTO usage (account_id, metric, quantity, occurred_at, idempotency_key)
         SELECT $1, $2, $3, at, $5 FROM (SELECT coalesce($4::timestamptz, now()) AS at) t
         WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE i.account_id = $1 AND i.period_start = (t.at AT TIME ZONE 'UTC')::date)
         ON CONFLICT (account_id, idempotency_key) DO NOTHING RETURNING ${USAGE_COLUMNS}`,
        [accountId, body.metric, body.quantity, body.occurredAt ?? null, body.idempotencyKey ?? null],
      );
      if (inserted.rows.length > 0) return { status: 201, row: inserted.rows[0] };
      if (body.idempotencyKey !== undefined) {
        const { rows } = await db.query(
          `SELECT ${USAGE_COLUMNS}, (metric = $3 AND quantity = $4 AND ($5::timestamptz IS NULL OR occurred_at = $5::timestamptz)) AS same
           FROM usage WHERE account_id = $1 AND idempotency_key = $2`,
          [accountId, body.idempotencyKey, body.metric, body.quantity, body.occurredAt ?? null],
        );
        if (rows[0]) {
          const { same, ...original } = rows[0];
          if (!same) {
            throw new UserError('IDEMPOTENCY_KEY_REUSED', `Idempotency key ${JSON.stringify(body.idempotencyKey)} was already used with a different payload (usage ${original.id})`, 422);
          }
          return { status: 200, row: original };
        }
      }
      const day = (body.occurredAt ? new Date(body.occurredAt) : new Date()).toISOString().slice(0, 10);
      throw new UserError('CONFLICT', `Account ${accountId} is already invoiced for ${day} (UTC); usage for an invoiced day is refused`, 409, { field: 'occurredAt' });
    });
    res.status(status).json(row);
  });

  app.get('/accounts/:id/invoices', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(page, req.query, 'query');
    const rows = await asCaller(res, async (db) => {
      await requireAccount(db, accountId);
      const result = await db.query(
        `SELECT ${INVOICE_COLUMNS} FROM invoices WHERE account_id = $1 AND id > $2 ORDER BY invoices.id LIMIT $3`,
        [accountId, q.after ?? '0', q.limit],
      );
      return result.rows;
    });
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1).id : null });
  });

  // Bills one account for one day now, by the same rule as billing-run: a second call, or the
  // nightly run afterwards, finds the invoice and leaves it as it is. The operator's only.
  app.post('/accounts/:id/invoices', requireJson, async (req, res) => {
    requireOperator(res, 'bill accounts');
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const body = parse(newInvoice, req.body, 'body');
    const period = dayPeriod(new Date(`${body.periodStart}T00:00:00Z`));
    if (period.end > new Date().toISOString().slice(0, 10)) {
      throw new UserError('VALIDATION_FAILED', `Invalid body: periodStart ${body.periodStart} has not ended yet; only past days can be billed`, 400, { fields: [{ field: 'periodStart', message: 'must be a day that has ended (UTC)' }] });
    }
    const { inserted, invoice } = await asCaller(res, async (db) => {
      const account = await requireAccount(db, accountId);
      if (account.status !== 'active') {
        throw new UserError('CONFLICT', `Account ${accountId} is ${account.status}; only active accounts are billed`, 409);
      }
      const result = await billAccounts(db, period, { accountId });
      const { rows } = await db.query(`SELECT ${INVOICE_COLUMNS} FROM invoices WHERE account_id = $1 AND period_start = $2`, [accountId, period.start]);
      return { inserted: result.inserted, invoice: rows[0] };
    });
    res.status(inserted > 0 ? 201 : 200).json(found(invoice, 'invoice for account', `${accountId} on ${period.start} (the account was created after that day)`));
  });

  app.get('/invoices/:id', async (req, res) => {
    const { id: invoiceId } = parse(accountPath, req.params, 'path');
    const rows = await readAs(res, `SELECT ${INVOICE_COLUMNS} FROM invoices WHERE id = $1`, [invoiceId]);
    res.json(found(rows[0], 'invoice', invoiceId));
  });

  // API keys: the key itself is in the creation's answer only; listings show its prefix.
  app.post('/accounts/:id/api-keys', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const created = newApiKey();
    const row = await asCaller(res, async (db) => {
      await requireAccount(db, accountId);
      const { rows } = await db.query(`INSERT INTO api_keys (account_id, prefix, key_hash) VALUES ($1, $2, $3) RETURNING ${KEY_COLUMNS}`, [accountId, created.prefix, created.hash]);
      return rows[0];
    });
    res.status(201).location(`/accounts/${accountId}/api-keys/${row.id}`).json({ ...row, key: created.key });
  });

  app.get('/accounts/:id/api-keys', async (req, res) => {
    const { id: accountId } = parse(accountPath, req.params, 'path');
    const q = parse(page, req.query, 'query');
    const rows = await asCaller(res, async (db) => {
      await requireAccount(db, accountId);
      const result = await db.query(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = $1 AND id > $2 ORDER BY api_keys.id LIMIT $3`, [accountId, q.after ?? '0', q.limit]);
      return result.rows;
    });
    res.json({ items: rows, next: rows.length === q.limit ? rows.at(-1).id : null });
  });

  // Revoking is immediate: authentication looks the key up on every request.
  app.delete('/accounts/:id/api-keys/:keyId', async (req, res) => {
    const { id: accountId, keyId } = parse(keyPath, req.params, 'path');
    const { rows } = await asCaller(res, (db) =>
      db.query(`UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND account_id = $2 RETURNING ${KEY_COLUMNS}`, [keyId, accountId]),
    );
    res.json(found(rows[0], 'API key', `${keyId} of account ${accountId}`));
  });

  app.use((req: Request) => {
    throw new UserError('NOT_FOUND', `No route for ${req.method} ${req.path}`, 404);
  });

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const e = toUserError(err);
    const answer = (e: UserError, cause: unknown) => {
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
    // An account key is checked by the request's first query; an answer that comes before
    // any (a 400, a 403, an unknown route) checks the key first, so a dead key always gets 401.
    if (e.status >= 400 && e.status < 500 && e.status !== 401 && !res.headersSent) {
      keyIsLive(pool, res.locals.identity).then(
        (live) => answer(live ? e : unauthorized('Invalid API key'), err),
        (checkErr: unknown) => answer(toUserError(checkErr), checkErr),
      );
      return;
    }
    answer(e, err);
  });

  async function requireAccount(db: Queryable, accountId: string, lock = ''): Promise<{ status: string }> {
    const { rows } = await db.query<{ status: string }>(`SELECT status FROM accounts WHERE id = $1 ${lock}`, [accountId]);
    return found(rows[0], 'account', accountId);
  }

  return app;
}

/** How long a connection cut off for its body's size may still drain before it is destroyed. */
const CUT_OFF_LINGER_MS = 1_000;

/**
 * Answers 413 now and closes the connection: the rest of the body is never read. The socket
 * is ended after the answer, so the client can read it, and destroyed a moment later if the
 * client keeps sending.
 */
function tooLarge(req: Request, res: Response, limit: number): void {
  if (res.headersSent) return;
  res.setHeader('Connection', 'close');
  res.once('finish', () => {
    req.socket.end();
    setTimeout(() => req.socket.destroy(), CUT_OFF_LINGER_MS).unref();
  });
  const e = toUserError({ type: 'entity.too.large', limit });
  res.status(e.status).json({ error: { code: e.code, message: e.message } });
}

/** A header's value when it is one short, plain token (letters, digits and . _ : ; = -); anything else is ignored. */
function headerValue(value: string | string[] | undefined): string | undefined {
  return typeof value === 'string' && /^[A-Za-z0-9._:;=-]{1,128}$/.test(value) ? value : undefined;
}

function found<T>(row: T | undefined, what: string, key: string): T {
  if (row === undefined) throw new UserError('NOT_FOUND', `No ${what} ${key}`, 404);
  return row;
}

/** Maps body-parser's and Postgres's errors to the catalogue; anything else is a 500. */
function toUserError(err: unknown): UserError {
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

const UNAVAILABLE_MESSAGES: Record<DbTrouble, string> = {
  'connection-lost': 'The database is unreachable; retry shortly',
  busy: 'The database is busy; retry shortly',
  'read-only': 'The database is read-only for now (a failover); retry shortly',
  'timed-out': 'The database did not answer in time; retry shortly',
};

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
