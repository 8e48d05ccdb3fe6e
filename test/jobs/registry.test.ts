/** The jobs table (lib/jobs.ts) and the handler registry (app/jobs/registry.ts) agree, at compile time and at run time. */
import { describe, expect, it } from 'vitest';
import { CONTAINER_COMMANDS, JOBS, validateJobs, type JobName } from '../../lib/jobs.js';
import type { JobHandler } from '../../app/jobs/handler.js';
import type { Config } from '../../app/config.js';
import { CONNECTIONS_AT_ONCE, HANDLERS, type HandlerLoader } from '../../app/jobs/registry.js';

describe('the handler registry', () => {
  it('has exactly one handler per job of the table', async () => {
    expect(Object.keys(HANDLERS).sort()).toEqual(JOBS.map((j) => j.name).sort());
    for (const job of JOBS) {
      const handler: JobHandler<unknown> = await HANDLERS[job.name]();
      expect(typeof handler.run).toBe('function');
      expect(handler.describePeriod(new Date('2025-03-10T00:15:00Z'))).toMatch(/\d{4}-\d{2}-\d{2}/);
    }
  });

  it('fails the type check when a handler is missing or is not in the table', () => {
    const handler = HANDLERS['billing-run'];
    // `npm test` runs tsc --noEmit over this file: each @ts-expect-error must meet an error, or the build fails.
    // @ts-expect-error -- report-aggregation, data-cleanup and weekly-export have no handler
    const missing = { 'billing-run': handler } satisfies Record<JobName, HandlerLoader>;
    const extra = {
      'billing-run': handler,
      'report-aggregation': handler,
      'data-cleanup': handler,
      'weekly-export': handler,
      // @ts-expect-error -- "send-newsletter" is not a job of the table
      'send-newsletter': handler,
    } satisfies Record<JobName, HandlerLoader>;
    expect(Object.keys(missing)).toHaveLength(1);
    expect(Object.keys(extra)).toHaveLength(5);
  });

  it('opens at start the connections each run uses at once, never more than its pool holds', () => {
    expect(Object.keys(CONNECTIONS_AT_ONCE).sort()).toEqual(JOBS.map((j) => j.name).sort());
    const config = (DB_POOL_MAX: number, JOB_BATCH_CONCURRENCY: number) => ({ DB_POOL_MAX, JOB_BATCH_CONCURRENCY }) as Config;
    // billing-run: its batches side by side, and its plan beside them, within the pool.
    expect(CONNECTIONS_AT_ONCE['billing-run'](config(10, 2))).toBe(3);
    expect(CONNECTIONS_AT_ONCE['billing-run'](config(4, 4))).toBe(4);
    expect(CONNECTIONS_AT_ONCE['billing-run'](config(2, 1))).toBe(2);
    for (const job of JOBS) {
      for (const [max, lanes] of [[2, 1], [2, 2], [10, 2], [16, 16]] as const) {
        const n = CONNECTIONS_AT_ONCE[job.name](config(max, lanes));
        expect(n).toBeGreaterThanOrEqual(0);
        expect(n).toBeLessThanOrEqual(max);
      }
    }
  });

  it('keeps job names apart from the container commands', () => {
    for (const job of JOBS) expect(CONTAINER_COMMANDS).not.toContain(job.name);
    const seedJob = { ...JOBS[0], name: 'seed' };
    expect(validateJobs([seedJob])).toEqual([`job "seed": name is reserved: the container's commands are ${CONTAINER_COMMANDS.join(', ')}`]);
  });
});
