import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Duration } from 'aws-cdk-lib';
import { describe, expect, it } from 'vitest';
import { RUNBOOK } from '../../lib/constructs/job-monitoring.js';
import { SERVICE_RUNBOOK } from '../../lib/constructs/service-monitoring.js';
import { STAGE_DEFAULTS, STAGES } from '../../lib/defaults.js';
import { CONTEXT_SETTINGS, settingsFromContext } from '../../lib/constructs/settings.js';
import { CDK_CONTEXT, errorMessage, EXTRA_JOB, jobsCopy, newApp, TEST_ALERT_EMAIL } from './synth.js';

describe('settings from cdk.json context', () => {
  it('reads values given on the command line (strings) as numbers, booleans and durations', () => {
    const { stackName, props } = settingsFromContext(newApp({
      stackName: 'Staging',
      minCapacity: '3',
      maxCapacity: '8',
      stopTimeout: '30',
      albIdleTimeout: 120,
      databaseMultiAz: 'true',
      account: '123456789012',
      region: 'eu-west-1',
    }).node);
    expect(stackName).toBe('Staging');
    expect(props.env).toEqual({ account: '123456789012', region: 'eu-west-1' });
    expect(props.service?.minCapacity).toBe(3);
    expect(props.service?.maxCapacity).toBe(8);
    expect(props.service?.stopTimeout?.toSeconds()).toBe(30);
    expect(props.service?.albIdleTimeout).toEqual(Duration.seconds(120));
    expect(props.database?.multiAz).toBe(true);
  });

  it('is environment-agnostic unless an account and a region are given', () => {
    expect(settingsFromContext(newApp().node).props.env).toBeUndefined();
  });

  it('reports every bad setting at once, each with its value', () => {
    const message = errorMessage(() => settingsFromContext(newApp({
      alertEmail: 'not-an-address',
      maxCapacity: 'two',
      stopTimeout: '150',
      deregistrationDelay: -1,
      databaseSecretArn: 'my-secret',
      databaseMultiAZ: true,
      natGateways: 3,
      logRetentionDays: 10,
      logLevel: 'verbose',
      account: '123456789012',
    }).node));
    expect(message).toMatch(/^The settings \(cdk\.json context\) of stack EcsSaasBackend-dev have 10 problems:/);
    expect(message).toContain('logLevel must be one of trace, debug, info, warn, error, fatal, silent, got "verbose"');
    expect(message).toContain('maxCapacity must be a whole number, got "two"');
    expect(message).toContain('unknown context key "databaseMultiAZ": did you mean "databaseMultiAz"?');
    expect(message).toContain('account and region must be set together, got account "123456789012" and region undefined');
    expect(message).toContain('alertEmail must be an email address, got "not-an-address"');
    expect(message).toContain('stopTimeout must be a whole number of seconds between 2 and 120, got 150');
    expect(message).toContain('deregistrationDelay must be a whole number of seconds between 0 and 3600, got -1');
    expect(message).toContain('database secretArn must be a Secrets Manager secret ARN');
    expect(message).toContain('natGateways must be a whole number between 1 and 2, got 3');
    expect(message).toContain('logRetentionDays must be one of 1, 3, 5, 7, 14, 30,');
  });

  it('requires alertEmail, so that alerts always reach someone', () => {
    expect(errorMessage(() => settingsFromContext(newApp({ alertEmail: '' }).node))).toContain('alertEmail must be set');
  });

  it('reports a bad jobs table and bad settings in the same error, each under the file it comes from', () => {
    const jobs = [...jobsCopy(), { ...EXTRA_JOB, cpu: 300 }];
    const message = errorMessage(() => settingsFromContext(newApp({ minCapacity: 0 }).node, { jobs }));
    const [settings, table] = message.split('\n\n');
    expect(settings).toMatch(/^The settings \(cdk\.json context\) of stack \S+ have 1 problem:/);
    expect(settings).toContain('minCapacity must be a whole number of at least 1, got 0');
    expect(table).toMatch(/^The jobs table \(lib\/jobs\.ts\) has 1 problem:/);
    expect(table).toContain('job "usage-digest": cpu must be one of 256, 512, 1024');
  });

  it.each([
    ['a misspelled time zone', { timeZone: 'America/New_Yrok' }, 'timeZone'],
    ['a job size Fargate has not', { cpu: 512, memoryMiB: 256 }, 'memoryMiB'],
  ])('blames the jobs table, not the settings, for %s', (_name, change, field) => {
    const jobs = [...jobsCopy(), { ...EXTRA_JOB, ...change }];
    const message = errorMessage(() => settingsFromContext(newApp().node, { jobs }));
    expect(message).toMatch(/^The jobs table \(lib\/jobs\.ts\) has 1 problem:/);
    expect(message).toContain(`job "usage-digest": ${field}`);
    expect(message).not.toContain('cdk.json');
  });
});

describe('bin/app.ts', () => {
  it('exits 1 with every problem and no stack trace when a setting is bad', () => {
    const outdir = mkdtempSync(path.join(tmpdir(), 'cdk-out-'));
    try {
      const run = spawnSync(process.execPath, ['--import', 'tsx', 'bin/app.ts'], {
        env: { ...process.env, CDK_OUTDIR: outdir, CDK_CONTEXT_JSON: JSON.stringify({ ...CDK_CONTEXT, alertEmail: TEST_ALERT_EMAIL, stopTimeout: 150, minCapacity: 3 }) },
        encoding: 'utf8',
        timeout: 170_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain('stopTimeout must be a whole number of seconds between 2 and 120, got 150');
      expect(run.stderr).toContain('minCapacity (3) must not exceed maxCapacity (2)');
      expect(run.stderr).not.toMatch(/\n\s+at /);
    } finally {
      rmSync(outdir, { recursive: true, force: true });
    }
  });
});

describe('docs', () => {
  const operations = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  const infrastructure = readFileSync(new URL('../../docs/infrastructure.md', import.meta.url), 'utf8');

  it('has a runbook section for every alarm and alert that links to one', () => {
    // GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
    const anchors = operations.split('\n').filter((l) => l.startsWith('#')).map((l) =>
      l.replace(/^#+\s*/, '').toLowerCase().replace(/[^\w\s-]/g, '').replace(/\s/g, '-'));
    for (const link of [...Object.values(RUNBOOK), ...Object.values(SERVICE_RUNBOOK)]) {
      expect(link).toMatch(/^docs\/operations\.md#/);
      expect(anchors, link).toContain(link.slice('docs/operations.md#'.length));
    }
  });

  it('documents every context setting with its default, per stage where it follows the stage', () => {
    for (const [key, setting] of Object.entries(CONTEXT_SETTINGS)) {
      const row = infrastructure.split('\n').find((line) => line.startsWith(`| \`${key}\` |`));
      expect(row, `docs/infrastructure.md has no row for ${key}`).toBeDefined();
      if (setting.default !== undefined) expect(row, key).toContain(`| \`${String(setting.default)}\` |`);
      const perStage = (setting as { perStage?: keyof (typeof STAGE_DEFAULTS)['dev'] }).perStage;
      if (perStage) for (const stage of STAGES) expect(row, key).toContain(`${stage} \`${String(STAGE_DEFAULTS[stage][perStage])}\``);
    }
  });
});
