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
 * work only where a key or a number ends, and a valid body's few keys and short numbers take
 * the cheap way (bytes compared in place, digits counted); the keys kept for the duplicate
 * check are at most the MAX_JSON_ELEMENTS members. `npm run bench:json-bounds` times it.
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
const DOT = 0x2e;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;
/** How much of a refused number the message quotes. */
const QUOTED_CHARS = 40;
/** Significant decimal digits every double keeps (DBL_DIG): a decimal of no more reads back unchanged. */
const SAFE_DIGITS = 15;
/** The largest power of ten that keeps a number of SAFE_DIGITS digits inside a double's normal range (about 2.2e-308 to 1.8e308). */
const SAFE_EXPONENT = 290;

function refuse(field: string, what: string): UserError {
  return new UserError('VALIDATION_FAILED', `Invalid body: ${field === 'body' ? '' : `${field}: `}${what}`, 400, { fields: [{ field, message: what }] });
}

/** A byte that can continue a number literal: a digit, `.`, `e`, `E`, `+` or `-`. */
function inNumber(c: number): boolean {
  return (c >= DIGIT_0 && c <= DIGIT_9) || c === DOT || c === 0x65 || c === 0x45 || c === 0x2b || c === MINUS;
}

/** Significant digits of the shortest text of any double: a literal with more is never read back as written. */
const MAX_SHORTEST_DIGITS = 17;
const TOO_MANY_DIGITS = Symbol('more than MAX_SHORTEST_DIGITS significant digits');
/** Past this, an exponent's digits only make the value further out of a double's range. */
const EXPONENT_CAP = 10_000_000;

function digitAt(b: Uint8Array, k: number, end: number): boolean {
  return k < end && b[k]! >= DIGIT_0 && b[k]! <= DIGIT_9;
}

/**
 * The JSON number in `b` from `start` to `end` as its significant digits and their power of
 * ten (`-12.50e1` → `125e0`, any zero → `0`), so two texts of one value compare equal;
 * TOO_MANY_DIGITS past MAX_SHORTEST_DIGITS; undefined if it is not a JSON number (JSON.parse
 * will say so). One pass over the bytes, and no string longer than the digits kept: a 100 KB
 * literal costs one loop.
 */
function decimalOf(b: Uint8Array, start: number, end: number): string | typeof TOO_MANY_DIGITS | undefined {
  let k = b[start] === MINUS ? start + 1 : start;
  const intStart = k;
  if (b[k] === DIGIT_0) k++;
  else if (digitAt(b, k, end)) while (digitAt(b, k, end)) k++;
  else return undefined;
  const intEnd = k;
  let fracEnd = k;
  if (k < end && b[k] === DOT) {
    if (!digitAt(b, ++k, end)) return undefined;
    while (digitAt(b, k, end)) k++;
    fracEnd = k;
  }
  let exponent = 0;
  if (k < end && (b[k] === 0x65 || b[k] === 0x45)) {
    const sign = b[++k] === MINUS ? -1 : 1;
    if (k < end && (b[k] === MINUS || b[k] === 0x2b)) k++;
    if (!digitAt(b, k, end)) return undefined;
    for (; digitAt(b, k, end); k++) if (exponent < EXPONENT_CAP) exponent = exponent * 10 + b[k]! - DIGIT_0;
    exponent *= sign;
  }
  if (k !== end) return undefined;
  // The first and last digits that are not zeros, stepping over the point.
  let first = intStart;
  while (first < fracEnd && (b[first] === DIGIT_0 || first === intEnd)) first++;
  if (first === fracEnd) return '0';
  let last = fracEnd - 1;
  while (b[last] === DIGIT_0 || last === intEnd) last--;
  const count = last - first + 1 - (first < intEnd && last > intEnd ? 1 : 0);
  if (count > MAX_SHORTEST_DIGITS) return TOO_MANY_DIGITS;
  let digits = '';
  for (let j = first; j <= last; j++) if (j !== intEnd) digits += String.fromCharCode(b[j]!);
  // The power of ten of the last significant digit: its place before or after the point.
  const power = last < intEnd ? intEnd - 1 - last : intEnd - last;
  return `${digits}e${exponent + power}`;
}

/**
 * Why JSON.parse would not give back the number in `bytes` from `start` to `end`, or
 * undefined when it does: when the shortest decimal that reads back as the same double
 * (Number's own text) has another value. 0.1 and 1e2 pass; 2^53 + 1, 17 nines after a point,
 * 1e400 and 1e-400 do not. A literal JSON.parse refuses is left to it.
 */
function inexact(bytes: Buffer, start: number, end: number): string | undefined {
  const written = decimalOf(bytes, start, end);
  if (written === undefined) return undefined;
  // Number of the short form is the double of the literal: they are one decimal value.
  const value = Number(written === TOO_MANY_DIGITS ? bytes.toString('latin1', start, end) : written);
  if (written !== TOO_MANY_DIGITS && Number.isFinite(value)) {
    const shortest = String(value);
    if (decimalOf(Buffer.from(shortest, 'latin1'), 0, shortest.length) === written) return undefined;
  }
  const quoted = end - start > QUOTED_CHARS ? `${bytes.toString('latin1', start, start + QUOTED_CHARS)}…` : bytes.toString('latin1', start, end);
  if (!Number.isFinite(value)) return `${quoted} is out of the range of a JSON number`;
  return `${quoted} cannot be kept exactly by a JSON number (a double): it would be read as ${value}`;
}

/** Keys an object may have before they go into a Set: a valid body has four at most. */
const FEW_KEYS = 8;

/**
 * The keys of one open object. The first FEW_KEYS are compared byte by byte where they stand
 * in the body, with no string made; past that, or at the first escaped key, they go into a
 * Set as the strings JSON.parse makes of them, which keeps an object of 1,000 members linear.
 */
