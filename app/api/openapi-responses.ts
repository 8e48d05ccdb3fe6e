/**
 * The answers the OpenAPI document declares beside each operation's success: which error
 * codes (app/errors.ts) each operation can give, by status, and the headers that go with them.
 * docs/api.md's table of errors by route is written from the same lists.
 */
import { API_ERRORS, type ApiErrorCode } from '../errors.js';

/** What every status means, in a few words. */
export const STATUS_TEXT: Record<number, string> = {
  200: 'OK', 201: 'Created', 400: 'Invalid input, naming the field', 401: 'No key, or an unknown or revoked one', 403: 'Only the operator may',
  404: 'Not found, or another tenant\'s', 405: 'A method this path does not serve (OpenAPI has no place for methods a path lacks, so each of its operations lists it)',
  408: 'The request did not arrive in time', 409: 'Conflict', 413: 'Body over BODY_LIMIT_BYTES', 415: 'Not UTF-8 JSON', 422: 'Refused',
  429: 'Over the key\'s rate limit; see Retry-After', 431: 'Request line and headers over 16 KiB', 500: 'Unexpected; the details are in the log only',
  503: 'The database is busy or away, or the request passed its deadline; see Retry-After',
};

/** Every route's possible errors: bytes Node cannot read as a request, and a method the path does not serve. */
export const ANYONE_ERRORS: readonly ApiErrorCode[] = ['BAD_REQUEST', 'METHOD_NOT_ALLOWED', 'REQUEST_TIMEOUT', 'HEADERS_TOO_LARGE'];
/** Every keyed route's possible errors, besides its own. */
export const KEYED_ERRORS: readonly ApiErrorCode[] = [...ANYONE_ERRORS, 'VALIDATION_FAILED', 'UNAUTHORIZED', 'NOT_FOUND', 'RATE_LIMITED', 'INTERNAL', 'UNAVAILABLE', 'DEADLINE_EXCEEDED'];
/** A route that reads a body, besides. */
export const BODY_ERRORS: readonly ApiErrorCode[] = ['INVALID_JSON', 'BODY_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE'];

/** The statuses `codes` answer, each with its codes in catalogue order. */
export function byStatus(codes: readonly ApiErrorCode[]): Map<number, ApiErrorCode[]> {
  const wanted = new Set(codes);
  const out = new Map<number, ApiErrorCode[]>();
  for (const [code, status] of Object.entries(API_ERRORS) as [ApiErrorCode, number][]) {
    if (wanted.has(code)) out.set(status, [...(out.get(status) ?? []), code]);
  }
  return new Map([...out].sort((a, b) => a[0] - b[0]));
}

const header = (description: string, schema: Record<string, unknown> = { type: 'string' }) => ({ description, schema });

/** The document's components.headers. */
export const HEADERS = {
  'X-Request-Id': header("The request's id: the caller's X-Request-Id (up to 128 of letters, digits and . _ : ; = -), else the load balancer's X-Amzn-Trace-Id, else a new UUID; the access log carries it"),
  'Cache-Control': header('no-store: answers carry emails, usage, invoices and keys', { type: 'string', const: 'no-store' }),
  'X-Content-Type-Options': header('nosniff, on every answer', { type: 'string', const: 'nosniff' }),
  'Strict-Transport-Security': header('max-age=31536000, when the load balancer says the client came over HTTPS (X-Forwarded-Proto: https)'),
  Location: header('The path of the resource created'),
  'WWW-Authenticate': header('How to authenticate', { type: 'string', const: 'Bearer realm="api"' }),
  Allow: header('The methods this path serves, comma-separated'),
  'Retry-After': header('Seconds to wait before retrying', { type: 'integer', minimum: 0 }),
  RateLimit: header('The limit that applies now and what is left of it (the IETF draft "RateLimit header fields for HTTP"): limit, remaining and reset, in seconds'),
  'RateLimit-Policy': header("The key's quota and its window, in seconds (the same draft)"),
} as const;

type HeaderName = keyof typeof HEADERS;

/** The headers an answer of `status` carries, on a route that needs a key (`keyed`) or on an open one. */
export function headersFor(status: number, keyed: boolean): HeaderName[] {
  const names: HeaderName[] = ['X-Content-Type-Options', 'Strict-Transport-Security'];
  // 400, 408 and 431 for bytes Node cannot read are answered before any middleware runs, with no id.
  const unreadable = status === 400 || status === 408 || status === 431;
  if (keyed && status !== 408 && status !== 431) names.push('X-Request-Id');
  if (keyed || unreadable) names.push('Cache-Control');
  if (status === 401) names.push('WWW-Authenticate');
  if (status === 405) names.push('Allow');
  if (status === 429) names.push('Retry-After', 'RateLimit', 'RateLimit-Policy');
  if (status === 503 && keyed) names.push('Retry-After');
  return names;
}

export const headerRefs = (names: readonly string[]) => (names.length ? { headers: Object.fromEntries(names.map((n) => [n, { $ref: `#/components/headers/${n}` }])) } : {});
