/**
 * Start-up edges on the built entry as real processes: a SIGTERM before the server or a job
 * is up, a migration lock held by someone else, and a scheduled time in the future.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PG_MIGRATE_LOCK_ID } from 'node-pg-migrate';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { jobEnv, jobRuns } from './helpers/jobs.js';
import { run, start, type Proc } from './helpers/process.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

/** Resolves at the first moment the process answers signals itself: its start-up guard's debug line. */
async function catchesSigterm(proc: Proc): Promise<void> {
  await proc.waitForLog((l) => l.mode === 'startup' && l.msg.startsWith('starting '));
}

describe('SIGTERM as soon as the process can take it', () => {
  it('the server exits 0 at once and says so', async () => {
    const server = start([], { DATABASE_URL: db.url, PORT: '0', LOG_LEVEL: 'debug' });
    await catchesSigterm(server);
    const sentAt = Date.now();
    server.kill('SIGTERM');
    const { code, at } = await server.exited;
    expect(code).toBe(0);
    // The guard answers at the next turn of the event loop, which on a loaded machine can wait
    // seconds for the module loading in progress; a server that left the signal to the
    // coordinator would go on to listen and drain (both checked below), not just be slow.
    expect(at - sentAt).toBeLessThan(10_000);
    expect(server.logs.some((l) => /received SIGTERM/.test(l.msg))).toBe(true);
    expect(server.logs.some((l) => l.msg.startsWith('listening on port'))).toBe(false);
  });

  it('a job exits 3 (interrupted, nothing done) and says so', async () => {
    const job = start(['billing-run'], jobEnv(db, { LOG_LEVEL: 'debug' }));
    await catchesSigterm(job);
    job.kill('SIGTERM');
    const { code } = await job.exited;
    expect(code).toBe(3);
    expect(job.logs.some((l) => /received SIGTERM/.test(l.msg) || /interrupted before it started/.test(l.msg))).toBe(true);
    expect((await jobRuns(db)).filter((r) => r.status === 'succeeded')).toHaveLength(0);
  });
});

describe('a migration lock held by another session', () => {
  it('is waited for with a log line naming the holder, then given up at MIGRATION_LOCK_TIMEOUT_MS with exit 1', async () => {
    await db.withClient(async (holder) => {
      await holder.query(`SELECT pg_advisory_lock(${PG_MIGRATE_LOCK_ID})`);
      const pid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const t0 = Date.now();
      const r = await run([], { DATABASE_URL: db.url, PORT: '0', MIGRATION_LOCK_TIMEOUT_MS: '1500' });
      expect(r.code).toBe(1);
      expect(Date.now() - t0).toBeLessThan(1_500 + 5_000);
      const waiting = r.logs.find((l) => l.msg.startsWith('waiting for the migration lock'));
      expect(waiting?.msg).toMatch(new RegExp(`^waiting for the migration lock, held by pid ${pid} \\(test-helper`));
      const fatal = r.logs.find((l) => l.level === 'fatal');
      expect(fatal?.msg).toMatch(new RegExp(`gave up waiting for the migration lock after \\d+ ms \\(MIGRATION_LOCK_TIMEOUT_MS=1500\\); it is held by pid ${pid}`));
      expect(r.logs.some((l) => l.msg.startsWith('listening on port'))).toBe(false);
    });
  });

  it('a SIGTERM during the wait exits 0 at once', async () => {
    await db.withClient(async (holder) => {
      await holder.query(`SELECT pg_advisory_lock(${PG_MIGRATE_LOCK_ID})`);
      const server = start([], { DATABASE_URL: db.url, PORT: '0', MIGRATION_LOCK_TIMEOUT_MS: '60000' });
      await server.waitForLog((l) => l.msg.startsWith('waiting for the migration lock'));
      const sentAt = Date.now();
      server.kill('SIGTERM');
      const { code, at } = await server.exited;
      expect(code).toBe(0);
      expect(at - sentAt).toBeLessThan(2_000);
      expect(server.logs.some((l) => /^received SIGTERM; shutting down/.test(l.msg))).toBe(true);
    });
  });
});

describe('a scheduled time in the future', () => {
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString();

  it.each([
    ['billing-run', { SCHEDULED_TIME: tomorrow }, []],
    ['billing-run', { SCHEDULED_TIME: tomorrow }, ['--force']],
    ['data-cleanup', {}, ['--scheduled-time', '2030-01-01']],
  ])('%s %j %j: refused with exit 2, naming the time and the allowance; nothing runs', async (job, env, args) => {
    const r = await run([job, ...args], jobEnv(db, env));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/(SCHEDULED_TIME|--scheduled-time) \S+ is in the future: it is later than now \(\S+\) plus the clock-skew allowance of 60000 ms \(SCHEDULED_TIME_SKEW_MS\)/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    // Refused before the job's first line: stdout carries nothing.
    expect(r.stdout).toBe('');
    expect(await jobRuns(db)).toEqual([]);
  });

  it('takes its allowance from SCHEDULED_TIME_SKEW_MS before anything is printed', async () => {
    const r = await run(['report-aggregation'], jobEnv(db, { SCHEDULED_TIME_SKEW_MS: '0', SCHEDULED_TIME: new Date(Date.now() + 60_000).toISOString() }));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/is in the future: .* plus the clock-skew allowance of 0 ms \(SCHEDULED_TIME_SKEW_MS\)/);
    expect(r.stdout).toBe('');
  });

  it('within the clock-skew allowance, runs', async () => {
    const r = await run(['report-aggregation'], jobEnv(db, { SCHEDULED_TIME: new Date(Date.now() + 20_000).toISOString() }));
    expect(r.code).toBe(0);
  });
});

describe("a job's first log line", () => {
  it('is its start line, at the default level, written before the configuration and the job machinery load', async () => {
    const r = await run(['data-cleanup', '--scheduled-time', '2025-03-10T00:00:00Z'], jobEnv(db, { LOG_LEVEL: 'info' }));
    expect(r.code).toBe(0);
    expect(r.logs[0]).toMatchObject({
      level: 'info',
      mode: 'startup',
      job: 'data-cleanup',
      scheduledTime: '2025-03-10T00:00:00.000Z',
      msg: expect.stringMatching(/^starting job data-cleanup for 2025-03-10T00:00:00.000Z \(from --scheduled-time; pid \d+, Node v\d+/),
    });
    expect(r.logs.findIndex((l) => l.msg.startsWith('data-cleanup attempt 1 started'))).toBeGreaterThan(0);
  });
});
