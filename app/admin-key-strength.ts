/**
 * The admin key's strength, as a password cracker would judge it: a strength estimator
 * (zxcvbn-ts, with its common and English dictionaries and keyboard layouts) counts the guesses
 * that find the key by dictionary words, names, keyboard walks, sequences, repeats and dates.
 * A key made of random bytes needs about 10^29 or more at the minimum length; the keys people
 * make up (`correcthorsebatterystaple1234567`, `qwertyuiop...`) need 10^18 or fewer.
 *
 * The estimator judges the key's first ADMIN_KEY_MIN_LENGTH characters: its time grows fast
 * with the length (a second for 64 characters), and a key is at least as hard to guess as its
 * beginning, which an attacker must find too. Only the server, which accepts the key, asks:
 * the estimator and its dictionaries take a few hundred milliseconds to load, which a job's
 * start-up does not pay.
 */
import { UsageError } from './errors.js';
import { ADMIN_KEY_MIN_LENGTH, GENERATE_ADMIN_KEY } from './admin-key.js';

/** A key that the estimator finds in fewer guesses (log10) is refused. */
export const ADMIN_KEY_MIN_GUESSES_LOG10 = 20;

let estimator: Promise<{ check: (key: string) => { guessesLog10: number } }> | undefined;

async function loadEstimator() {
  const [{ ZxcvbnFactory }, common, en] = await Promise.all([
    import('@zxcvbn-ts/core'),
    import('@zxcvbn-ts/language-common'),
    import('@zxcvbn-ts/language-en'),
  ]);
  return new ZxcvbnFactory({ dictionary: { ...common.dictionary, ...en.dictionary }, graphs: common.adjacencyGraphs, translations: en.translations });
}

/** The estimator's guesses (log10) for `key`'s first ADMIN_KEY_MIN_LENGTH characters. */
export async function adminKeyGuessesLog10(key: string): Promise<number> {
  estimator ??= loadEstimator();
  return (await estimator).check(key.slice(0, ADMIN_KEY_MIN_LENGTH)).guessesLog10;
}

/** Throws a UsageError (exit 2) when `key` is guessable; the message never holds the key. */
export async function requireGuessResistantAdminKey(key: string): Promise<void> {
  const guesses = await adminKeyGuessesLog10(key);
  if (guesses < ADMIN_KEY_MIN_GUESSES_LOG10) {
    throw new UsageError(
      `Invalid configuration:\n  ADMIN_API_KEY="(hidden)": accepts a random key, not one made of words, names, keyboard walks or sequences: a strength estimator finds it in about 10^${Math.floor(guesses)} guesses, fewer than 10^${ADMIN_KEY_MIN_GUESSES_LOG10}. Generate one with: ${GENERATE_ADMIN_KEY}`,
    );
  }
}
