/**
 * Requests generated from the OpenAPI document (docs/openapi.json, the routes' own zod
 * schemas): valid ones, and ones mutated at one field (types, bounds, encodings, NUL, huge,
 * nested, duplicated keys, unknown fields), under each kind of caller.
 */
import { fc } from '@fast-check/vitest';

export type Schema = {
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  pattern?: string;
  format?: string;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  default?: unknown;
};
interface Parameter { name: string; in: 'path' | 'query'; schema: Schema }
export interface Operation {
  method: string;
  /** The path template, e.g. /accounts/{id}/usage. */
  template: string;
  parameters: Parameter[];
  body?: Schema;
  /** False when the body may be left out. */
  bodyRequired: boolean;
  /** Documented statuses. */
  statuses: number[];
  /** Each documented status's body schema, references resolved. */
  responses: Record<number, Schema>;
  /** Each documented status's headers, in lower case. */
  headers: Record<number, string[]>;
}

/** A schema with its one level of `$ref` to #/components/schemas resolved. */
const resolve = (doc: any, schema: any): Schema => (schema.$ref ? doc.components.schemas[schema.$ref.split('/').at(-1)] : schema);

export function operationsOf(doc: any): Operation[] {
  const ops: Operation[] = [];
  for (const [template, item] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(item)) {
      if (!op.security || op.security.length === 0) continue;
      const responses = Object.fromEntries(Object.entries<any>(op.responses).map(([status, r]) => [Number(status), resolve(doc, r.content['application/json'].schema)]));
      const headers = Object.fromEntries(Object.entries<any>(op.responses).map(([status, r]) => [Number(status), Object.keys(r.headers ?? {}).map((h) => h.toLowerCase())]));
      ops.push({ method: method.toUpperCase(), template, parameters: op.parameters ?? [], body: op.requestBody?.content['application/json'].schema, bodyRequired: op.requestBody?.required ?? false, statuses: Object.keys(op.responses).map(Number), responses, headers });
    }
  }
  return ops;
}

export type Caller = 'operator' | 'own' | 'other' | 'revoked' | 'none';
export interface Request { op: Operation; caller: Caller; path: string; query: string; body?: string; mutated: string | undefined }

/** What the fuzzer knows about its world: ids it may aim at, and the dates that are billable. */
export interface World {
  /** Path ids by parameter: the caller's own account, the other tenant's, one that does not exist. */
  ids: Record<string, string[]>;
  minTimeMs: number;
  maxTimeMs: () => number;
}

const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** A valid value for `schema`; `name` lets dates and ids come from the world. */
function valid(schema: Schema, name: string, world: World): fc.Arbitrary<unknown> {
  if (schema.enum) return fc.constantFrom(...schema.enum);
  if (schema.format === 'date-time') return fc.integer({ min: world.minTimeMs, max: world.maxTimeMs() }).map((ms) => new Date(ms).toISOString());
  if (name === 'periodStart') return fc.integer({ min: world.minTimeMs, max: world.maxTimeMs() - 86_400_000 }).map(isoDay);
  if (schema.format === 'email') return fc.tuple(fc.stringMatching(/^[a-z0-9]{1,12}$/), fc.nat()).map(([u, n]) => `${u}.${n}@fuzz.example`);
  if (world.ids[name]) return fc.constantFrom(...world.ids[name]!);
  if (schema.type === 'integer') return fc.integer({ min: schema.minimum ?? 0, max: schema.maximum ?? 1_000_000 });
  if (schema.type === 'object') return record(schema, world);
  // Lengths count characters, as the document's minLength and maxLength do.
  const fits = (s: string) => [...s].length >= (schema.minLength ?? 0) && [...s].length <= (schema.maxLength ?? Infinity);
  if (schema.pattern) return fc.stringMatching(new RegExp(schema.pattern, 'u')).filter(fits);
  return fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.min(schema.maxLength ?? 40, 40) }).filter((s) => s.trim().length >= (schema.minLength ?? 0));
}

function record(schema: Schema, world: World): fc.Arbitrary<Record<string, unknown>> {
  const props = Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, s]) => [k, valid(s, k, world)]));
  return fc.record(props, { requiredKeys: schema.required ?? [] }) as fc.Arbitrary<Record<string, unknown>>;
}

