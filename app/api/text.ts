/**
 * Text fields, one rule for the server and the OpenAPI document. Lengths count characters
 * (Unicode code points), as JSON Schema's minLength and maxLength do: zod's own min and max
 * count UTF-16 code units, so an emoji would count twice on the server and once in a client.
 * The patterns use the `u` flag, as JSON Schema's do, so a surrogate pair is one character.
 */
import { z } from 'zod';

/**
 * What Postgres can store as sent (app/api/request.ts refuses the rest first, naming the
 * field): no U+0000, no lone surrogate. The document carries it as the field's pattern.
 */
export const STORABLE = /^[^\u0000\uD800-\uDFFF]*$/u;
/** Storable, with no whitespace at either end (JavaScript's \s, what String.prototype.trim removes). */
export const TRIMMED = /^[^\s\u0000\uD800-\uDFFF](?:[^\u0000\uD800-\uDFFF]*[^\s\u0000\uD800-\uDFFF])?$/u;

const characters = (s: string) => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

const sized = (min: number, max: number) =>
  z
    .string()
    .refine((s) => characters(s) >= min && characters(s) <= max, { message: `must be ${min} to ${max} characters long` })
    .meta({ minLength: min, maxLength: max });

/** A string of `min` to `max` characters. */
export const text = (min: number, max: number) => sized(min, max).regex(STORABLE, { message: 'must hold no NUL character or lone surrogate' });

/** A string of `min` to `max` characters with no whitespace at either end: stored as sent, never trimmed. */
export const trimmedText = (min: number, max: number) => sized(min, max).regex(TRIMMED, { message: 'must not start or end with whitespace' });
