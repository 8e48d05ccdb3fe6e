/**
 * The house's shape. No import circle in app/, lib/ or bin/, type imports included: a circle
 * means two modules that cannot be understood (or loaded) one without the other.
 *
 * The folder boundary: the container (app/) and the plain-data modules it shares with the
 * infrastructure (lib/*.ts) never import the CDK, so aws-cdk-lib can never reach the image by an
 * accidental import; only lib/constructs/, bin/ and the tests do.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..');
const CDK_ONLY = /^(aws-cdk-lib|constructs|cdk-nag|@cdklabs\/|@aws-cdk\/)/;

function sourceFiles(dir: string, recurse: boolean): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) return recurse ? sourceFiles(rel, true) : [];
    return e.name.endsWith('.ts') ? [rel] : [];
  });
}

/** Every module specifier a file imports, statically or with import(). */
function importsOf(file: string): string[] {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)].map((m) => m[1]!);
}

function crossings(files: string[]): string[] {
  return files.flatMap((file) =>
    importsOf(file)
      .filter((spec) => CDK_ONLY.test(spec) || (spec.startsWith('.') && path.resolve(path.dirname(path.join(ROOT, file)), spec).startsWith(path.join(ROOT, 'lib', 'constructs') + path.sep)))
      .map((spec) => `${file} imports ${spec}`),
  );
}

/** The relative modules a file imports or re-exports statically (`import type` too), as repository paths. */
function localImportsOf(file: string): string[] {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  const specs = [
    ...text.matchAll(/\b(?:import|export)\s[^;]*?\sfrom\s*'(\.[^']+)'/g),
    ...text.matchAll(/\bimport\s*'(\.[^']+)'/g),
  ].map((m) => m[1]!);
  return specs.map((spec) => path.relative(ROOT, path.resolve(path.dirname(path.join(ROOT, file)), spec)).replace(/\.(m?)js$/, '.$1ts'));
}

/** Every circle among `files`' imports, each as its modules in order (Tarjan's strongly connected components). */
function importCircles(files: string[]): string[][] {
  const graph = new Map(files.map((f) => [f, localImportsOf(f).filter((g) => files.includes(g))]));
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const circles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    for (const w of graph.get(v)!) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      component.unshift(w);
      if (w === v) break;
    }
    if (component.length > 1 || graph.get(v)!.includes(v)) circles.push(component);
  };
  for (const f of files) if (!index.has(f)) visit(f);
  return circles;
}

describe('no import circle', () => {
  it('in app/, lib/ or bin/, type imports included', () => {
    const files = [...sourceFiles('app', true), ...sourceFiles('lib', true), ...sourceFiles('bin', true)];
    expect(files.length).toBeGreaterThan(50);
    expect(importCircles(files)).toEqual([]);
  });

  it('the check sees a circle of type imports when one is there', () => {
    expect(importCircles(['test/fixtures/circle/a.ts', 'test/fixtures/circle/b.ts'])).toEqual([['test/fixtures/circle/a.ts', 'test/fixtures/circle/b.ts']]);
  });

  it('the check follows the imports of the modules it is given', () => {
    expect(localImportsOf('app/auth.ts')).toEqual(expect.arrayContaining(['app/key-format.ts', 'app/tenancy.ts', 'app/db.ts']));
  });
});

describe('the folder boundary', () => {
  it('app/ and lib/*.ts import neither the CDK nor lib/constructs/', () => {
    const shared = [...sourceFiles('app', true), ...sourceFiles('lib', false)];
    expect(shared.length).toBeGreaterThan(20);
    expect(crossings(shared)).toEqual([]);
  });

  it('the check sees a crossing when one is there', () => {
    expect(crossings(['lib/constructs/stack.ts']).length).toBeGreaterThan(0);
  });
});
