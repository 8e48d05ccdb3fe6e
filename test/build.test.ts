/**
 * The build every local command starts with (scripts/build.ts), on a copy of the project:
 * nothing to do on an unchanged tree, and two builds with commands loading dist/ beside them
 * never break each other.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../lib/constructs/stack.js';

let project: string;

beforeAll(() => {
  project = mkdtempSync(path.join(tmpdir(), 'build-'));
  for (const item of ['app', 'lib', 'scripts', 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json']) {
    cpSync(path.join(REPO_ROOT, item), path.join(project, item), { recursive: true });
  }
  symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(project, 'node_modules'));
});
afterAll(() => {
  if (project) rmSync(project, { recursive: true, force: true });
});

function node(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: project, env: { PATH: process.env.PATH }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.once('close', (code) => resolve({ code, out }));
  });
}

const build = () => node(['scripts/build.ts']);
const dist = (file: string) => path.join(project, 'dist', file);

describe('the build', () => {
  it('builds dist/ with the migrations, and on an unchanged tree does nothing', async () => {
    const first = await build();
    expect(first.code, first.out).toBe(0);
    expect(existsSync(dist('app/main.js'))).toBe(true);
    expect(existsSync(dist('app/migrations/1764403200000_initial.sql'))).toBe(true);
    const before = statSync(dist('app/config.js')).mtimeMs;
    const again = await build();
    expect(again.code, again.out).toBe(0);
    expect(again.out).toBe('');
    expect(statSync(dist('app/config.js')).mtimeMs).toBe(before);
  }, 120_000);

  it('two builds of a changed tree, with commands loading dist/ all the while, break nothing', async () => {
    // dist/ as the first test leaves it (a no-op after it).
    expect((await build()).code).toBe(0);
    appendFileSync(path.join(project, 'app/errors.ts'), "\nexport const BUILD_PROBE = 'changed';\n");
    // Looks every millisecond for the modules a command loads, as a command starting at that
    // instant would: a build that removes dist/, even for a moment, is seen.
    const watched = ['dist/app/main.js', 'dist/app/config.js', 'dist/app/jobs/list.js', 'dist/app/migrations/1764403200000_initial.sql'];
    const watcher = node(['-e', `
      const fs = require('node:fs');
      const pause = new Int32Array(new SharedArrayBuffer(4));
      let missing = 0;
      while (!fs.existsSync('stop-watching')) {
        for (const f of process.argv.slice(1)) if (!fs.existsSync(f)) missing++;
        Atomics.wait(pause, 0, 0, 1);
      }
      process.stdout.write(String(missing));`, ...watched]);
    let building = true;
    const readers: Promise<{ code: number | null; out: string }[]>[] = [1, 2].map(async () => {
      const results = [];
      while (building) results.push(await node(['dist/app/main.js', 'jobs', '--json']));
      return results;
    });
    const builds = await Promise.all([build(), build()]);
    building = false;
    writeFileSync(path.join(project, 'stop-watching'), '');
    expect((await watcher).out).toBe('0');
    for (const b of builds) expect(b.code, b.out).toBe(0);
    const runs = (await Promise.all(readers)).flat();
    expect(runs.length).toBeGreaterThan(0);
    for (const r of runs) expect(r.code, r.out).toBe(0);
    expect(readFileSync(dist('app/errors.js'), 'utf8')).toContain("BUILD_PROBE = 'changed'");
  }, 240_000);

  it('removes a migration that is no longer in the project, so that it is never applied', async () => {
    const extra = path.join(project, 'app/migrations/1999999999999_extra.sql');
    writeFileSync(extra, 'SELECT 1;\n');
    expect((await build()).code).toBe(0);
    expect(existsSync(dist('app/migrations/1999999999999_extra.sql'))).toBe(true);
    rmSync(extra);
    expect((await build()).code).toBe(0);
    expect(existsSync(dist('app/migrations/1999999999999_extra.sql'))).toBe(false);
  }, 240_000);
});