/** Hostile replacements for one field's value, as JSON text. */
const hostileJson: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.constantFrom<[string, string]>(
    ['null', 'null'], ['true', 'true'], ['[]', '[]'], ['{}', '{}'], ['""', '""'], ['-1', '-1'], ['1.5', '1.5'], ['-0', '-0'],
    ['1e400', '1e400'], ['huge integer', '123456789012345678901234567890'], ['2^53+1', '9007199254740993'],
    ['NUL', '"a\\u0000b"'], ['lone surrogate', '"\\ud800"'], ['RTL and emoji', '"\\u202e\\ud83d\\ude00"'], ['%-escape', '"%00%E0%A4%A"'],
    ['offset +23:59', '"2026-06-01T00:00:00+23:59"'], ['year 0000', '"0000-01-01T00:00:00Z"'], ['1970 in +01:00', '"1970-01-01T00:00:00+01:00"'],
    ['year 9999', '"9999-12-31T23:59:59Z"'], ['last day of 9999', '"9999-12-31"'], ['before 1970', '"1969-12-31"'], ['Feb 30', '"2026-02-30"'],
    ['leap second', '"2026-06-30T23:59:60Z"'], ['9 fractional digits', '"2026-01-01T00:00:00.123456789+14:00"'],
  ),
  fc.integer({ min: 2, max: 40 }).map((n): [string, string] => [`nested ${n}`, `${'['.repeat(n)}1${']'.repeat(n)}`]),
  fc.integer({ min: 1_000, max: 120_000 }).map((n): [string, string] => [`string of ${n}`, JSON.stringify('x'.repeat(n))]),
  fc.string({ maxLength: 30 }).map((s): [string, string] => ['random string', JSON.stringify(s)]),
  fc.integer().map((n): [string, string] => ['random integer', String(n)]),
);
const hostileText = fc.oneof(
  fc.constantFrom('', '0', '-1', 'abc', '%00', '%E0%A4%A', '1e3', '18446744073709551616', '9'.repeat(40), '%20', '..', 'null', '%2F'),
  fc.string({ maxLength: 20 }).map(encodeURIComponent),
);

function fill(op: Operation, values: Record<string, string>): string {
  return op.template.replace(/\{(\w+)\}/g, (_m, k: string) => values[k]!);
}

const callers = fc.constantFrom<Caller>('operator', 'own', 'own', 'other', 'revoked', 'none');

/** A valid request for `op`, under any caller. */
export function validRequest(op: Operation, world: World): fc.Arbitrary<Request> {
  const pathParams = op.parameters.filter((p) => p.in === 'path');
  const queryParams = op.parameters.filter((p) => p.in === 'query');
  return fc
    .record({
      caller: callers,
      path: fc.record(Object.fromEntries(pathParams.map((p) => [p.name, valid(p.schema, p.name, world) as fc.Arbitrary<string>]))),
      query: fc.record(Object.fromEntries(queryParams.map((p) => [p.name, valid(p.schema, p.name, world)])), { requiredKeys: [] }),
      body: op.body ? record(op.body, world) : fc.constant(undefined),
    })
    .map(({ caller, path, query, body }) => ({
      op,
      caller,
      path: fill(op, path as Record<string, string>),
      query: new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)])).toString(),
      body: body === undefined ? undefined : JSON.stringify(body),
      mutated: undefined,
    }));
}

/** A valid request with one field mutated: a path or query parameter, a body field, or the body's shape. */
export function mutatedRequest(op: Operation, world: World): fc.Arbitrary<Request> {
  const fields = [
    ...op.parameters.map((p) => ({ where: p.in, name: p.name })),
    ...Object.keys(op.body?.properties ?? {}).map((name) => ({ where: 'body' as const, name })),
    ...(op.body ? [{ where: 'shape' as const, name: 'body' }] : []),
  ];
  return fc.tuple(validRequest(op, world), fc.constantFrom(...fields), hostileJson, hostileText).map(([req, field, [label, json], text]) => {
    if (field.where === 'path') {
      const parts = op.template.split('/');
      const at = parts.indexOf(`{${field.name}}`);
      const real = req.path.split('/');
      real[at] = text;
      return { ...req, path: real.join('/'), mutated: `path ${field.name} = ${JSON.stringify(text)}` };
    }
    if (field.where === 'query') {
      const q = new URLSearchParams(req.query);
      q.set(field.name, json.length < 2_000 ? json.replace(/^"|"$/g, '') : text);
      return { ...req, query: `${q.toString()}${field.name === 'limit' ? `&${field.name}=2` : ''}`, mutated: `query ${field.name} = ${label}` };
    }
    const body = req.body ?? '{}';
    if (field.where === 'shape') {
      const shapes = [`[${body}]`, `${body}${body}`, body.slice(0, -1), `{"__proto__":{"admin":true},${body.slice(1)}`, `{"constructor":{"prototype":{}},${body.slice(1)}`, `{"extra":1,${body.slice(1)}`, '"just a string"', `${'['.repeat(5_000)}${']'.repeat(5_000)}`];
      return { ...req, body: shapes[label.length % shapes.length], mutated: `body shape #${label.length % shapes.length}` };
    }
    // The field set to the hostile value, and once more as a duplicate key (JSON.parse keeps the last).
    const withField = body === '{}' ? `{"${field.name}":${json}}` : `{"${field.name}":${json},${body.slice(1)}`;
    return { ...req, body: label.length % 2 ? withField : `${body.slice(0, -1)}${body === '{}' ? '' : ','}"${field.name}":${json}}`, mutated: `body ${field.name} = ${label}` };
  });
}
