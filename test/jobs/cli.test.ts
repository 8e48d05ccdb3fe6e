/** The job command line: the run key's time, the flags, and bad input (exit 2, a clear message, nothing done). */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JOBS } from '../../lib/jobs.js';
import { parseIsoTime, parseJobArgs } from '../../app/jobs/args.js';
import { DATE_TIME_PATTERN, DAY_PATTERN, instantMs } from '../../app/instants.js';
import { EXIT, UsageError } from '../../app/errors.js';
import { run, start } from '../helpers/process.js';

// Usage errors come before any connection: this database does not exist.
const NO_DB = { DATABASE_URL: 'postgres://u:p@127.0.0.1:1/none' };

describe('the scheduled time', () => {
  it("reads the API's date-times, with an offset, and its days as midnight UTC", () => {
    expect(parseIsoTime('2025-01-02T00:15:00Z')?.toISOString()).toBe('2025-01-02T00:15:00.000Z');
    expect(parseIsoTime('2025-01-02T00:15:00.123456Z')?.toISOString()).toBe('2025-01-02T00:15:00.123Z');
    expect(parseIsoTime('2025-01-02T01:15:00+01:00')?.toISOString()).toBe('2025-01-02T00:15:00.000Z');
    expect(parseIsoTime('2025-01-01T19:15:00-05:00')?.toISOString()).toBe('2025-01-02T00:15:00.000Z');
    expect(parseIsoTime('2025-01-02')?.toISOString()).toBe('2025-01-02T00:00:00.000Z');
  });

  it('takes a text exactly when the API takes it as a date-time or a day', () => {
    const texts = fc.oneof(
      fc.tuple(
        fc.constantFrom('1969-12-31', '1970-01-01', '2025-01-02', '2024-02-29', '2025-02-29', '2025-13-01'),
        fc.constantFrom('T', 't', ' ', ''),
        fc.constantFrom('00:15:00', '00:15', '23:59:59.9999', '24:00:00', '12:60:00'),
        fc.constantFrom('Z', 'z', '', '+01:00', '-0500', '+01', '+18:00', '-18:01', '+23:59'),
      ).map(([day, t, time, zone]) => (t === '' ? day : `${day}${t}${time}${zone}`)),
      fc.string({ maxLength: 30 }),
    );
    fc.assert(fc.property(texts, (text) => {
      const api = DAY_PATTERN.test(text) ? Date.parse(`${text}T00:00:00Z`) : DATE_TIME_PATTERN.test(text) ? instantMs(text) : undefined;
      expect(parseIsoTime(text)?.getTime(), text).toBe(api);
    }), { numRuns: Number(process.env.FC_NUM_RUNS ?? 500) });
  });

  it('refuses what is not a real UTC-anchored time', () => {
    for (const bad of ['yesterday', '2025-01-02T00:15:00', '2025-02-30', '2025-13-01', '2025-01-02T24:00:00Z', '2025-01-02T00:61:00Z', '1735776900', '']) {
      expect(parseIsoTime(bad), bad).toBeUndefined();
    }
  });

  it('comes from SCHEDULED_TIME or --scheduled-time, else the current time', () => {
    const now = new Date('2025-05-05T05:05:05Z');
    expect(parseJobArgs('billing-run', [], { SCHEDULED_TIME: '2025-02-02T00:00:00Z' }, now)).toEqual({
      scheduledTime: new Date('2025-02-02T00:00:00Z'),
      scheduledTimeSource: 'SCHEDULED_TIME',
      force: false,
    });
    expect(parseJobArgs('billing-run', ['--scheduled-time=2025-01-01T00:00:00Z', '--force'], {}, now)).toEqual({
      scheduledTime: new Date('2025-01-01T00:00:00Z'),
      scheduledTimeSource: '--scheduled-time',
      force: true,
    });
    expect(parseJobArgs('billing-run', [], {}, now)).toEqual({ scheduledTime: now, scheduledTimeSource: 'now', force: false });
    expect(() => parseJobArgs('billing-run', ['--scheduled-time'], {}, now)).toThrow(UsageError);
  });
});

