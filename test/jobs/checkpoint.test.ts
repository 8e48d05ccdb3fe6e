/**
 * A checkpoint written in the handler's own transaction (billing-run's) counts only once that
 * transaction commits: a retry after a batch that rolled back resumes from the checkpoint
 * before it, so the batch is done again and nothing is skipped.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pino from 'pino';
import { JOBS } from '../../lib/jobs.js';
import { loadConfig } from '../../app/config.js';
import { createPool, type Pool } from '../../app/db.js';
import { defineJob } from '../../app/jobs/handler.js';
import { JobRunner } from '../../app/jobs/runner.js';
import { OPERATOR, withIdentity } from '../../app/tenancy.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;
let pool: Pool;
const logger = pino({ level: 'silent' });
beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, ssl: false }, { role: 'test', max: 6, logger, waitMs: 5_000, statementTimeoutMs: 0 });
});
afterAll(async () => {
  await pool.end();
  await db.drop();
});

/** Two attempts: the first writes checkpoint {batch: 1} in a transaction, then fails (after or before its commit). */
async function run(scheduledTime: Date, failBeforeCommit: boolean): Promise<{ outcome: string; resumedFrom: unknown }> {
  let resumedFrom: unknown = 'not retried';
  let attempt = 0;
  const handler = defineJob<{ batch: number }>({
    describePeriod: () => 'a test period',
    async run(ctx) {
      attempt += 1;
      if (attempt === 2) {
        resumedFrom = ctx.checkpoint ?? null;
        return {};
      }
      await withIdentity(ctx.pool, OPERATOR, async (tx) => {
        await ctx.saveCheckpoint({ batch: 1 }, 1, tx);
        if (failBeforeCommit) throw new Error('the batch fails before its commit');
      });
      throw new Error('the attempt fails after its batch committed');
    },
  });
  const config = loadConfig({ DATABASE_URL: db.url, JOB_RETRY_BACKOFF_MS: '0' });
  const job = { ...JOBS.find((j) => j.name === 'data-cleanup')!, retries: 1 };
  const outcome = await new JobRunner({ job, handler, pool, config, logger, scheduledTime, force: false, shutdownSignal: new AbortController().signal }).run();
  return { outcome: outcome.kind, resumedFrom };
}

describe('a checkpoint in the batch transaction', () => {
  it('that rolled back is not resumed from: the retry starts where the attempt did', async () => {
    expect(await run(new Date('2025-03-10T01:00:00Z'), true)).toEqual({ outcome: 'succeeded', resumedFrom: null });
    const rows = await db.query<{ checkpoint: unknown }>(`SELECT checkpoint FROM job_runs WHERE scheduled_time = '2025-03-10T01:00:00Z' ORDER BY attempt`);
    expect(rows.map((r) => r.checkpoint)).toEqual([null, null]);
  });

  it('that committed is resumed from', async () => {
    expect(await run(new Date('2025-03-10T02:00:00Z'), false)).toEqual({ outcome: 'succeeded', resumedFrom: { batch: 1 } });
  });
});
