/** The operator commands: `jobs` (with and without a database), `runs` and `seed`. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_TASK_RETRIES, JOBS, type JobDefinition } from '../../lib/jobs.js';
import type { JobListing } from '../../app/jobs/list.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { NIGHTLY_TIME, expectNothingLeft, runJob } from '../helpers/jobs.js';
import { run } from '../helpers/process.js';

describe('jobs', () => {
  it('prints one row per job with its schedule, next runs, size and Fargate costs, without a database', async () => {
    // Wide enough for the whole table (piped, it otherwise fits 100 columns: list-width.test.ts).
    const r = await run(['jobs'], { COLUMNS: '1000' });
    expect(r.code).toBe(0);
    const [header, , ...rest] = r.stdout.split('\n');
    expect(header).toMatch(/^JOB\s+ON\s+SCHEDULE\s+TIME ZONE\s+NEXT 3 RUNS/);
    for (const job of JOBS) {
      const row = rest.find((l) => l.startsWith(`${job.name} `));
      expect(row, job.name).toBeDefined();
      expect(row).toMatch(/\$\d+\.\d+ \/ \$\d+\.\d+/);
      expect(row).toContain('(assumed)');
    }
    expect(rest.find((l) => l.startsWith('billing-run '))).toMatch(/At 00:15\s+UTC\s+\d\d-\d\d 00:15, \d\d-\d\d 00:15, \d\d-\d\d 00:15\s+0\.5 vCPU\s+1024 MiB\s+45m00s\s+2\s+5m00s/);
    // weekly-export runs in Berlin: its runs on Berlin's clock, each with its UTC time.
    expect(rest.find((l) => l.startsWith('weekly-export '))).toMatch(/At 06:00, only on Monday\s+Europe\/Berlin\s+\d\d-\d\d 06:00 \(0[45]:00Z\)/);
    expect(header).toMatch(/TIMEOUT\s+TASK RETRIES\s+RUN LENGTH.*STEP FUNCTIONS RUN \/ MONTH$/);
    // 3 state transitions at $0.025 per 1,000; a daily job runs about 30.4 times a month.
    expect(rest.find((l) => l.startsWith('billing-run '))).toMatch(/\$0\.000075 \/ \$0\.0023$/);
    expect(rest.find((l) => l.startsWith('data-cleanup '))).toMatch(/20m00s\s+3\s+/);
    expect(r.stdout).toContain('Step Functions (standard): $0.025 per 1,000 state transitions (https://aws.amazon.com/step-functions/pricing/); a run that succeeds at once takes 3, each task retry 9 more');
    expect(r.stdout).toContain('Fargate prices, Linux, us-east-1, US East (N. Virginia)');
    expect(r.stdout).toMatch(/x86\s+\$0\.04048 per vCPU-hour, \$0\.004445 per GB-hour/);
    expect(r.stdout).toMatch(/ARM\s+\$0\.03238 per vCPU-hour, \$0\.00356 per GB-hour/);
    expect(r.stdout).toContain('no DATABASE_URL: run lengths are the assumption');
  });

  it('--json prints the same as an array, each entry with its name and enabled', async () => {
    const r = await run(['jobs', '--json'], {});
    expect(r.code).toBe(0);
    const list = JSON.parse(r.stdout) as JobListing[];
    expect(list.map((j) => [j.name, j.enabled])).toEqual(JOBS.map((j) => [j.name, j.enabled]));
    for (const entry of list) {
      expect(entry.nextRuns).toHaveLength(3);
      expect(entry.runLengthSource).toBe('assumed');
      expect(Object.keys(entry.costUsd.perRun).sort()).toEqual(['armOnDemand', 'armSpot', 'x86OnDemand', 'x86Spot']);
      expect(entry.costUsd.perMonth.x86OnDemand).toBeCloseTo(entry.costUsd.perRun.x86OnDemand * entry.runsPerMonth, 3);
      expect(entry.pricing.region).toBe('us-east-1');
      expect(entry.taskRetries).toBe((JOBS.find((j) => j.name === entry.name) as JobDefinition).taskRetries ?? DEFAULT_TASK_RETRIES);
      expect(entry.stepFunctions).toEqual({ transitionsPerRun: 3, transitionsPerTaskRetry: 9, perRunUsd: expect.closeTo(0.000075, 10), perMonthUsd: expect.closeTo(0.000075 * entry.runsPerMonth, 5) });
    }
  });

  it('rejects an unknown flag', async () => {
    const r = await run(['jobs', '--yaml'], {});
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('Unknown argument "--yaml" for jobs. Valid flags: --json.\n');
  });
});

describe('with a database', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
  });
  afterAll(() => db.drop());

  it('seed migrates, creates demo data, and is idempotent; jobs uses the median run length; runs lists the runs', async () => {
    const first = await run(['seed', '--accounts', '120', '--days', '1'], { DATABASE_URL: db.url });
    expect(first.code).toBe(0);
    expect(first.logs.find((l) => Array.isArray(l.applied))?.applied).toEqual(expect.arrayContaining(['1764403200000_initial', '1764489600000_jobs']));
    const seeded = first.logs.find((l) => l.msg.startsWith('seed done'))!;
    expect(seeded.inserted).toMatchObject({ accounts: 120 });
    expect((seeded.inserted as { usage: number }).usage).toBeGreaterThan(0);
    const second = await run(['seed', '--accounts', '120', '--days', '1'], { DATABASE_URL: db.url });
    expect(second.code).toBe(0);
    // Today's usage is seeded up to the moment of the run: a rerun later the same day adds what
    // came due since (near midnight UTC, a few rows), never a row twice.
    const again = second.logs.find((l) => l.msg.startsWith('seed done'))?.inserted as { accounts: number; usage: number };
    expect(again.accounts).toBe(0);
    const [today] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM usage WHERE occurred_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`);
    expect(again.usage).toBeLessThanOrEqual(today!.n);
    expect(await db.query(`SELECT count(*)::int AS n FROM usage`)).toEqual([{ n: (seeded.inserted as { usage: number }).usage + again.usage }]);
    expect(await db.query(`SELECT count(*)::int AS n FROM accounts`)).toEqual([{ n: 120 }]);

    expect((await runJob(db, ['billing-run', '--scheduled-time', NIGHTLY_TIME])).code).toBe(0);
    expect((await runJob(db, ['data-cleanup'], { JOB_FAULT_INJECTION: 'fail-attempts=all', JOB_RETRY_BACKOFF_MS: '0' })).code).toBe(1);

    const listing = JSON.parse((await run(['jobs', '--json'], { DATABASE_URL: db.url })).stdout) as JobListing[];
    expect(listing.find((j) => j.name === 'billing-run')?.runLengthSource).toBe('median of 1 run');
    expect(listing.find((j) => j.name === 'data-cleanup')?.runLengthSource).toBe('assumed');

    const runs = await run(['runs'], { DATABASE_URL: db.url });
    expect(runs.code).toBe(0);
    const lines = runs.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^RUN\s+JOB\s+SCHEDULED \(UTC\)\s+STATUS\s+TRY/);
    expect(lines).toHaveLength(2 + 3);
    expect(lines[2]).toMatch(/^ {0,2}#3\s+data-cleanup\s.*\sfailed\s+2\s.*injected failure/);
    expect(lines[4]).toMatch(/^ {0,2}#1\s+billing-run\s+2025-03-10 00:15:00\s+succeeded\s+1\s/);

    const onlyBilling = await run(['runs', 'billing-run', '--limit', '5'], { DATABASE_URL: db.url });
    expect(onlyBilling.stdout.trimEnd().split('\n')).toHaveLength(3);
    const unknown = await run(['runs', 'bill-everyone'], { DATABASE_URL: db.url });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('Unknown job "bill-everyone". Known jobs: billing-run, report-aggregation, data-cleanup, weekly-export.');

    // Newest first by the number, also once the ids have two digits (as text, "9" > "11").
    await db.query(
      `INSERT INTO job_runs (job, scheduled_time, status, attempt, finished_at, ran_on)
       SELECT 'weekly-export', '2025-03-10T00:00:00Z'::timestamptz + make_interval(hours => h), 'succeeded', 1, now(), 'a-task' FROM generate_series(1, 8) AS h`,
    );
    const newest = JSON.parse((await run(['runs', '--limit', '2', '--json'], { DATABASE_URL: db.url })).stdout) as { id: string }[];
    expect(newest.map((r) => r.id)).toEqual(['11', '10']);
    await expectNothingLeft(db);
  });
});
