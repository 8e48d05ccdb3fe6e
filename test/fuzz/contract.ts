/**
 * The document's side of the differential check: whether a client validating against
 * docs/openapi.json (JSON Schema 2020-12 with ajv, formats asserted by ajv-formats) would
 * accept a request as sent. The fuzzer compares this verdict with the server's answer.
 *
 * How text on the wire becomes the values the schemas judge, as a client would write them:
 * - a path parameter is percent-decoded (a malformed escape cannot be a value);
 * - a query parameter given more than once is refused (a scalar in the form style is one
 *   value); an integer is the text String(n) writes for it, anything else stays a string;
 * - a body is I-JSON (RFC 7493), as docs/api.md requires: no key twice in one object, no
 *   number a double cannot hold exactly; that check is the server's own byte-level one.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { checkJsonShape } from '../../app/api/json-bounds.js';
import type { Operation, Schema } from './requests.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;
const ajv = addFormats(new Ajv2020({ strict: false, allErrors: false }));
const compiled = new WeakMap<object, ValidateFunction>();
const validator = (schema: Schema): ValidateFunction => {
  let v = compiled.get(schema);
  if (v === undefined) compiled.set(schema, (v = ajv.compile(schema)));
  return v;
};

export type Verdict = { accepts: true } | { accepts: false; why: string };

const refuse = (why: string): Verdict => ({ accepts: false, why });
const schemaSays = (schema: Schema, value: unknown, what: string): Verdict | undefined => {
  const v = validator(schema);
  return v(value) ? undefined : refuse(`${what}: ${ajv.errorsText(v.errors)}`);
};

/** The path's parameters by name, when `path` is one `op.template` matches. */
export function pathParams(op: Operation, path: string): Record<string, string> | undefined {
  const names: string[] = [];
  const source = op.template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\\{|\{(\w+)\}/g, (_m, name: string) => (names.push(name), '([^/]+)'));
  const m = new RegExp(`^${source}/?$`, 'i').exec(path);
  return m ? Object.fromEntries(names.map((n, i) => [n, m[i + 1]!])) : undefined;
}

function queryValue(schema: Schema, raw: string): unknown {
  return schema.type === 'integer' && /^-?\d+$/.test(raw) && String(Number(raw)) === raw ? Number(raw) : raw;
}

/** What the document says of `op` called at `path` (already matched to it) with `query` and `body`. */
export function documentVerdict(op: Operation, path: string, query: string, body: string | undefined): Verdict {
  const params = pathParams(op, path)!;
  for (const p of op.parameters.filter((x) => x.in === 'path')) {
    let value: string;
    try {
      value = decodeURIComponent(params[p.name]!);
    } catch {
      return refuse(`path ${p.name}: a malformed %-escape`);
    }
    const no = schemaSays(p.schema, value, `path ${p.name}`);
    if (no) return no;
  }
  const q = new URLSearchParams(query);
  for (const p of op.parameters.filter((x) => x.in === 'query')) {
    const values = q.getAll(p.name);
    if (values.length > 1) return refuse(`query ${p.name}: given ${values.length} times`);
    if (values.length === 0) continue;
    const no = schemaSays(p.schema, queryValue(p.schema, values[0]!), `query ${p.name}`);
    if (no) return no;
  }
  if (body === undefined || body === '') return op.body && op.bodyRequired ? refuse('no body') : { accepts: true };
  if (!op.body) return { accepts: true };
  try {
    checkJsonShape(Buffer.from(body));
    return schemaSays(op.body, JSON.parse(body), 'body') ?? { accepts: true };
  } catch (e) {
    return refuse(`body is not I-JSON: ${(e as Error).message}`);
  }
}

/** Whether `body` is what the document says an answer of `status` to `op` holds. */
export function responseVerdict(op: Operation, status: number, body: unknown): Verdict {
  const schema = op.responses[status];
  if (schema === undefined) return refuse(`status ${status} is not documented`);
  return schemaSays(schema, body, `answer ${status}`) ?? { accepts: true };
}
