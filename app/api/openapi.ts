/**
 * The API's contract as an OpenAPI 3.1 document, built from the same zod schemas the routes
 * validate with (zod's JSON Schema output), served at GET /openapi.json with no key, and
 * committed as docs/openapi.json (a test fails when that copy is stale).
 */
import { Router } from 'express';
import { z } from 'zod';
import { account, accountWithUsage, newAccount } from './accounts.js';
import { API_ERRORS, type ApiErrorCode } from '../errors.js';
import { apiKey, keyPath, mintedKey, newKey } from './keys.js';
import { invoice, newInvoice } from './invoices.js';
import { ANYONE_ERRORS, BODY_ERRORS, byStatus, headerRefs, headersFor, HEADERS, KEYED_ERRORS, STATUS_TEXT } from './openapi-responses.js';
import { accountPath, page } from './request.js';
import { newUsage, usageEvent, usageQuery } from './usage.js';

const errorBody = z.strictObject({
  error: z.strictObject({ code: z.enum(Object.keys(API_ERRORS) as [ApiErrorCode, ...ApiErrorCode[]]), message: z.string(), details: z.unknown().optional() }),
});
const pageBody = (item: z.ZodType) => z.strictObject({ items: z.array(item), next: z.string().nullable().describe('the `after` of the next page; null on the last page, which is never empty unless the list is') });

type Who = 'anyone' | 'operator' | 'operator or account';

interface Operation {
  readonly method: 'get' | 'post' | 'delete';
  readonly path: string;
  readonly summary: string;
  readonly who: Who;
  readonly params?: z.ZodObject;
  readonly query?: z.ZodObject;
  readonly body?: z.ZodType;
  /** False when the body may be left out. */
  readonly bodyRequired?: boolean;
  /** The success status and its body. */
  readonly ok: readonly [number, z.ZodType];
  /** A second success status with the same body (200: it already existed). */
  readonly alsoOk?: number;
  /** The route's own error codes, beside every keyed route's (app/api/openapi-responses.ts). */
  readonly errors?: readonly ApiErrorCode[];
  /** The success answer's headers. */
  readonly okHeaders?: readonly string[];
}

/** Every route that needs a key, with its schemas: the fuzzer reads this list too (through the document). */
export const OPERATIONS: readonly Operation[] = [
  { method: 'get', path: '/accounts', summary: 'A page of accounts (an account sees itself only)', who: 'operator or account', query: page, ok: [200, pageBody(account)] },
  { method: 'post', path: '/accounts', summary: 'Create an account', who: 'operator', body: newAccount, ok: [201, account], okHeaders: ['Location'], errors: ['FORBIDDEN', 'CONFLICT'] },
  { method: 'get', path: '/accounts/{id}', summary: 'An account and its usage over 30 days', who: 'operator or account', params: accountPath, ok: [200, accountWithUsage] },
  { method: 'get', path: '/accounts/{id}/usage', summary: "A page of the account's usage events", who: 'operator or account', params: accountPath, query: usageQuery, ok: [200, pageBody(usageEvent)] },
  { method: 'post', path: '/accounts/{id}/usage', summary: 'Report a usage event (200: a retry with the same idempotency key)', who: 'operator or account', params: accountPath, body: newUsage, ok: [201, usageEvent], alsoOk: 200, errors: ['CONFLICT', 'IDEMPOTENCY_KEY_REUSED', 'USAGE_NOT_BILLABLE'] },
  { method: 'get', path: '/accounts/{id}/invoices', summary: "A page of the account's invoices", who: 'operator or account', params: accountPath, query: page, ok: [200, pageBody(invoice)] },
  { method: 'post', path: '/accounts/{id}/invoices', summary: 'Bill one past UTC day now (200: it already existed)', who: 'operator', params: accountPath, body: newInvoice, ok: [201, invoice], alsoOk: 200, errors: ['FORBIDDEN', 'CONFLICT', 'PERIOD_NOT_BILLABLE'] },
  { method: 'get', path: '/invoices/{id}', summary: 'One invoice', who: 'operator or account', params: accountPath, ok: [200, invoice] },
  { method: 'post', path: '/accounts/{id}/api-keys', summary: 'Mint an API key (the key is in this answer only); the body, if any, is an empty object', who: 'operator', params: accountPath, body: newKey, bodyRequired: false, ok: [201, mintedKey], okHeaders: ['Location'], errors: ['FORBIDDEN', 'TOO_MANY_KEYS'] },
  { method: 'get', path: '/accounts/{id}/api-keys', summary: "A page of the account's keys (prefixes only)", who: 'operator or account', params: accountPath, query: page, ok: [200, pageBody(apiKey)] },
  { method: 'delete', path: '/accounts/{id}/api-keys/{keyId}', summary: 'Revoke a key, at once', who: 'operator or account', params: keyPath, ok: [200, apiKey] },
];

