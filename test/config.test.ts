import { describe, expect, it } from 'vitest';
import { loadConfig } from '../app/config.js';
import { UsageError } from '../app/errors.js';
import { JOBS } from '../lib/jobs.js';
import { keepAliveTimeoutMs, shutdownTimeoutMs, ECS_DEFAULT_STOP_TIMEOUT_SECONDS, ALB_DEFAULT_IDLE_TIMEOUT_SECONDS } from '../lib/timing.js';
import { run } from './helpers/process.js';

const DB = { DATABASE_URL: 'postgres://u:p@127.0.0.1:1/db' };
/** Made with `openssl rand -hex 16` and `openssl rand -base64 32 | tr '+/' '-_'`: random keys the rules must let through. */
const RANDOM_HEX_KEY = '0396525d79c119b520fbe7268763c7fa';
const RANDOM_BASE64URL_43 = 'z4YEEmptIB46ZPXOFstLw_pjmH7EIIzSM8-v-vi_jd8';

describe('configuration', () => {
  it('derives its timing defaults from the same functions as the stack', () => {
    const c = loadConfig(DB);
    expect(c.SHUTDOWN_TIMEOUT_MS).toBe(shutdownTimeoutMs(ECS_DEFAULT_STOP_TIMEOUT_SECONDS));
    expect(c.KEEP_ALIVE_TIMEOUT_MS).toBe(65_000);
    expect(c.KEEP_ALIVE_TIMEOUT_MS).toBe(keepAliveTimeoutMs(ALB_DEFAULT_IDLE_TIMEOUT_SECONDS));
    expect(c.PRE_STOP_DELAY_MS).toBe(0);
    expect(c.ENABLE_DEBUG_ROUTES).toBe(false);
  });

  it('bounds slow clients by HEADERS_TIMEOUT_MS and REQUEST_TIMEOUT_MS, checked at a tenth of the shorter', () => {
    const c = loadConfig(DB);
    expect([c.headersTimeoutMs, c.requestTimeoutMs, c.connectionsCheckingIntervalMs]).toEqual([10_000, 30_000, 1_000]);
    expect(() => loadConfig({ ...DB, HEADERS_TIMEOUT_MS: '40000' })).toThrow(/HEADERS_TIMEOUT_MS=40000: accepts at most REQUEST_TIMEOUT_MS \(30000\)/);
  });

  it('bounds every request by REQUEST_DEADLINE_MS, longer than the wait for a connection, and rates per key', () => {
    const c = loadConfig(DB);
    expect([c.REQUEST_DEADLINE_MS, c.RATE_LIMIT_REQUESTS, c.RATE_LIMIT_WINDOW_MS, c.EARLY_ANSWER_DRAIN_BYTES, c.EARLY_ANSWER_DRAIN_MS]).toEqual([8_000, 1_200, 60_000, 65_536, 1_000]);
    expect(() => loadConfig({ ...DB, REQUEST_DEADLINE_MS: '2000' })).toThrow(/DB_POOL_WAIT_MS=2000: accepts less than REQUEST_DEADLINE_MS \(2000\)/);
    expect(() => loadConfig({ ...DB, RATE_LIMIT_WINDOW_MS: '10' })).toThrow(/RATE_LIMIT_WINDOW_MS="10": accepts 1000 to 3600000/);
  });

  it('runs two batches of a job side by side, at most one per connection of the pool', () => {
    expect(loadConfig(DB).JOB_BATCH_CONCURRENCY).toBe(2);
    expect(loadConfig({ ...DB, JOB_BATCH_CONCURRENCY: '1' }).JOB_BATCH_CONCURRENCY).toBe(1);
    expect(() => loadConfig({ ...DB, DB_POOL_MAX: '3', JOB_BATCH_CONCURRENCY: '4' })).toThrow(/JOB_BATCH_CONCURRENCY=4: accepts at most DB_POOL_MAX \(3\), since each batch at once holds a connection of the pool/);
    expect(() => loadConfig({ ...DB, JOB_BATCH_CONCURRENCY: '0' })).toThrow(/JOB_BATCH_CONCURRENCY="0": accepts 1 to 16 \(batches at once\)/);
  });

  it('never echoes a password or a key in a configuration error', () => {
    const bad = () => loadConfig({ DATABASE_URL: 'mysql://app:hunter2@db.internal:3306/app', ADMIN_API_KEY: 'short-s3cret' });
    expect(bad).toThrow(/DATABASE_URL="mysql:\/\/app:\*\*\*@db.internal:3306\/app": accepts a postgres:\/\//);
    expect(bad).toThrow(/ADMIN_API_KEY="\(hidden\)": accepts a key of at least 32 characters/);
    expect(bad).not.toThrow(/hunter2|short-s3cret/);
  });

  it('refuses an admin key with too little variety: 32 copies of one character is no secret', () => {
    for (const key of ['a'.repeat(32), 'ab'.repeat(32), 'abcdefg'.repeat(5)]) {
      expect(() => loadConfig({ ...DB, ADMIN_API_KEY: key })).toThrow(/ADMIN_API_KEY="\(hidden\)": accepts a random key of at least 8 distinct characters \(for example: openssl rand -base64 48\)/);
    }
    expect(loadConfig({ ...DB, ADMIN_API_KEY: RANDOM_HEX_KEY }).ADMIN_API_KEY).toBe(RANDOM_HEX_KEY);
  });

  it('refuses an admin key that repeats a block of itself, is a run of characters, or looks like an account key', () => {
    const refused = (key: string, why: RegExp) => expect(() => loadConfig({ ...DB, ADMIN_API_KEY: key }), key).toThrow(why);
    for (const key of ['abcdefgh'.repeat(4), '0123456789abcdef0123456789abcdef', 'password123'.repeat(3), `${'abcdefgh'.repeat(3)}Xq9_mZ2k`]) {
      refused(key, /ADMIN_API_KEY="\(hidden\)": accepts a random key, not one that repeats a block of itself/);
    }
    for (const key of ['abcdefghijklmnopqrstuvwxyz012345', '0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ']) {
      refused(key, /ADMIN_API_KEY="\(hidden\)": accepts a random key, not a run of consecutive characters/);
    }
    refused(`sbk_${RANDOM_BASE64URL_43}`, /ADMIN_API_KEY="\(hidden\)": accepts a key that does not start with sbk_, the prefix of account API keys/);
    for (const key of [` ${RANDOM_HEX_KEY}`, `${RANDOM_HEX_KEY}\n`, `${RANDOM_HEX_KEY.slice(0, 16)}\t${RANDOM_HEX_KEY.slice(16)}`]) {
      refused(key, /ADMIN_API_KEY="\(hidden\)": accepts printable ASCII without spaces/);
    }
    // Keys made from random bytes pass whatever their alphabet, and so do made-up keys with a run in them: the server's
    // strength estimator refuses those (test/admin-key-strength.test.ts).
    for (const key of [RANDOM_HEX_KEY, RANDOM_BASE64URL_43, 'test-admin-key-0123456789abcdefghijklmnop', 'fault-tests-admin-key-0123456789abcdef0123456789abcdef']) {
      expect(loadConfig({ ...DB, ADMIN_API_KEY: key }).ADMIN_API_KEY, key).toBe(key);
    }
  });

  it('builds the connection from the database secret fields when DATABASE_URL is unset', () => {
    const c = loadConfig({ DB_HOST: 'db.internal', DB_PORT: '6543', DB_NAME: 'app', DB_USER: 'svc', DB_PASSWORD: 's3cret', DB_SSL: 'verify' });
    expect(c.database).toEqual({ host: 'db.internal', port: 6543, database: 'app', user: 'svc', password: 's3cret', ssl: { rejectUnauthorized: true } });
  });

  it('names every bad variable and what it accepts, in one error', () => {
    let error: unknown;
    try {
      loadConfig({ ...DB, PORT: 'eighty', SHUTDOWN_TIMEOUT_MS: '-5', ENABLE_DEBUG_ROUTES: 'maybe', LOG_LEVEL: 'loud' });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(UsageError);
    const message = (error as Error).message;
    expect(message).toMatch(/PORT="eighty": accepts a whole number/);
    expect(message).toMatch(/SHUTDOWN_TIMEOUT_MS="-5": accepts a whole number/);
    expect(message).toMatch(/ENABLE_DEBUG_ROUTES="maybe": accepts true or false/);
    expect(message).toMatch(/LOG_LEVEL="loud": accepts fatal, error/);
  });

  it('asks for DATABASE_URL or the DB_* fields', () => {
    expect(() => loadConfig({})).toThrow(/DATABASE_URL=\(unset\).*missing DB_HOST, DB_NAME, DB_USER/s);
    expect(() => loadConfig({ DATABASE_URL: 'mysql://x' })).toThrow(/DATABASE_URL="mysql:\/\/x": accepts a postgres:\/\//);
  });

  it('keeps tracing off unless asked, at a small default ratio, and names a bad tracing setting', () => {
    const c = loadConfig(DB);
    expect([c.TRACES, c.TRACES_SAMPLE_RATIO]).toEqual(['off', 0.05]);
    expect(loadConfig({ ...DB, TRACES: 'console', TRACES_SAMPLE_RATIO: '1' })).toMatchObject({ TRACES: 'console', TRACES_SAMPLE_RATIO: 1 });
    expect(() => loadConfig({ ...DB, TRACES: 'jaeger' })).toThrow(/TRACES="jaeger": accepts off, console, file or xray/);
    expect(() => loadConfig({ ...DB, TRACES_SAMPLE_RATIO: '5%' })).toThrow(/TRACES_SAMPLE_RATIO="5%": accepts a ratio from 0 to 1/);
    expect(() => loadConfig({ ...DB, TRACES_SAMPLE_RATIO: '1.5' })).toThrow(/TRACES_SAMPLE_RATIO="1.5"/);
  });

  it('refuses a pre-stop delay that leaves the drain no time', () => {
    expect(() => loadConfig({ ...DB, PRE_STOP_DELAY_MS: '5000', SHUTDOWN_TIMEOUT_MS: '5000' })).toThrow(/PRE_STOP_DELAY_MS=5000: accepts less than SHUTDOWN_TIMEOUT_MS \(5000\)/);
  });
});

describe('the entry with bad input', () => {
  it('exits 2 on a bad variable, names it, and prints no stack', async () => {
    const r = await run([], { ...DB, KEEP_ALIVE_TIMEOUT_MS: 'soon' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/Invalid configuration:\n\s+KEEP_ALIVE_TIMEOUT_MS="soon": accepts a whole number \(milliseconds\)/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe('');
  });

  it('exits 2 at start-up on an admin key that repeats itself, naming the rule and hiding the key', async () => {
    const r = await run([], { ...DB, ADMIN_API_KEY: 'abcdefgh'.repeat(4) });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/Invalid configuration:\n\s+ADMIN_API_KEY="\(hidden\)": accepts a random key, not one that repeats a block of itself/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stderr).not.toContain('abcdefgh'.repeat(2));
  });

  it('exits 2 on an unknown job and lists the known ones', async () => {
    const r = await run(['bill-everyone'], DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Unknown job "bill-everyone"');
    for (const job of JOBS) expect(r.stderr).toContain(job.name);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
