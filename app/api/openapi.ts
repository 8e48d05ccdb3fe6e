/**
 * The API's contract as an OpenAPI 3.1 document, built from the same zod schemas the routes
 * validate with (zod's JSON Schema output), served at GET /openapi.json with no key, and
 * committed as docs/openapi.json (a test fails when that copy is stale).
 */
import { Router } from 'express';
import { z } from 'zod';
import { account, accountWithUsage, newAccount } from './accounts.js';
import { apiKey, keyPath, mintedKey } from './keys.js';
import { invoice, newInvoice } from './invoices.js';
import { accountPath, page } from './request.js';
import { newUsage, usageEvent, usageQuery } from './usage.js';

const errorBody = z.strictObject({
  error: z.strictObject({ code: z.string(), message: z.string(), details: z.unknown().optional() }),
});
const pageBody = (item: z.ZodType) => z.strictObject({ items: z.array(item), next: z.string().nullable() });

type Who = 'anyone' | 'operator' | 'operator or account';

interface Operation {
  readonly method: 'get' | 'post' | 'delete';
  readonly path: string;
  readonly summary: string;
  readonly who: Who;
  readonly params?: z.ZodObject;
  readonly query?: z.ZodObject;
  readonly body?: z.ZodType;
  /** The success status and its body. */
  readonly ok: readonly [number, z.ZodType];
  /** Further answers the route documents, beside 400/401/404/429/503. */
  readonly also?: readonly number[];
}

/** Every route that needs a key, with its schemas: the fuzzer reads this list too (through the document). */
export const OPERATIONS: readonly Operation[] = [
  { method: 'get', path: '/accounts', summary: 'A page of accounts (an account sees itself only)', who: 'operator or account', query: page, ok: [200, pageBody(account)] },
  { method: 'post', path: '/accounts', summary: 'Create an account', who: 'operator', body: newAccount, ok: [201, account], also: [403, 409, 413, 415] },
  { method: 'get', path: '/accounts/{id}', summary: 'An account and its usage over 30 days', who: 'operator or account', params: accountPath, ok: [200, accountWithUsage] },
  { method: 'get', path: '/accounts/{id}/usage', summary: "A page of the account's usage events", who: 'operator or account', params: accountPath, query: usageQuery, ok: [200, pageBody(usageEvent)] },
  { method: 'post', path: '/accounts/{id}/usage', summary: 'Report a usage event (200: a retry with the same idempotency key)', who: 'operator or account', params: accountPath, body: newUsage, ok: [201, usageEvent], also: [200, 409, 413, 415, 422] },
  { method: 'get', path: '/accounts/{id}/invoices', summary: "A page of the account's invoices", who: 'operator or account', params: accountPath, query: page, ok: [200, pageBody(invoice)] },
  { method: 'post', path: '/accounts/{id}/invoices', summary: 'Bill one past UTC day now (200: it already existed)', who: 'operator', params: accountPath, body: newInvoice, ok: [201, invoice], also: [200, 403, 409, 413, 415, 422] },
  { method: 'get', path: '/invoices/{id}', summary: 'One invoice', who: 'operator or account', params: accountPath, ok: [200, invoice] },
  { method: 'post', path: '/accounts/{id}/api-keys', summary: 'Mint an API key (the key is in this answer only)', who: 'operator', params: accountPath, ok: [201, mintedKey], also: [403, 409, 413, 415] },
  { method: 'get', path: '/accounts/{id}/api-keys', summary: "A page of the account's keys (prefixes only)", who: 'operator or account', params: accountPath, query: page, ok: [200, pageBody(apiKey)] },
  { method: 'delete', path: '/accounts/{id}/api-keys/{keyId}', summary: 'Revoke a key, at once', who: 'operator or account', params: keyPath, ok: [200, apiKey] },
];

const health = z.strictObject({ status: z.string() });
const OPEN: readonly { path: string; summary: string; codes: readonly number[] }[] = [
  { path: '/healthz', summary: 'The process answers', codes: [200] },
  { path: '/livez', summary: "The load balancer's check: 503 with the reason replacing this task would fix", codes: [200, 503] },
  { path: '/readyz', summary: 'The database answers and the process is not draining', codes: [200, 503] },
];

/** A path and the methods its routes serve: what a 405's Allow header lists (app/api/methods.ts). */
export interface RouteMethods { readonly path: string; readonly methods: readonly string[] }

function byPath(routes: readonly { path: string; method: string }[]): RouteMethods[] {
  const methods = new Map<string, string[]>();
  for (const r of routes) methods.set(r.path, [...(methods.get(r.path) ?? []), r.method.toUpperCase()]);
  return [...methods].map(([path, m]) => ({ path, methods: m }));
}
/** The routes open to anyone: the health checks and this document. */
export const OPEN_ROUTES: readonly RouteMethods[] = byPath([...OPEN, { path: '/openapi.json' }].map((o) => ({ path: o.path, method: 'get' })));
/** The routes that need a key. */
export const KEYED_ROUTES: readonly RouteMethods[] = byPath(OPERATIONS);

