/**
 * One Node major everywhere: the image (Dockerfile FROM), package.json's engines, the pinned
 * `node` dev dependency that npm scripts run, its types, the workflows' setup-node, and the
 * suite itself. A bump that misses one of them fails here, naming it.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const REPO_ROOT = path.resolve(import.meta.dirname, '..');
const read = (file: string) => readFileSync(path.join(REPO_ROOT, file), 'utf8');
const pkg = JSON.parse(read('package.json')) as { engines: { node: string }; devDependencies: Record<string, string> };
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { version?: string }> };
const major = (version: string) => /^\D*(\d+)/.exec(version)?.[1];

/** The image's major: every stage of the Dockerfile starts FROM node:<major>-slim. */
const froms = [...read('Dockerfile').matchAll(/^FROM\s+(?:--platform=\S+\s+)?(\S+)/gm)].map((m) => m[1]!);
const IMAGE_MAJOR = /^node:(\d+)-slim$/.exec(froms.at(-1) ?? '')?.[1];

describe('the Node major', () => {
  it('is one for every stage of the image', () => {
    expect(IMAGE_MAJOR, `the runtime stage is FROM ${froms.at(-1)}`).toBeDefined();
    expect(froms).toEqual(froms.map(() => `node:${IMAGE_MAJOR}-slim`));
  });

  it('is what package.json accepts, runs and types against', () => {
    // `<major>.x`: npm ci on another Node still installs (it warns EBADENGINE), and the
    // scripts then run the pinned Node.
    expect(pkg.engines.node).toBe(`${IMAGE_MAJOR}.x`);
    expect({ node: major(pkg.devDependencies.node!), lockfile: major(lock.packages['node_modules/node']!.version!), types: major(pkg.devDependencies['@types/node']!) }).toEqual({
      node: IMAGE_MAJOR,
      lockfile: IMAGE_MAJOR,
      types: IMAGE_MAJOR,
    });
  });

  it('is what every workflow sets up', () => {
    const dir = path.join(REPO_ROOT, '.github/workflows');
    const versions = readdirSync(dir)
      .filter((f) => f.endsWith('.yml'))
      .flatMap((f) => [...readFileSync(path.join(dir, f), 'utf8').matchAll(/node-version:\s*['"]?([^\s'"]+)/g)].map((m) => `${f}: ${m[1]}`));
    expect(versions.length).toBeGreaterThan(0);
    expect(versions).toEqual(versions.map((v) => `${v.split(':')[0]}: ${IMAGE_MAJOR}`));
  });

  it('runs this suite, and is the `node` its children find on PATH', () => {
    expect(major(process.versions.node)).toBe(IMAGE_MAJOR);
    const child = spawnSync('node', ['-p', 'process.execPath'], { env: { PATH: process.env.PATH }, encoding: 'utf8' });
    expect(child.stdout.trim()).toBe(process.execPath);
  });
});

describe('tests and benchmarks', () => {
  it('start Node as process.execPath, never a bare node, tsx or npx that PATH may resolve to another Node', () => {
    const files = ['test', 'bench'].flatMap((dir) =>
      readdirSync(path.join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
        .filter((f) => /\.(ts|mjs|js)$/.test(f))
        .map((f) => path.join(dir, f)),
    );
    const bare = /\b(?:spawn|spawnSync|execFile|execFileSync|fork)\(\s*['"`](?:node|tsx|npx)['"`]/;
    const offenders = files.filter((f) => f !== 'test/runtime.test.ts' && bare.test(read(f)));
    expect(files.length).toBeGreaterThan(10);
    expect(offenders).toEqual([]);
  });
});
