/** The database connection budget: derived pool sizes reach the tasks, and a budget that cannot fit fails synth naming the numbers. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { JOBS } from '../../lib/jobs.js';
import { JOB_LOCK_CONNECTIONS, poolBudget, rdsMaxConnections, RESERVED_CONNECTIONS, stackPoolBudget } from '../../lib/pool-budget.js';
import { LOCK_CONNECTIONS } from '../../app/jobs/runner.js';
import { SERVICE_METRICS } from '../../lib/metrics.js';
import { DEFAULT_STAGE, STAGE_DEFAULTS, STAGES } from '../../lib/defaults.js';
import { errorMessage, jobTemplate, resources, synth } from './synth.js';

function envOf(template: ReturnType<typeof synth>['template'], idPrefix: string): Record<string, string>[] {
  return Object.entries(resources(template, 'AWS::ECS::TaskDefinition'))
    .filter(([id]) => id.startsWith(idPrefix))
    .map(([, r]) => Object.fromEntries(r.Properties.ContainerDefinitions[0].Environment.map((e: { Name: string; Value: string }) => [e.Name, e.Value])));
}

describe('the connection budget', () => {
  it('counts the runner\'s lock connections as the runner takes them (the image holds no lib/pool-budget.ts)', () => {
    expect(JOB_LOCK_CONNECTIONS).toBe(LOCK_CONNECTIONS);
  });

  it('knows max_connections of the default class: about 80 on t4g.micro', () => {
    expect(rdsMaxConnections('t4g.micro')).toBe(80);
    expect(rdsMaxConnections('t4g.small')).toBeGreaterThan(150);
    expect(rdsMaxConnections('x9.huge')).toBeUndefined();
  });

  it('fits the worst case of the defaults exactly into the database, and passes DB_POOL_MAX to every task', () => {
    const budget = poolBudget({ maxConnections: 80, maxCapacity: 6, maxHealthyPercent: 200, jobs: JOBS });
    expect(budget).toMatchObject({ apiPoolMax: 4, jobPoolMax: 3, problem: undefined });
    expect(budget.worstCase).toBeLessThanOrEqual(80);
    expect(budget.worstCase).toBe(RESERVED_CONNECTIONS + 12 * 4 + JOBS.length * 5 + 2);

    // The synthesized stack is the default stage's, with its maxCapacity.
    const s = synth();
    const stage = poolBudget({ maxConnections: 80, maxCapacity: STAGE_DEFAULTS[DEFAULT_STAGE].maxCapacity, maxHealthyPercent: 200, jobs: JOBS });
    expect(envOf(s.template, 'Api').map((e) => e.DB_POOL_MAX)).toEqual([String(stage.apiPoolMax)]);
    const jobEnvs = JOBS.filter((j) => j.enabled).flatMap((j) => envOf(jobTemplate(s, j.name), ''));
    expect(jobEnvs.length).toBe(JOBS.filter((j) => j.enabled).length);
    for (const e of jobEnvs) expect(e.DB_POOL_MAX).toBe('3');
  });

  it('refuses at synth a worst case over the limit, naming every number', () => {
    const message = errorMessage(() => synth({ service: { maxCapacity: 20 } }));
    expect(message).toContain('the database connection budget does not fit: 40 API tasks (maxCapacity 20 × maxHealthyPercent 200%) × 2 connections');
    expect(message).toContain('= 112, of max_connections 80, with the smallest API pool (an API task needs at least 2)');
    expect(errorMessage(() => synth({ database: { instanceType: 'x9.huge' } }))).toContain('databaseMaxConnections is needed: the max_connections of instance class x9.huge is not in lib/pool-budget.ts');
  });

  it.each(STAGES)('is shown in docs/configuration.md for the %s stage as the stack computes it', (stage) => {
    const { databaseInstanceType, maxCapacity } = STAGE_DEFAULTS[stage];
    const budget = stackPoolBudget({ instanceType: databaseInstanceType, maxCapacity, jobs: JOBS });
    expect(readFileSync('docs/configuration.md', 'utf8')).toContain(`\n${stage}: ${budget.explanation}\n`);
    const { template } = synth({ service: { maxCapacity }, database: { instanceType: databaseInstanceType } });
    expect(envOf(template, 'Api').map((e) => e.DB_POOL_MAX)).toEqual([String(budget.apiPoolMax)]);
  });

  it('takes a larger database into account', () => {
    const { template } = synth({ service: { maxCapacity: 20 }, database: { instanceType: 't4g.medium' } });
    expect(Number(envOf(template, 'Api')[0]!.DB_POOL_MAX)).toBeGreaterThanOrEqual(8);
  });
});

describe('the service alarms', () => {
  it('alarm on a stalled worker and on an unreachable database, from the server\'s EMF metrics', () => {
    const { template } = synth();
    const alarms = Object.values(resources(template, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties);
    const stalled = alarms.find((a) => a.MetricName === SERVICE_METRICS.workerStalled);
    expect(stalled).toMatchObject({ Namespace: 'EcsSaasBackend/Jobs', Dimensions: [{ Name: 'Worker', Value: 'usage-summary' }], Threshold: 1 });
    expect(stalled!.AlarmDescription).toContain('docs/operations.md#worker-stalled');
    const db = alarms.find((a) => a.MetricName === SERVICE_METRICS.databaseUnavailable);
    expect(db).toMatchObject({ Statistic: 'Minimum', Threshold: 1, EvaluationPeriods: 3 });
  });
});
