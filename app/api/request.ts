/**
 * What every resource router shares: the zod schemas of ids and pages (dates: app/api/dates.ts), `parse` (a 400
 * naming every bad field), the caller's database access, and the 404 for a missing row.
 */
import type { Response } from 'express';
import { z } from 'zod';
import { identityOf, requireOperator } from '../auth.js';
import type { Pool } from '../db.js';
import { leaseOf } from '../deadline.js';
import { UserError } from '../errors.js';
import { BILLING, queryAs, withIdentity, type Queryable } from '../tenancy.js';

export const MAX_PAGE = 100;

export const id = z.string().regex(/^[1-9]\d{0,17}$/, { message: 'must be a positive whole number' });

/**
 * A whole number in a query string, in plain decimal digits only: z.coerce.number() reads
 * `0x10`, `1e2`, `5.0`, ` 5` and an empty value (as 0) as numbers too, so one value could be
 * written many ways and a typo could pass. The document shows it as the integer it is.
 */
export function queryInt(min: number, max: number) {
  return z
    .string()
    .regex(/^(0|[1-9]\d*)$/, { message: 'must be a whole number in decimal digits' })
    // Coerced, not transformed: the document keeps the default (zod drops one past a transform).
    .pipe(z.coerce.number<string>().min(min).max(max))
    .meta({ type: 'integer', minimum: min, maximum: max, pattern: undefined });
}

export const page = z.object({
  limit: queryInt(1, MAX_PAGE).default(20),
  after: id.optional(),
});
export const accountPath = z.object({ id });

/**
 * A page's rows are read with `LIMIT limit + 1` (`pageRows`): the extra row, never answered,
 * says whether a next page exists, so the last page is never an empty one.
 */
export const pageRows = (limit: number) => limit + 1;

/** A page of at most `limit` rows, read with `pageRows(limit)`, and the cursor of the next one (null on the last page). */
export function pageOf<T extends { id: string }>(rows: T[], limit: number): { items: T[]; next: string | null } {
  const items = rows.slice(0, limit);
  return { items, next: rows.length > limit ? items.at(-1)!.id : null };
}

type Where = 'body' | 'query' | 'path';

/** Parses `input` with `schema`, or throws a 400 naming every bad field. */
export function parse<T extends z.ZodType>(schema: T, input: unknown, where: Where): z.infer<T> {
  if (where === 'body' && (input === undefined || input === null || typeof input !== 'object' || Array.isArray(input))) {
    throw new UserError('VALIDATION_FAILED', 'Request body must be a JSON object', 400);
  }
  const bad = where === 'query' ? badQuery(schema, input as Record<string, unknown>) : badTextAt(input);
  if (bad !== undefined) {
    const field = bad.path.length ? bad.path.join('.') : where;
    throw new UserError('VALIDATION_FAILED', `Invalid ${where}: ${field}: ${bad.message}`, 400, { fields: [{ field, message: bad.message }] });
  }
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const fields = result.error.issues.map((issue) => ({
    field: issue.path.length ? issue.path.join('.') : issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : where,
    message: issue.code === 'unrecognized_keys' ? 'is not a known field' : issue.message,
  }));
  const summary = fields.map((f) => `${f.field}: ${f.message}`).join('; ');
  throw new UserError('VALIDATION_FAILED', `Invalid ${where}: ${summary}`, 400, { fields });
}

interface BadText { readonly path: (string | number)[]; readonly message: string }

const NUL = 'must not contain a NUL character';
const LONE_SURROGATE = 'must not contain a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape)';

/**
 * The message for a string Postgres cannot store as sent: U+0000, which text refuses, or a
 * lone surrogate (`"\uD800"` is valid JSON), which UTF-8 cannot encode, so it would be
 * stored as U+FFFD: a changed value, silently.
 */
function textProblem(s: string): string | undefined {
  if (s.includes('\0')) return NUL;
  if (!s.isWellFormed()) return LONE_SURROGATE;
  return undefined;
}

/**
 * The path to the first string (or key) that `textProblem` refuses, with its message.
 * Iterative, and linear in the values visited: each entry keeps a link to its parent, and a
 * path is built only for the one value found.
 */