const STATUS_TEXT: Record<number, string> = {
  200: 'OK', 201: 'Created', 400: 'Invalid input, naming the field', 401: 'No key, or an unknown or revoked one', 403: 'Only the operator may',
  404: 'Not found, or another tenant\'s', 409: 'Conflict', 413: 'Body over BODY_LIMIT_BYTES', 415: 'Not UTF-8 JSON', 422: 'Refused',
  429: 'Over the key\'s rate limit (RATE_LIMITED); see Retry-After and RateLimit', 503: 'The database is busy or away (UNAVAILABLE), or the request passed its deadline (DEADLINE_EXCEEDED); see Retry-After',
};

const header = (description: string, schema: Record<string, unknown>) => ({ description, schema });
const retryAfter = header('Seconds to wait before retrying', { type: 'integer', minimum: 0 });
/** Headers an error answer carries, by status. */
const ERROR_HEADERS: Record<number, Record<string, unknown>> = {
  429: {
    'Retry-After': retryAfter,
    'RateLimit-Policy': header('The quota per window (IETF draft-ietf-httpapi-ratelimit-headers): "per-key";q=<requests>;w=<seconds>', { type: 'string' }),
    RateLimit: header('What is left of it: "per-key";r=<remaining>;t=<seconds until the window resets>', { type: 'string' }),
  },
  503: { 'Retry-After': retryAfter },
};

const schemaOf = (s: z.ZodType, io: 'input' | 'output') => {
  const { $schema: _drop, ...rest } = z.toJSONSchema(s, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
};
const json = (s: unknown) => ({ 'application/json': { schema: s } });

function operationObject(op: Operation): Record<string, unknown> {
  const parameters = [
    ...Object.entries(op.params?.shape ?? {}).map(([name, s]) => ({ name, in: 'path', required: true, schema: schemaOf(s as z.ZodType, 'input') })),
    ...Object.entries(op.query?.shape ?? {}).map(([name, s]) => ({ name, in: 'query', required: false, schema: schemaOf(s as z.ZodType, 'input') })),
  ];
  const errorCodes = [400, 401, 404, 429, 503, ...(op.also ?? []).filter((c) => c >= 400)];
  const successCodes = [op.ok[0], ...(op.also ?? []).filter((c) => c < 400)];
  const responses: Record<string, unknown> = {};
  for (const code of [...new Set(successCodes)].sort()) responses[String(code)] = { description: STATUS_TEXT[code], content: json(schemaOf(op.ok[1], 'output')) };
  for (const code of [...new Set(errorCodes)].sort()) {
    responses[String(code)] = { description: STATUS_TEXT[code], ...(ERROR_HEADERS[code] ? { headers: ERROR_HEADERS[code] } : {}), content: json({ $ref: '#/components/schemas/Error' }) };
  }
  return {
    operationId: `${op.method}${op.path.replace(/[{}]/g, '').replace(/\/(\w)/g, (_m, c: string) => c.toUpperCase()).replace(/-(\w)/g, (_m, c: string) => c.toUpperCase())}`,
    summary: op.summary,
    description: `Who may call it: ${op.who}.`,
    security: [{ bearer: [] }],
    ...(parameters.length ? { parameters } : {}),
    ...(op.body ? { requestBody: { required: true, content: json(schemaOf(op.body, 'input')) } } : {}),
    responses,
  };
}

/** The document; the same object whatever the environment, so the committed copy can be compared. */
export function openApiDocument(): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPERATIONS) (paths[op.path] ??= {})[op.method] = operationObject(op);
  for (const o of OPEN) {
    paths[o.path] = {
      get: {
        operationId: `get${o.path.slice(1, 2).toUpperCase()}${o.path.slice(2)}`,
        summary: o.summary,
        security: [],
        responses: Object.fromEntries(o.codes.map((c) => [String(c), { description: STATUS_TEXT[c], content: json(schemaOf(health, 'output')) }])),
      },
    };
  }
  paths['/openapi.json'] = { get: { operationId: 'getOpenApi', summary: 'This document', security: [], responses: { 200: { description: 'OK', content: json({ type: 'object' }) } } } };
  return {
    openapi: '3.1.0',
    info: { title: 'ecs-saas-backend API', version: '1', description: 'Accounts, their usage, invoices and API keys. Errors answer {"error": {"code", "message", "details"?}}. A method a path does not serve (OPTIONS, PUT, PATCH, TRACE, or one listed under another path) answers 405 METHOD_NOT_ALLOWED with an Allow header; on a path that needs a key, the key is checked first.' },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'The admin key (the operator) or an account API key (sbk_...)' } },
      schemas: { Error: schemaOf(errorBody, 'output') },
    },
    security: [{ bearer: [] }],
    paths,
  };
}

/** The document as text: what GET /openapi.json answers, byte for byte the committed docs/openapi.json. */
export const openApiText = () => `${JSON.stringify(openApiDocument(), null, 2)}\n`;

export function openApiRouter(): Router {
  const router = Router();
  const body = openApiText();
  router.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(body);
  });
  return router;
}