/** Every error code `op` can answer. */
export const errorsOf = (op: Operation): ApiErrorCode[] => [...new Set([...KEYED_ERRORS, ...(op.body ? BODY_ERRORS : []), ...(op.errors ?? [])])];

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

const schemaOf = (s: z.ZodType, io: 'input' | 'output') => {
  const { $schema: _drop, ...rest } = z.toJSONSchema(s, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
};
const json = (s: unknown) => ({ 'application/json': { schema: s } });
const codeList = (codes: readonly string[]) => codes.map((c) => `\`${c}\``).join(', ');

function errorResponses(codes: readonly ApiErrorCode[], keyed: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [status, forStatus] of byStatus(codes)) {
    out[String(status)] = { description: `${STATUS_TEXT[status]}: ${codeList(forStatus)}`, ...headerRefs(headersFor(status, keyed)), content: json({ $ref: '#/components/schemas/Error' }) };
  }
  return out;
}

function operationObject(op: Operation): Record<string, unknown> {
  const parameters = [
    ...Object.entries(op.params?.shape ?? {}).map(([name, s]) => ({ name, in: 'path', required: true, schema: schemaOf(s as z.ZodType, 'input') })),
    ...Object.entries(op.query?.shape ?? {}).map(([name, s]) => ({ name, in: 'query', required: false, schema: schemaOf(s as z.ZodType, 'input') })),
  ];
  const success = (status: number) => ({
    description: STATUS_TEXT[status],
    ...headerRefs([...headersFor(status, true), ...(status === op.ok[0] ? (op.okHeaders ?? []) : [])]),
    content: json(schemaOf(op.ok[1], 'output')),
  });
  const responses: Record<string, unknown> = Object.fromEntries([op.ok[0], op.alsoOk].filter((c) => c !== undefined).sort().map((c) => [String(c), success(c)]));
  Object.assign(responses, errorResponses(errorsOf(op), true));
  return {
    operationId: `${op.method}${op.path.replace(/[{}]/g, '').replace(/\/(\w)/g, (_m, c: string) => c.toUpperCase()).replace(/-(\w)/g, (_m, c: string) => c.toUpperCase())}`,
    summary: op.summary,
    description: `Who may call it: ${op.who}.`,
    security: [{ bearer: [] }],
    ...(parameters.length ? { parameters } : {}),
    ...(op.body ? { requestBody: { required: op.bodyRequired ?? true, content: json(schemaOf(op.body, 'input')) } } : {}),
    responses,
  };
}

const openOperation = (operationId: string, summary: string, ok: Record<string, unknown>) => ({
  operationId,
  summary,
  security: [],
  responses: { ...ok, ...errorResponses(ANYONE_ERRORS, false) },
});

/** The document; the same object whatever the environment, so the committed copy can be compared. */
export function openApiDocument(): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPERATIONS) (paths[op.path] ??= {})[op.method] = operationObject(op);
  for (const o of OPEN) {
    const answers = Object.fromEntries(o.codes.map((c) => [String(c), { description: c === 200 ? 'OK' : 'Not live or not ready: the status says why', ...headerRefs(headersFor(c, false)), content: json(schemaOf(health, 'output')) }]));
    paths[o.path] = { get: openOperation(`get${o.path.slice(1, 2).toUpperCase()}${o.path.slice(2)}`, o.summary, answers) };
  }
  paths['/openapi.json'] = { get: openOperation('getOpenApi', 'This document', { 200: { description: 'OK', ...headerRefs(headersFor(200, false)), content: json({ type: 'object' }) } }) };
  return {
    openapi: '3.1.0',
    info: {
      title: 'ecs-saas-backend API',
      version: '1',
      description: 'Accounts, their usage, invoices and API keys. Errors answer {"error": {"code", "message", "details"?}}; each response lists the codes it can carry. A method a path does not serve (OPTIONS, PUT, PATCH, TRACE, or one listed under another path) answers 405 METHOD_NOT_ALLOWED with an Allow header; on a path that needs a key, the key is checked first.',
      license: { name: 'UNLICENSED', identifier: 'LicenseRef-Proprietary' },
    },
    servers: [
      { url: '/', description: 'The host that serves this document: the load balancer\'s domain name in a deployment' },
      { url: 'http://localhost:3000', description: 'npm start' },
    ],
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'The admin key (the operator) or an account API key (sbk_...)' } },
      schemas: { Error: schemaOf(errorBody, 'output') },
      headers: HEADERS,
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
