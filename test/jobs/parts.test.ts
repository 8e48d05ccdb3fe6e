/** The runner's and the jobs' pure parts: backoff, EMF documents, periods, CSV, progress, prices, alert text. */
import { describe, expect, it } from 'vitest';
import { JOB_METRICS } from '../../lib/metrics.js';
import { parseSchedule } from '../../lib/schedule.js';
import { alertBody, alertSubject } from '../../app/jobs/alert.js';
import { billingPeriodFor } from '../../app/jobs/billing-run.js';
import { emfDocument } from '../../app/jobs/emf.js';
import { runsPerMonth } from '../../app/jobs/list.js';
import { FARGATE_PRICING, billedSeconds, runCost } from '../../app/jobs/pricing.js';
import { Progress, formatProgress } from '../../app/jobs/progress.js';
import { rollupDayFor } from '../../app/jobs/report-aggregation.js';
import { MAX_BACKOFF_MS, backoffMs, exitCodeOf } from '../../app/jobs/runner.js';
import { csvField, exportFileName, exportWeekFor } from '../../app/jobs/weekly-export.js';
import { EXIT } from '../../app/errors.js';

describe('backoff', () => {
  it('doubles per failed attempt, jitters between half and all of it, and caps', () => {
    expect([1, 2, 3].map((n) => backoffMs(1_000, n, () => 0))).toEqual([500, 1_000, 2_000]);
    expect([1, 2, 3].map((n) => backoffMs(1_000, n, () => 1))).toEqual([1_000, 2_000, 4_000]);
    expect(backoffMs(1_000, 30, () => 1)).toBe(MAX_BACKOFF_MS);
  });
});

describe('exit codes', () => {
  it('0 for succeeded, already done, already running and skipped; 1 failed; 3 interrupted', () => {
    expect(exitCodeOf({ kind: 'succeeded', runId: '1', attempts: 1 })).toBe(EXIT.ok);
    expect(exitCodeOf({ kind: 'already-done', runId: '1' })).toBe(EXIT.ok);
    expect(exitCodeOf({ kind: 'already-running' })).toBe(EXIT.ok);
    expect(exitCodeOf({ kind: 'skipped' })).toBe(EXIT.ok);
    expect(exitCodeOf({ kind: 'failed', reason: 'timeout', attempts: 1, error: 'timeout', alerted: true })).toBe(EXIT.failure);
    expect(exitCodeOf({ kind: 'failed', reason: 'timeout', attempts: 1, error: 'timeout', alerted: false })).toBe(EXIT.unalerted);
    expect(exitCodeOf({ kind: 'interrupted' })).toBe(3);
  });
});

describe('EMF', () => {
  it('declares each value as a metric of the namespace with the Job dimension', () => {
    expect(emfDocument('Ns', 'billing-run', { heartbeat: 1, processed: 42 }, 1_700_000_000_000)).toEqual({
      _aws: {
        Timestamp: 1_700_000_000_000,
        CloudWatchMetrics: [
          {
            Namespace: 'Ns',
            Dimensions: [['Job']],
            Metrics: [
              { Name: JOB_METRICS.heartbeat, Unit: 'Count' },
              { Name: JOB_METRICS.processed, Unit: 'Count' },
            ],
          },
        ],
      },
      Job: 'billing-run',
      Heartbeat: 1,
      Processed: 42,
    });
  });
});

describe('periods', () => {
  it('billing-run and report-aggregation work on the previous UTC day', () => {
    expect(billingPeriodFor(new Date('2025-03-01T00:15:00Z'))).toEqual({ start: '2025-02-28', end: '2025-03-01' });
    expect(billingPeriodFor(new Date('2025-01-01T23:59:59Z'))).toEqual({ start: '2024-12-31', end: '2025-01-01' });
    expect(rollupDayFor(new Date('2024-03-01T01:30:00Z'))).toBe('2024-02-29');
  });

  it('weekly-export works on the Monday-to-Sunday week before the current one, under one name per week', () => {
    const monday = exportWeekFor(new Date('2025-03-10T03:00:00Z'), 'UTC');
    expect(monday).toEqual({ start: '2025-03-03', end: '2025-03-10' });
    expect(exportWeekFor(new Date('2025-03-16T23:00:00Z'), 'UTC')).toEqual(monday);
    expect(exportWeekFor(new Date('2025-03-17T00:00:00Z'), 'UTC')).toEqual({ start: '2025-03-10', end: '2025-03-17' });
    expect(exportFileName(monday)).toBe('invoices-week-2025-03-03.csv');
  });

  it('weekly-export\'s week is the week of its zone: Berlin\'s Monday starts at 23:00 UTC on Sunday in winter', () => {
    expect(exportWeekFor(new Date('2025-03-16T23:00:00Z'), 'Europe/Berlin')).toEqual({ start: '2025-03-10', end: '2025-03-17' });
    expect(exportWeekFor(new Date('2025-03-16T22:59:59Z'), 'Europe/Berlin')).toEqual({ start: '2025-03-03', end: '2025-03-10' });
    // The shipped row is in Berlin, and the handler reads its zone from the row.
    expect(exportWeekFor(new Date('2025-03-16T23:00:00Z'))).toEqual({ start: '2025-03-10', end: '2025-03-17' });
  });
});

