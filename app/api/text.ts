/**
 * Text fields, one rule for the server and the OpenAPI document. Lengths count characters
 * (Unicode code points), as JSON Schema's minLength and maxLength do: zod's own min and max
 * count UTF-16 code units, so an emoji would count twice on the server and once in a client.
 */
import { z } from 'zod';

/** No whitespace at either end (JavaScript's \s, what String.prototype.trim removes): the name is stored as sent. */
export const TRIMMED = /^\S(?:[\s\S]*\S)?$/;

const characters = (s: string) => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

/** A string of `min` to `max` characters. */
export function text(min: number, max: number) {
  return z
    .string()
    .refine((s) => characters(s) >= min && characters(s) <= max, { message: `must be ${min} to ${max} characters long` })
    .meta({ minLength: min, maxLength: max });
}

/** A string of `min` to `max` characters with no whitespace at either end. */
export function trimmedText(min: number, max: number) {
  return text(min, max).regex(TRIMMED, { message: 'must not start or end with whitespace' });
}