export function badTextAt(root: unknown): BadText | undefined {
  interface Entry { readonly value: unknown; readonly key: string | number | undefined; readonly parent: Entry | undefined }
  const pathOf = (e: Entry | undefined): (string | number)[] => {
    const path: (string | number)[] = [];
    for (let at = e; at?.key !== undefined; at = at.parent) path.push(at.key);
    return path.reverse();
  };
  const stack: Entry[] = [{ value: root, key: undefined, parent: undefined }];
  while (stack.length > 0) {
    const entry = stack.pop()!;
    const { value } = entry;
    if (typeof value === 'string') {
      const message = textProblem(value);
      if (message !== undefined) return { path: pathOf(entry), message };
    } else if (value !== null && typeof value === 'object') {
      for (const k of Object.keys(value)) {
        const child: Entry = { value: (value as Record<string, unknown>)[k], key: Array.isArray(value) ? Number(k) : k, parent: entry };
        const message = textProblem(k);
        if (message !== undefined) return { path: pathOf(child), message };
        stack.push(child);
      }
    }
  }
  return undefined;
}

/**
 * The first problem with a query's known parameters. Parameters the route does not take are
 * ignored, whatever they hold: the OpenAPI document cannot forbid them, so a client that
 * validates against it would send them.
 */
function badQuery(schema: z.ZodType, query: Record<string, unknown>): BadText | undefined {
  const known = schema instanceof z.ZodObject ? Object.fromEntries(Object.keys(schema.shape).filter((k) => k in query).map((k) => [k, query[k]])) : query;
  return repeatedIn(known) ?? badTextAt(known);
}

/** A query parameter given more than once (`?limit=5&limit=6` parses to an array): which one was meant is a guess. */
function repeatedIn(query: Record<string, unknown>): BadText | undefined {
  for (const k of Object.keys(query)) if (Array.isArray(query[k])) return { path: [k], message: 'must be given once' };
  return undefined;
}

export function found<T>(row: T | undefined, what: string, key: string): T {
  if (row === undefined) throw new UserError('NOT_FOUND', `No ${what} ${key}`, 404);
  return row;
}

/** The caller's view of the database: its SQL runs under its identity (app/tenancy.ts). */
export interface CallerDb {
  /** Runs `fn`'s SQL as the caller, in one transaction. */
  as<T>(res: Response, fn: (db: Queryable) => Promise<T>): Promise<T>;
  /** One read-only statement as the caller, in one round trip (authentication included). */
  read(res: Response, sql: string, params: readonly unknown[]): Promise<Record<string, any>[]>;
  /** Runs `fn`'s SQL as the billing role, the one writer of invoices, in one transaction: the operator's only. */
  bill<T>(res: Response, fn: (db: Queryable) => Promise<T>): Promise<T>;
}

export function callerDb(pool: Pool): CallerDb {
  return {
    as: (res, fn) => withIdentity(pool, identityOf(res), fn, leaseOf(res)),
    read: (res, sql, params) => queryAs<Record<string, any>>(pool, identityOf(res), sql, params, leaseOf(res)),
    bill: (res, fn) => {
      requireOperator(res, 'bill accounts');
      return withIdentity(pool, BILLING, fn, leaseOf(res));
    },
  };
}

/** The account's status, or a 404 when the caller cannot see it. `lock` is a row lock clause. */
export async function requireAccount(db: Queryable, accountId: string, lock = ''): Promise<{ status: string; createdAt: Date }> {
  const { rows } = await db.query<{ status: string; createdAt: Date }>(`SELECT status, created_at AS "createdAt" FROM accounts WHERE id = $1 ${lock}`, [accountId]);
  return found(rows[0], 'account', accountId);
}

/** Rows of one account, in one transaction as the caller: a 404 when the caller cannot see the account. */
export function accountRows(db: CallerDb, res: Response, accountId: string, sql: string, params: unknown[]): Promise<({ id: string } & Record<string, unknown>)[]> {
  return db.as(res, async (c) => {
    await requireAccount(c, accountId);
    return (await c.query(sql, params)).rows;
  });
}