describe('CSV fields', () => {
  it('quote what needs quoting and defuse spreadsheet formulas in text', () => {
    expect(csvField('plain')).toBe('plain');
    expect(csvField('Acme, Inc. "the best"')).toBe('"Acme, Inc. ""the best"""');
    expect(csvField('=HYPERLINK("x")', true)).toBe('"\'=HYPERLINK(""x"")"');
    expect(csvField('-5')).toBe('-5');
    expect(csvField(null)).toBe('');
    expect(csvField(new Date('2025-01-01T00:00:00Z'))).toBe('2025-01-01T00:00:00.000Z');
  });
});

describe('progress', () => {
  it('never goes back within an attempt, nor when the next resumes from a checkpoint a batch behind; a fresh attempt starts from zero', () => {
    const p = new Progress(() => 0);
    p.begin(true);
    p.report(88, 1_000);
    // The reconnect: the handler counts again from its last committed checkpoint.
    p.begin(false);
    p.report(87);
    expect(p.snapshot().processed).toBe(88);
    p.report(90);
    expect(p.snapshot().processed).toBe(90);
    p.begin(true);
    p.report(5);
    expect(p.snapshot().processed).toBe(5);
  });

  it('reports the rate since the attempt began and the ETA', () => {
    let now = 0;
    const p = new Progress(() => now);
    p.begin(true);
    p.report(1_000, 10_000); // resumed from a checkpoint at 1,000
    now = 2_000;
    p.report(3_000);
    expect(p.snapshot()).toEqual({ processed: 3_000, total: 10_000, rate: 1_000, etaSeconds: 7 });
    expect(formatProgress(p.snapshot())).toBe('3,000/10,000 (30%) · 1,000/s · ETA 7s');
  });

  it('keeps the progress so far when the next attempt resumes, and starts from zero when it does not', () => {
    const p = new Progress(() => 0);
    p.begin(true);
    p.report(4_000, 10_000);
    p.begin(false);
    expect(p.snapshot()).toMatchObject({ processed: 4_000, total: 10_000 });
    p.begin(true);
    expect(p.snapshot()).toMatchObject({ processed: 0, total: null });
  });
});

describe('Fargate cost', () => {
  it('bills the run plus the task start, at least a minute, per vCPU-hour and GB-hour', () => {
    expect(billedSeconds(1)).toBe(FARGATE_PRICING.minimumBilledSeconds);
    expect(billedSeconds(570)).toBe(600);
    // 1 vCPU, 2 GB, 600 s billed, x86 on-demand: (0.04048 + 2 × 0.004445) / 6
    expect(runCost(1_024, 2_048, 570, FARGATE_PRICING.prices.x86.onDemand)).toBeCloseTo((0.04048 + 2 * 0.004445) / 6, 10);
    expect(FARGATE_PRICING.prices.arm.spot.vcpuHour).toBeCloseTo(0.03238 * 0.3, 10);
  });

  it('counts the runs of an average month from the schedule', () => {
    expect(runsPerMonth(parseSchedule('rate(6 hours)'))).toBeCloseTo((365 * 4) / 12, 6);
    expect(runsPerMonth(parseSchedule('cron(15 0 * * ? *)'), new Date('2025-01-01T00:00:00Z'))).toBeCloseTo(365 / 12, 6);
    expect(runsPerMonth(parseSchedule('cron(0 3 ? * MON *)'), new Date('2025-01-01T00:00:00Z'))).toBeCloseTo(52 / 12, 6);
  });
});

describe('the alert', () => {
  it('keeps the subject within what SNS accepts', () => {
    const subject = alertSubject({
      job: 'a'.repeat(40),
      scheduledTime: new Date('2025-01-02T00:15:00Z'),
      period: 'x',
      attempts: 1,
      maxAttempts: 1,
      durationMs: 1,
      error: 'e',
      location: { ranOn: 'h' },
    });
    expect(subject.length).toBeLessThan(100);
    expect(subject).toMatch(/^[\x20-\x7e]+$/);
  });

  it('without a recorded run, says so instead of a run id', () => {
    const body = alertBody({ job: 'data-cleanup', scheduledTime: new Date('2025-01-02T00:00:00Z'), period: 'p', attempts: 0, maxAttempts: 2, durationMs: 1_234, error: 'connect ECONNREFUSED', location: { ranOn: 'host' } });
    expect(body).toContain('Run id:         (none: the run could not be recorded)');
    expect(body).toContain('Duration:       1.2 s');
    expect(body).not.toContain('aws ecs run-task');
  });

  it('in ECS, names the rerun in the stack the task family comes from; a family of another shape gets a run-task command', () => {
    const report = { job: 'billing-run', scheduledTime: new Date('2025-01-02T00:15:00Z'), period: 'p', attempts: 3, maxAttempts: 3, durationMs: 1, error: 'e' };
    const ecs = { cluster: 'arn:aws:ecs:us-east-1:123456789012:cluster/jobs', container: 'app', launchType: 'FARGATE' };
    const ours = alertBody({ ...report, location: { ranOn: 'arn:task', ecs: { ...ecs, taskDefinition: 'EcsSaasBackend-prod-billing-run:12' } } });
    expect(ours).toContain('  npm run job:aws -- billing-run --scheduled-time 2025-01-02T00:15:00.000Z --stack EcsSaasBackend-prod\n');
    expect(ours).not.toContain('aws ecs run-task');
    const other = alertBody({ ...report, location: { ranOn: 'arn:task', ecs: { ...ecs, taskDefinition: 'billing:3' } } });
    expect(other).toContain('aws ecs run-task --cluster arn:aws:ecs:us-east-1:123456789012:cluster/jobs --task-definition billing:3 --launch-type FARGATE');
    expect(other).not.toContain('job:aws');
  });
});
