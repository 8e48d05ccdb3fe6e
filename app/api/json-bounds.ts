/**
 * Bounds on a JSON body, checked on its raw bytes before JSON.parse sees them, in one pass
 * with no recursion: a body at the byte limit costs one linear scan, whatever its shape.
 *
 * Why these numbers: the deepest body any route accepts is one object (depth 1) of at most
 * four members. MAX_JSON_DEPTH leaves room for a nested field a fork may add; past it, a
 * body is an attack or a bug (5,000 levels once overflowed a recursive walk and answered 500).
 * MAX_JSON_ELEMENTS bounds what every later walk (the NUL check, zod) may visit: 94 KB of
 * nested arrays once held the event loop for 3 s in a walk whose cost grew with depth times
 * leaves. 1,000 is 250 times the widest valid body and still a walk of microseconds.
 *
 * The same pass refuses what JSON.parse would otherwise change silently: a key given twice
 * in one object (JSON.parse keeps the last, hiding the first), and a number it cannot read
 * back as written (9007199254740993 reads as ...992, 999999.99999999999 as 1000000). Both
 * work only where a key or a number ends, so the cost per byte stays that of the scan; the
 * keys kept for the duplicate check are at most the MAX_JSON_ELEMENTS members.
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
const MINUS = 0x2d;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;
/** How much of a refused number the message quotes. */
const QUOTED_CHARS = 40;
/** Significant decimal digits every double keeps (DBL_DIG): a decimal of no more reads back unchanged. */
const SAFE_DIGITS = 15;

function refuse(field: string, what: string): UserError {
  return new UserError('VALIDATION_FAILED', `Invalid body: ${field === 'body' ? '' : `${field}: `}${what}`, 400, { fields: [{ field, message: what }] });
}

/** A byte that can continue a number literal: a digit, `.`, `e`, `E`, `+` or `-`. */
function inNumber(c: number): boolean {
  return (c >= DIGIT_0 && c <= DIGIT_9) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === MINUS;
}

const NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

/**
 * A decimal literal's significant digits and their power of ten (`-12.50e1` → `125e0`, any
 * zero → `0`), so two texts of one value compare equal. Loops, not regular expressions: a
 * run of zeros in a 100 KB literal must not cost its square.
 */
function canonical(literal: string): string {
  const from = literal.charCodeAt(0) === MINUS ? 1 : 0;
  let e = from;
  while (e < literal.length && literal[e] !== 'e' && literal[e] !== 'E') e++;
  const dot = literal.indexOf('.', from);
  const hasDot = dot >= 0 && dot < e;
  const digits = hasDot ? literal.slice(from, dot) + literal.slice(dot + 1, e) : literal.slice(from, e);
  let first = 0;
  while (first < digits.length && digits[first] === '0') first++;
  let last = digits.length;
  while (last > first && digits[last - 1] === '0') last--;
  if (first === last) return '0';
  const exponent = (e < literal.length ? Number(literal.slice(e + 1)) : 0) - (hasDot ? e - dot - 1 : 0) + (digits.length - last);
  return `${digits.slice(first, last)}e${exponent}`;
}

/**
 * Why JSON.parse would not give back the number `literal` says, or undefined when it does:
 * when the shortest decimal that reads back as the same double (Number's own text) has
 * another value. 0.1 and 1e2 pass; 2^53 + 1, 17 nines after a point, 1e400 and 1e-400 do not.
 * A literal JSON.parse refuses is left to it.
 */
function inexact(literal: string): string | undefined {
  if (!NUMBER.test(literal)) return undefined;
  const value = Number(literal);
  const quoted = literal.length > QUOTED_CHARS ? `${literal.slice(0, QUOTED_CHARS)}…` : literal;
  if (!Number.isFinite(value)) return `${quoted} is out of the range of a JSON number`;
  if (canonical(literal) === canonical(String(value))) return undefined;
  return `${quoted} cannot be kept exactly by a JSON number (a double): it would be read as ${value}`;
}

/**
 * Throws a 400 when `body` nests deeper than MAX_JSON_DEPTH, holds more than
 * MAX_JSON_ELEMENTS values (object members and array elements), gives a key twice in one
 * object, or has a number JSON.parse would round. Syntax is left to JSON.parse.
 */
export function checkJsonShape(body: Uint8Array): void {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  let depth = 0;
  let elements = 0;
  // Per open container (index = depth): an object's keys so far, or null for an array; the
  // current key or index, for the field a refusal names. Keys are kept as their UTF-8 bytes
  // read as Latin-1, one character a byte: equal keys have equal bytes, and no decoding is
  // paid for but on a refusal.
  const keys: (Set<string> | null)[] = [];
  const at: (string | number)[] = [];
  let expectKey = false;
  const field = () => (depth <= 0 ? 'body' : at.slice(1, depth + 1).map((k) => (typeof k === 'string' ? Buffer.from(k, 'latin1').toString('utf8') : k)).join('.'));
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (c === QUOTE) {
      // The string, to its closing quote, in a loop of its own.
      const open = i;
      let escaped = false;
      for (i++; i < bytes.length; i++) {
        const d = bytes[i]!;
        if (d === QUOTE) break;
        if (d === BACKSLASH) {
          escaped = true;
          i++;
        }
      }
      if (!expectKey) continue;
      expectKey = false;
      const key = escaped ? unescapedKey(bytes, open, i) : bytes.toString('latin1', open + 1, i);
      if (key === undefined) continue;
      const seen = keys[depth]!;
      at[depth] = key;
      if (seen.has(key)) throw refuse(field(), 'is given twice in one object; JSON.parse would keep only the last');
      seen.add(key);
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > MAX_JSON_DEPTH) throw refuse('body', `nests deeper than ${MAX_JSON_DEPTH} levels`);
      // Counts the container's first value; each comma counts one more.
      elements++;
      keys[depth] = c === OPEN_OBJECT ? new Set() : null;
      at[depth] = 0;
      expectKey = c === OPEN_OBJECT;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      keys[depth] = null;
      depth--;
      expectKey = false;
    } else if (c === COMMA) {
      elements++;
      if (keys[depth]) expectKey = true;
      else if (depth > 0) at[depth] = (at[depth] as number) + 1;
    } else if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) {
      const start = i;
      let digits = c === MINUS ? 0 : 1;
      let exponent = false;
      for (let d = bytes[i + 1]; d !== undefined && inNumber(d); d = bytes[++i + 1]) {
        if (d >= DIGIT_0 && d <= DIGIT_9) digits++;
        else if (d === 0x65 || d === 0x45) exponent = true;
      }
      // A decimal of at most 15 digits and no exponent reads back as written (a double
      // keeps 15 significant decimal digits), which is every number a valid body holds.
      if (exponent || digits > SAFE_DIGITS) {
        const problem = inexact(bytes.toString('latin1', start, i + 1));
        if (problem !== undefined) throw refuse(field(), problem);
      }
    }
    if (elements > MAX_JSON_ELEMENTS) throw refuse('body', `holds more than ${MAX_JSON_ELEMENTS} values`);
  }
}

/**
 * A key written with escapes (`"\u0061"`), as the same Latin-1 reading of its UTF-8 bytes as
 * an unescaped key; undefined if it is not valid JSON (JSON.parse will say so).
 */
function unescapedKey(bytes: Buffer, open: number, close: number): string | undefined {
  try {
    return Buffer.from(JSON.parse(bytes.toString('utf8', open, close + 1)) as string, 'utf8').toString('latin1');
  } catch {
    return undefined;
  }
}
