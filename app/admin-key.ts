/**
 * What an ADMIN_API_KEY must be: long, printable, and random-looking. The checks catch keys a
 * person made up or a template left behind: a random key of the minimum length clears each of
 * them with room to spare, and a key that fails one stops start-up (app/config.ts) with a
 * message that says which rule it broke. These are cheap and run wherever the configuration
 * is read; the server, the one that accepts the key, also asks a strength estimator
 * (app/admin-key-strength.ts) about dictionary words and keyboard walks.
 */
import { z } from 'zod';
import { KEY_PREFIX } from './key-format.js';

/** An admin key shorter than this is refused at start-up. */
export const ADMIN_KEY_MIN_LENGTH = 32;
/**
 * An admin key with fewer distinct characters is refused at start-up: 32 copies of one
 * character is no secret. A random key of the minimum length clears it whatever its
 * alphabet: 32 random hex digits hold 14 distinct characters on average, and fewer than 8 with a chance of 3.5 in 10^8.
 */
export const ADMIN_KEY_MIN_DISTINCT = 8;
/**
 * A key in which this share of characters (or more) equals the one a fixed distance before it
 * repeats a block of itself (`abcdefgh` four times, `password1password1...`). In a random key a
 * character matches the one p places back with a chance of 1 in its alphabet's size (1 in 16
 * for hex); in 100,000 random 32-digit hex keys the highest share was 0.5.
 */
export const ADMIN_KEY_MAX_REPEAT_SHARE = 0.6;
/**
 * A key in which this share of characters (or more) continues the step between the two before
 * it is a run (`abcdefghijklmnopqrstuvwxyz012345`). In 100,000 random 32-digit hex keys the
 * highest share was 0.2; a made-up key with a run in it, such as the tests'
 * `test-admin-key-0123456789abcdefghijklmnop`, reaches about 0.56.
 */
export const ADMIN_KEY_MAX_RUN_SHARE = 0.75;

/** A command that prints a good key, named by every refusal. */
export const GENERATE_ADMIN_KEY = 'openssl rand -base64 48';
const EXAMPLE = `(for example: ${GENERATE_ADMIN_KEY})`;

/** The largest share of characters equal to the one p places before, over shifts p up to half the key. */
export function repeatShare(key: string): number {
  let best = 0;
  for (let p = 1; p <= key.length / 2; p++) {
    let same = 0;
    for (let i = p; i < key.length; i++) if (key[i] === key[i - p]) same++;
    best = Math.max(best, same / (key.length - p));
  }
  return best;
}

/** The share of characters whose code steps from the one before by as much as that one did from its own. */
export function runShare(key: string): number {
  if (key.length < 3) return 0;
  let same = 0;
  for (let i = 2; i < key.length; i++) if (key.charCodeAt(i) - key.charCodeAt(i - 1) === key.charCodeAt(i - 1) - key.charCodeAt(i - 2)) same++;
  return same / (key.length - 2);
}

/**
 * repeatShare of the steps between characters: a pattern whose steps repeat (`aAbBcCdD...`,
 * `a1b2c3...`, `acegik...`) although its characters do not. A random key's steps are as
 * random as its characters, so the same bound applies.
 */
export function stepRepeatShare(key: string): number {
  let steps = '';
  for (let i = 1; i < key.length; i++) steps += String.fromCharCode(0x100 + key.charCodeAt(i) - key.charCodeAt(i - 1));
  return repeatShare(steps);
}

export const adminApiKey = z
  .string()
  .min(ADMIN_KEY_MIN_LENGTH, { message: `accepts a key of at least ${ADMIN_KEY_MIN_LENGTH} characters` })
  .regex(/^[\x21-\x7e]+$/, { message: 'accepts printable ASCII without spaces' })
  .refine((v) => new Set(v).size >= ADMIN_KEY_MIN_DISTINCT, { message: `accepts a random key of at least ${ADMIN_KEY_MIN_DISTINCT} distinct characters ${EXAMPLE}` })
  .refine((v) => repeatShare(v) < ADMIN_KEY_MAX_REPEAT_SHARE, { message: `accepts a random key, not one that repeats a block of itself (such as abcdabcd...) ${EXAMPLE}` })
  .refine((v) => runShare(v) < ADMIN_KEY_MAX_RUN_SHARE, { message: `accepts a random key, not a run of consecutive characters (such as abcdefgh... or 12345678...) ${EXAMPLE}` })
  .refine((v) => stepRepeatShare(v) < ADMIN_KEY_MAX_REPEAT_SHARE, { message: `accepts a random key, not an alternating pattern (such as aAbBcC... or a1b2c3...) ${EXAMPLE}` })
  .refine((v) => !v.startsWith(KEY_PREFIX), { message: `accepts a key that does not start with ${KEY_PREFIX}, the prefix of account API keys: a leaked admin key would be taken for an account's, and revoking it through the API does nothing` });
