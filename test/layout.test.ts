/**
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
