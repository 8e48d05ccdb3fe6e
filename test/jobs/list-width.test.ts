/** `npm run jobs` on terminals of different widths: a real pseudo-terminal from `script`, sized with stty. */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PIPED_WIDTH } from '../../app/jobs/list.js';
import { JOBS } from '../../lib/jobs.js';
import { REPO_ROOT } from '../../lib/constructs/stack.js';

function jobsOnTerminal(columns: number): string {
  const run = spawnSync('script', ['-qec', `stty cols ${columns} rows 50; ${process.execPath} dist/app/main.js jobs`, '/dev/null'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH },
    encoding: 'utf8',
    timeout: 170_000,
  });
  expect(run.status, run.stdout + run.stderr).toBe(0);
  return run.stdout.replace(/\r/g, '');
}

describe('npm run jobs on a terminal', () => {
  it.each([80, 120])('fits %i columns, with every job and its costs', (columns) => {
    const text = jobsOnTerminal(columns);
    for (const line of text.split('\n')) expect(line.length, line).toBeLessThanOrEqual(columns);
    for (const job of JOBS) expect(text).toMatch(new RegExp(`^${job.name}$`, 'm'));
    expect(text).toMatch(/^ {2}ARM Spot RUN \/ MONTH +\$\d/m);
  });

  it('is one table on a terminal wide enough for it', () => {
    const text = jobsOnTerminal(400);
    expect(text.split('\n')[0]).toMatch(/^JOB\s+ON\s+SCHEDULE\s+TIME ZONE\s+NEXT 3 RUNS/);
    for (const job of JOBS) expect(text).toMatch(new RegExp(`^${job.name} `, 'm'));
  });
});

describe('npm run jobs piped', () => {
  function piped(env: NodeJS.ProcessEnv, args: string[] = []): string {
    const run = spawnSync(process.execPath, ['dist/app/main.js', 'jobs', ...args], { cwd: REPO_ROOT, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', timeout: 170_000 });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    return run.stdout;
  }

  it.each([
    ['no COLUMNS', {}, PIPED_WIDTH],
    ['COLUMNS=72', { COLUMNS: '72' }, 72],
  ])('fits the width it is given (%s), with every job', (_name, env, width) => {
    const text = piped(env);
    for (const line of text.split('\n')) expect(line.length, line).toBeLessThanOrEqual(width);
    for (const job of JOBS) expect(text).toMatch(new RegExp(`^${job.name}$`, 'm'));
  });

  it('--json stays whole for machines, whatever the width', () => {
    const listed = JSON.parse(piped({ COLUMNS: '40' }, ['--json'])) as unknown[];
    expect(listed).toHaveLength(JOBS.length);
  });
});
