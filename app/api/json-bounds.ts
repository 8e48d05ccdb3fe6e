/**
 * Bounds on a JSON body's shape, checked on its raw bytes before JSON.parse sees them, in one
 * pass with no recursion: a body at the byte limit costs one linear scan, whatever its shape.
 *
 * Why these numbers: the deepest body any route accepts is one object (depth 1) of at most
 * four members. MAX_JSON_DEPTH leaves room for a nested field a fork may add; past it, a
 * body is an attack or a bug (5,000 levels once overflowed a recursive walk and answered 500).
 * MAX_JSON_ELEMENTS bounds what every later walk (the NUL check, zod) may visit: 94 KB of
 * nested arrays once held the event loop for 3 s in a walk whose cost grew with depth times
 * leaves. 1,000 is 250 times the widest valid body and still a walk of microseconds.
 */
import { UserError } from '../errors.js';

export const MAX_JSON_DEPTH = 10;
export const MAX_JSON_ELEMENTS = 1_000;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_OBJECT = 0x7d;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;

function refuse(what: string): UserError {
  return new UserError('VALIDATION_FAILED', `Invalid body: ${what}`, 400, { fields: [{ field: 'body', message: what }] });
}

/**
 * Throws a 400 when `body` nests deeper than MAX_JSON_DEPTH or holds more than
 * MAX_JSON_ELEMENTS values (object members and array elements). Syntax is left to JSON.parse.
 */
export function checkJsonShape(body: Uint8Array): void {
  let depth = 0;
  let elements = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
      continue;
    }
    if (c === QUOTE) inString = true;
    else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > MAX_JSON_DEPTH) throw refuse(`nests deeper than ${MAX_JSON_DEPTH} levels`);
      // Counts the container's first value; each comma counts one more.
      elements++;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) depth--;
    else if (c === COMMA) elements++;
    if (elements > MAX_JSON_ELEMENTS) throw refuse(`holds more than ${MAX_JSON_ELEMENTS} values`);
  }
}
