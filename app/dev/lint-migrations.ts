/**
 * `npm run lint:migrations [-- <file.sql>...]`: lints the Up section of every SQL migration
 * (default: app/migrations/*.sql) with squawk, under the rule set in .squawk.toml
 * (docs/operations.md, "Safe migrations"). Exit 0 when every file passes, 1 when one has a
 * finding (each printed as file:line:column: rule message), 2 for a bad argument or no squawk binary.
 *
 * Only the Up section: that is what a deploy's migrations task applies while the previous
 * release still serves. A Down section runs only by hand, to undo, and drops by nature. Its
 * lines are blanked rather than cut, so a finding's line number is the file's own.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/**
 * squawk's prebuilt binary. Only its linux-x64 package is on the registry this project installs
 * from, so it is an optional dependency: `npm ci` skips it elsewhere, and the lint then says so.
 */
const SQUAWK_PACKAGE = `@squawk-cli/${process.platform}-${process.arch}`;
const SQUAWK = path.join(ROOT, 'node_modules', SQUAWK_PACKAGE, 'bin/squawk');
const CONFIG = path.join(ROOT, '.squawk.toml');
const MIGRATIONS = path.join(ROOT, 'app/migrations');
/** node-pg-migrate's own section markers (its sqlMigration loader). */
const UP = /^\s*--[\s-]*up\s+migration/im;
const DOWN = /^\s*--[\s-]*down\s+migration/im;

/** The file's text with everything but its Up section blanked, line for line; undefined without an Up marker. */
export function upSection(sql: string): string | undefined {
  const up = sql.search(UP);
  if (up < 0) return undefined;
  const down = sql.search(DOWN);
  const keep = (from: number, to: number) => (i: number) => i >= from && i < to;
  const inUp = keep(up, down > up ? down : sql.length);
  let offset = 0;
  return sql.split('\n').map((line) => {
    const kept = inUp(offset) ? line : '';
    offset += line.length + 1;
    return kept;
  }).join('\n');
}

/** Lints one file; the findings as printed lines (none when it passes). */
export function lintFile(file: string): string[] {
  const up = upSection(readFileSync(file, 'utf8'));
  const shown = path.relative(process.cwd(), file);
  if (up === undefined) return [`${shown}:1:0: missing "-- Up Migration": node-pg-migrate would apply the whole file, Down section too`];
  const out = spawnSync(SQUAWK, ['--config', CONFIG, '--reporter', 'gcc', '--stdin-filepath', shown], { input: up, encoding: 'utf8' });
  if (out.error) throw out.error;
  if (out.status === 0) return [];
  // squawk's gcc reporter counts lines from 0 (2.66); editors and this message count from 1.
  const lines = `${out.stdout}${out.stderr}`.split('\n').filter((l) => l.trim() !== '')
    .map((l) => l.startsWith(`${shown}:`) ? l.replace(/^([^:]+):(\d+):/, (_, f: string, n: string) => `${f}:${Number(n) + 1}:`) : l);
  return lines.length > 0 ? lines : [`${shown}: squawk exited ${out.status} without a finding`];
}

function main(args: string[]): number {
  const files = args.length > 0
    ? args.map((a) => path.resolve(a))
    : readdirSync(MIGRATIONS).filter((f) => f.endsWith('.sql')).sort().map((f) => path.join(MIGRATIONS, f));
  const missing = files.filter((f) => !existsSync(f));
  if (missing.length > 0) {
    process.stderr.write(`lint:migrations: no such file: ${missing.join(', ')}\n`);
    return 2;
  }
  if (!existsSync(SQUAWK)) {
    process.stderr.write(`lint:migrations: squawk's binary for this platform (${SQUAWK_PACKAGE}) is not installed; the lint runs on linux x64, as in CI\n`);
    return 2;
  }
  const findings = files.flatMap(lintFile);
  for (const line of findings) process.stdout.write(`${line}\n`);
  const failed = new Set(findings.map((l) => l.split(':')[0])).size;
  process.stdout.write(failed === 0
    ? `migrations: ${files.length} file(s) pass the lint (.squawk.toml)\n`
    : `migrations: ${failed} of ${files.length} file(s) fail the lint; see docs/operations.md, "Safe migrations"\n`);
  return failed === 0 ? 0 : 1;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = main(process.argv.slice(2));