describe('bad input', () => {
  it('an unknown job exits 2 and lists the valid jobs', async () => {
    const r = await run(['bill-everyone', '--force'], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Unknown job "bill-everyone". Known jobs: billing-run, report-aggregation, data-cleanup, weekly-export');
    for (const job of JOBS) expect(r.stderr).toContain(job.name);
    expect(r.stdout).toBe('');
  });

  it('a malformed --scheduled-time exits 2 and shows the accepted forms', async () => {
    const r = await run(['billing-run', '--scheduled-time', 'last tuesday'], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      '--scheduled-time "last tuesday" is not an ISO-8601 time. Use a UTC time like 2025-01-02T00:15:00Z, a time with its offset like 2025-01-02T01:15:00+01:00, or a date like 2025-01-02 (midnight UTC).\n',
    );
    expect(r.stdout).toBe('');
  });

  it('a malformed SCHEDULED_TIME (from EventBridge) exits 2 too', async () => {
    const r = await run(['billing-run'], { ...NO_DB, SCHEDULED_TIME: '2025-02-30T00:15:00Z' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^SCHEDULED_TIME "2025-02-30T00:15:00Z" is not a real calendar date and time\./);
  });

  it('a time without its offset exits 2 saying the offset is missing', async () => {
    const r = await run(['billing-run', '--scheduled-time', '2026-12-01T00:15:00'], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^--scheduled-time "2026-12-01T00:15:00" has no UTC offset: add Z for UTC or the offset it was written in/);
  });

  it.each(['0001-01-02', '0099-12-31T00:00:00Z', '1969-12-31'])('a year before 1970 (%s) exits 2 instead of moving to the 1900s', async (time) => {
    const r = await run(['billing-run', '--scheduled-time', time], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^--scheduled-time "${time}" is before the year 1970\\.`));
    expect(parseIsoTime(time)).toBeUndefined();
  });

  it('takes and refuses the times the API does: offsets to ±18:00, instants from 1970 on in UTC', () => {
    expect(parseIsoTime('2025-01-02T18:00:00+18:00')?.toISOString()).toBe('2025-01-02T00:00:00.000Z');
    expect(parseIsoTime('2025-01-01T06:00:00-18:00')?.toISOString()).toBe('2025-01-02T00:00:00.000Z');
    expect(parseIsoTime('1970-01-01T00:00:00Z')?.toISOString()).toBe('1970-01-01T00:00:00.000Z');
    expect(parseIsoTime('1970-01-01T01:00:00+01:00')?.toISOString()).toBe('1970-01-01T00:00:00.000Z');
    for (const bad of ['2025-01-02T00:00:00+18:01', '2025-01-02T00:00:00+23:59', '2025-01-02T00:00:00-19:00', '1969-12-31T23:00:00-02:00', '1970-01-01T00:00:00+01:00']) {
      expect(parseIsoTime(bad), bad).toBeUndefined();
    }
  });

  it.each([
    ['2025-01-02T00:00:00+23:59', 'has the UTC offset +23:59: it must have a UTC offset between -18:00 and +18:00'],
    ['1969-12-31T23:00:00-02:00', 'is written in 1969, though it is 1970-01-01T01:00:00.000Z in UTC: a date-time\'s year must be 1970 or later as written, as the API takes it, so give it in UTC (1970-01-01T01:00:00.000Z)'],
    ['1969-12-31T23:00:00-01:00', 'is written in 1969, though it is 1970-01-01T00:00:00.000Z in UTC: a date-time\'s year must be 1970 or later as written, as the API takes it, so give it in UTC (1970-01-01T00:00:00.000Z)'],
    ['1969-12-31T22:59:59-01:00', 'is before the year 1970'],
    ['1970-01-01T00:00:00+01:00', 'is 1969-12-31T23:00:00.000Z in UTC, before the year 1970'],
    ['2025-01-02T01:15+01:00', 'is not written the way the API writes times: YYYY-MM-DDThh:mm:ss, a fraction if any, then Z or ±hh:mm (upper-case T and Z)'],
    ['2025-01-02T00:15:00+01:60', 'has the UTC offset +01:60, whose minutes are past 59: it must have a UTC offset between -18:00 and +18:00'],
    ['2025-01-02T00:15:00.1234567890123', 'has no UTC offset: add Z for UTC or the offset it was written in (+01:00); without one it would mean a different run on every machine'],
    ['2025-02-30T00:15:00.1234567890Z', 'is not a real calendar date and time'],
  ])('%s exits 2 with the API\'s rule', async (time, problem) => {
    const r = await run(['billing-run', '--scheduled-time', time], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^--scheduled-time "${time.replace('+', '\\+')}" ${problem.replace(/[+()]/g, '\\$&')}\\.`));
    expect(r.stdout).toBe('');
  });

  it.each([
    [['--scheduled-time', '2025-01-01T00:15:00Z', '--scheduled-time', '2025-01-02T00:15:00Z'], '--scheduled-time is given twice ("2025-01-01T00:15:00Z" and "2025-01-02T00:15:00Z")'],
    [['--scheduled-time=garbage', '--scheduled-time=2025-01-02T00:15:00Z'], '--scheduled-time is given twice ("garbage" and "2025-01-02T00:15:00Z")'],
    [['--force', '--scheduled-time', '2025-01-02T00:15:00Z', '--force'], '--force is given twice'],
  ])('a flag given twice (%j) exits 2 naming both values, and nothing runs', async (args, message) => {
    const r = await run(['billing-run', ...args], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`${message}; a run has one meaning, so give it once.\n`);
    expect(r.stdout).toBe('');
  });

  it('SCHEDULED_TIME and a --scheduled-time naming another instant exit 2 naming both; the same instant is one meaning', async () => {
    const r = await run(['billing-run', '--scheduled-time', '2025-01-01T00:15:00Z'], { ...NO_DB, SCHEDULED_TIME: '2025-01-02T00:15:00Z' });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      'SCHEDULED_TIME "2025-01-02T00:15:00Z" (2025-01-02T00:15:00.000Z) and --scheduled-time "2025-01-01T00:15:00Z" (2025-01-01T00:15:00.000Z) name different times; a run has one meaning, so give one of them, or the same time in both.\n',
    );
    expect(r.stdout).toBe('');
    // A bad value is named as bad whichever side it is on.
    expect(() => parseJobArgs('billing-run', ['--scheduled-time', 'garbage'], { SCHEDULED_TIME: '2025-01-02T00:15:00Z' })).toThrow(/^--scheduled-time "garbage" is not an ISO-8601 time/);
    // Read as given, as the API reads a time: white space around it, or alone, is refused; an empty value is unset.
    expect(() => parseJobArgs('billing-run', [], { SCHEDULED_TIME: ' 2025-01-02T00:15:00Z\n' })).toThrow(/^SCHEDULED_TIME " 2025-01-02T00:15:00Z\\n" has white space around it: give the time alone\./);
    expect(() => parseJobArgs('billing-run', [], { SCHEDULED_TIME: ' ' })).toThrow(/^SCHEDULED_TIME " " is only white space: give a time\./);
    expect(parseJobArgs('billing-run', [], { SCHEDULED_TIME: '' }, new Date(0)).scheduledTimeSource).toBe('now');
    expect(parseJobArgs('billing-run', ['--scheduled-time', '2025-01-02T01:15:00+01:00'], { SCHEDULED_TIME: '2025-01-02T00:15:00Z' })).toEqual({
      scheduledTime: new Date('2025-01-02T00:15:00Z'),
      scheduledTimeSource: 'SCHEDULED_TIME',
      force: false,
    });
  });

  it('quotes a long value cut, saying how long it was', () => {
    const long = `2025-01-02T00:15:00Z${'x'.repeat(120_000)}`;
    let message = '';
    try {
      parseJobArgs('billing-run', ['--scheduled-time', long], {});
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/^--scheduled-time "2025-01-02T00:15:00Zx+"\.\.\. \(120020 characters\) is not an ISO-8601 time\./);
    expect(message.length).toBeLessThan(500);
  });

  it('an unknown flag exits 2 and lists the valid flags', async () => {
    const r = await run(['data-cleanup', '--dry-run'], NO_DB);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('Unknown argument "--dry-run" for job data-cleanup. Valid flags: --scheduled-time <ISO-8601>, --force.\n');
  });

  it('JOB_FAULT_INJECTION is refused outside NODE_ENV=test', async () => {
    const r = await run(['data-cleanup'], { ...NO_DB, JOB_FAULT_INJECTION: 'fail-attempts=all' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('JOB_FAULT_INJECTION="fail-attempts=all": makes jobs fail on purpose, so it is refused unless NODE_ENV=test');
    const typo = await run(['data-cleanup'], { ...NO_DB, NODE_ENV: 'test', JOB_FAULT_INJECTION: 'fail=1' });
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('JOB_FAULT_INJECTION="fail=1": accepts comma-separated fail-attempts=<n|all>, timeout-ms=<n> and crash=<exception|rejection>');
  });
});

describe('a build that cannot load its modules', () => {
  it('a job exits 4 (failed, not alerted: its execution retries, then alerts) with a fatal log line, no stack on stderr', async () => {
    const { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } = await import('node:fs');
    const path = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(path.join(tmpdir(), 'bad-build-'));
    try {
      cpSync('dist', path.join(dir, 'dist'), { recursive: true });
      symlinkSync(path.resolve('node_modules'), path.join(dir, 'node_modules'));
      writeFileSync(path.join(dir, 'package.json'), readFileSync('package.json'));
      // A module that throws as it loads, as a bad build or a missing dependency does.
      const configJs = path.join(dir, 'dist/app/config.js');
      writeFileSync(configJs, `throw new Error('broken build: config.js');\n${readFileSync(configJs, 'utf8')}`);
      const proc = start(['billing-run', '--scheduled-time', '2025-01-02T00:15:00Z'], NO_DB, [process.execPath, path.join(dir, 'dist/app/main.js')]);
      const { code } = await proc.exited;
      expect(code).toBe(EXIT.unalerted);
      expect(proc.logs.find((l) => l.level === 'fatal')?.msg).toBe('job billing-run could not load its modules: broken build: config.js; exiting 4');
      expect(proc.stderr()).toBe('');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('an invalid jobs table', () => {
  it('refuses a job and the listing with exit 2, naming every bad row and field, no stack', async () => {
    // A copy of the build whose table has the mistakes a fork might make; node_modules is shared.
    const { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } = await import('node:fs');
    const path = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(path.join(tmpdir(), 'bad-table-'));
    try {
      cpSync('dist', path.join(dir, 'dist'), { recursive: true });
      symlinkSync(path.resolve('node_modules'), path.join(dir, 'node_modules'));
      writeFileSync(path.join(dir, 'package.json'), readFileSync('package.json'));
      const jobsJs = path.join(dir, 'dist/lib/jobs.js');
      const table = readFileSync(jobsJs, 'utf8');
      const broken = table.replace("schedule: 'cron(15 0 * * ? *)'", "schedule: 'cron(15 0 * * *)'").replace("name: 'report-aggregation'", "name: 'billing-run'");
      expect(broken).not.toBe(table);
      writeFileSync(jobsJs, broken);
      for (const args of [['billing-run', '--scheduled-time', '2025-01-02T00:15:00Z'], ['jobs']]) {
        const proc = start(args, NO_DB, [process.execPath, path.join(dir, 'dist/app/main.js')]);
        const { code } = await proc.exited;
        const r = { code, stderr: proc.stderr() };
        expect(r.code, args.join(' ')).toBe(2);
        expect(r.stderr).toContain('The jobs table (lib/jobs.ts) has 2 problems:');
        expect(r.stderr).toMatch(/job "billing-run": schedule "cron\(15 0 \* \* \*\)" is invalid/);
        expect(r.stderr).toContain('job "billing-run": name is a duplicate');
        expect(r.stderr).not.toMatch(/\n\s+at /);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('npm run job (the local launcher)', () => {
  /**
   * The launcher with no DATABASE_URL, its local Postgres's port held by another listener and
   * its data folder new: a launcher that started (or looked for) Postgres before checking the
   * arguments would exit 1 on the port, or leave the folder made.
   */
  async function launch(args: string[]): Promise<{ code: number | null; stderr: string; stdout: string; folderMade: boolean }> {
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const dataDir = path.join(mkdtempSync(path.join(tmpdir(), 'launcher-')), 'postgres');
    try {
      const r = spawnSync(process.execPath, ['dist/app/dev/local.js', ...args], {
        env: { PATH: process.env.PATH, HOME: process.env.HOME, LOCAL_PG_PORT: String((holder.address() as net.AddressInfo).port), LOCAL_PG_DATA_DIR: dataDir },
        encoding: 'utf8',
        timeout: 60_000,
      });
      return { code: r.status, stderr: r.stderr, stdout: r.stdout, folderMade: existsSync(dataDir) };
    } finally {
      holder.close();
    }
  }

  it.each([
    [['--job', 'billing-run', '--bogus'], /^Unknown argument "--bogus" for job billing-run\./],
    [['--job', 'billing-run', '--scheduled-time', 'garbage'], /^--scheduled-time "garbage" is not an ISO-8601 time/],
    [['--job', 'billing-run', '--scheduled-time', '2999-01-01T00:00:00Z'], /2999-01-01T00:00:00\.000Z/],
    [['--job', 'bill-everyone'], /^npm run job -- <job> \[--scheduled-time ISO\] \[--force\]: given "bill-everyone", which is not a job\. Jobs: /],
    [['--job', 'migrate'], /given "migrate", which is not a job/],
    [['--job'], /given no job\. Jobs: /],
    [['bill-everyone'], /^Unknown job "bill-everyone"/],
  ])('%j exits 2 before any Postgres is looked for, started or migrated', async (args, message) => {
    const r = await launch(args);
    expect(r.code).toBe(EXIT.usage);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
    expect(r.folderMade).toBe(false);
  });
});