class ObjectKeys {
  /** Where the keys are (the offsets of their quotes), in pairs, while there are few. */
  private readonly spans: number[] = [];
  private set: Set<string> | undefined;
  private bytes: Buffer = Buffer.alloc(0);

  /** Empties it, for a new object of `bytes`. */
  reset(bytes: Buffer): this {
    this.bytes = bytes;
    this.spans.length = 0;
    this.set = undefined;
    return this;
  }

  /** Adds the key between the quotes at `open` and `close`; false when the object has it already. */
  add(open: number, close: number, escaped: boolean): boolean {
    const { bytes, spans } = this;
    if (this.set === undefined && !escaped && spans.length < 2 * FEW_KEYS) {
      for (let k = 0; k < spans.length; k += 2) if (sameBytes(bytes, spans[k]!, spans[k + 1]!, open, close)) return false;
      spans.push(open, close);
      return true;
    }
    if (this.set === undefined) {
      this.set = new Set();
      for (let k = 0; k < spans.length; k += 2) this.set.add(bytes.toString('utf8', spans[k]! + 1, spans[k + 1]!));
    }
    const key = escaped ? unescapedKey(bytes, open, close) : bytes.toString('utf8', open + 1, close);
    // A key JSON.parse cannot read is left to it to refuse.
    if (key === undefined) return true;
    if (this.set.has(key)) return false;
    this.set.add(key);
    return true;
  }
}

function sameBytes(bytes: Buffer, open1: number, close1: number, open2: number, close2: number): boolean {
  if (close1 - open1 !== close2 - open2) return false;
  for (let k = 1; k < close1 - open1; k++) if (bytes[open1 + k] !== bytes[open2 + k]) return false;
  return true;
}

/**
 * The scan's state per open container (index = depth), reused from body to body (a scan is
 * synchronous, so one body at a time has it; what the last one left is at most one body's
 * keys): an object's keys, or undefined for an array; where its current key is (the offsets
 * of its quotes), or its current index, for the field a refusal names.
 */
const SCAN = {
  objects: Array.from({ length: MAX_JSON_DEPTH + 1 }, () => new ObjectKeys()),
  keys: [] as (ObjectKeys | undefined)[],
  at: [] as number[],
  atKey: [] as number[],
};

/** The field the value being scanned at `depth` is, `x.1.k`, or `body`. */
function fieldAt(bytes: Buffer, depth: number): string {
  const { keys, at, atKey } = SCAN;
  const path: (string | number)[] = [];
  for (let d = 1; d <= depth; d++) {
    if (!keys[d]) path.push(at[d]!);
    else if (at[d]! >= 0) path.push(keyText(bytes, at[d]!, atKey[d]!));
  }
  return path.length ? path.join('.') : 'body';
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
  const { objects, keys, at, atKey } = SCAN;
  let expectKey = false;
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
      at[depth] = open;
      atKey[depth] = i;
      if (!keys[depth]!.add(open, i, escaped)) throw refuse(fieldAt(bytes, depth), 'is given twice in one object; JSON.parse would keep only the last');
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > MAX_JSON_DEPTH) throw refuse('body', `nests deeper than ${MAX_JSON_DEPTH} levels`);
      // Counts the container's first value; each comma counts one more.
      elements++;
      keys[depth] = c === OPEN_OBJECT ? objects[depth]!.reset(bytes) : undefined;
      // An object has no current key yet; an array's first index is 0.
      at[depth] = c === OPEN_OBJECT ? -1 : 0;
      expectKey = c === OPEN_OBJECT;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      keys[depth] = undefined;
      // A close with nothing open is not JSON: JSON.parse refuses it.
      if (--depth < 0) return;
      expectKey = false;
    } else if (c === COMMA) {
      elements++;
      if (keys[depth]) expectKey = true;
      else if (depth > 0) at[depth]!++;
    } else if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) {
      const start = i;
      let digits = c === MINUS ? 0 : 1;
      let exponent = -1;
      for (let d = bytes[i + 1]; d !== undefined && inNumber(d); d = bytes[++i + 1]) {
        if (d < DIGIT_0 || d > DIGIT_9) {
          if (d === 0x65 || d === 0x45) exponent = 0;
        } else if (exponent < 0) digits++;
        else if (exponent <= SAFE_EXPONENT) exponent = exponent * 10 + d - DIGIT_0;
      }
      // At most 15 digits times 10^±290 reads back as written: a double keeps 15 significant
      // decimal digits, and that is inside its normal range. Every number a valid body holds
      // is such a one, and passes with no more work than this loop.
      if (digits > SAFE_DIGITS || exponent > SAFE_EXPONENT) {
        const problem = inexact(bytes, start, i + 1);
        if (problem !== undefined) throw refuse(fieldAt(bytes, depth), problem);
      }
    }
    if (elements > MAX_JSON_ELEMENTS) throw refuse('body', `holds more than ${MAX_JSON_ELEMENTS} values`);
  }
}

/** A key as JSON.parse reads it, for a message: the text between its quotes if that is not valid JSON. */
function keyText(bytes: Buffer, open: number, close: number): string {
  try {
    return JSON.parse(bytes.toString('utf8', open, close + 1)) as string;
  } catch {
    return bytes.toString('utf8', open + 1, close);
  }
}

/** A key written with escapes (`"\\u0061"`), as JSON.parse reads it; undefined if it is not valid JSON. */
function unescapedKey(bytes: Buffer, open: number, close: number): string | undefined {
  try {
    return JSON.parse(bytes.toString('utf8', open, close + 1)) as string;
  } catch {
    return undefined;
  }
}
