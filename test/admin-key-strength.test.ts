/**
 * The admin key must be random: the configuration's cheap checks (app/admin-key.ts) and, at the
 * server's start, a strength estimator (app/admin-key-strength.ts) refuse keys people make up.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ADMIN_KEY_MIN_GUESSES_LOG10, requireGuessResistantAdminKey } from '../app/admin-key-strength.js';
import { loadConfig } from '../app/config.js';
import { UsageError } from '../app/errors.js';
import { run } from './helpers/process.js';

const DB = { DATABASE_URL: 'postgres://u:p@127.0.0.1:1/db' };

/** Keys that started the server before these checks, and others of their families. */
const WEAK = {
  'keyboard walks': ['qwertyuiopasdfghjklzxcvbnm123456', 'zxcvbnmasdfghjklqwertyuiop098765', '1qaz2wsx3edc4rfv5tgb6yhn7ujm8ik,', 'asdfghjkl;qwertyuiop[]zxcvbnm,./'],
  'alternating patterns': ['aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpP', 'AaBbCcDdEeFfGgHhIiJjKkLlMmNnOoPp', 'a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6', 'zZyYxXwWvVuUtTsSrRqQpPoOnNmMlLkK'],
  'dictionary words and names': ['correcthorsebatterystaple1234567', 'Password1234567890Password!@#$%^', 'monkeydragonbaseballfootball1234', 'P@ssw0rdLetMeIn!Sunshine2024Abcd', 'michaeljenniferjessicachristophe'],
  'repeated halves': ['iloveyouiloveyou1234567890abcdef', 'Xk9#mQ2$vL7@pR4!Xk9#mQ2$vL7@pR4!'],
};

/** Why `key` is refused: the configuration's message, the estimator's, or undefined when accepted. */
async function refusal(key: string): Promise<string | undefined> {
  try {
    loadConfig({ ...DB, ADMIN_API_KEY: key });
    await requireGuessResistantAdminKey(key);
    return undefined;
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return err.message;
  }
}

describe('the admin key', () => {
  for (const [family, keys] of Object.entries(WEAK)) {
    it(`refuses ${family}, with a command that makes a good key`, async () => {
      for (const key of keys) {
        const why = await refusal(key);
        expect(why, key).toMatch(/ADMIN_API_KEY="\(hidden\)": accepts a random key/);
        expect(why, key).toContain('openssl rand -base64 48');
        expect(why, key).not.toContain(key.slice(0, 12));
      }
    }, 120_000);
  }

  it('accepts random keys of every usual alphabet at the minimum length', async () => {
    for (let i = 0; i < 2; i++) {
      for (const key of [randomBytes(16).toString('hex'), randomBytes(24).toString('base64'), randomBytes(24).toString('base64url')]) {
        expect(await refusal(key), key).toBeUndefined();
      }
    }
  }, 120_000);

  it('stops the server at start, exit 2, one message, no stack, no key, before it touches the database', async () => {
    const key = 'correcthorsebatterystaple1234567';
    const r = await run([], { ...DB, ADMIN_API_KEY: key });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`ADMIN_API_KEY="\\(hidden\\)": accepts a random key, not one made of words, names, keyboard walks or sequences: a strength estimator finds it in about 10\\^\\d+ guesses, fewer than 10\\^${ADMIN_KEY_MIN_GUESSES_LOG10}. Generate one with: openssl rand -base64 48`));
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stderr + r.stdout).not.toContain('horse');
    // The database (port 1) was never reached: the refusal came first.
    expect(r.stdout + r.stderr).not.toMatch(/ECONNREFUSED|database/i);
  }, 60_000);
});
