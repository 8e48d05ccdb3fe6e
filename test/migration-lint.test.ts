/**
 * `npm run lint:migrations`: squawk under .squawk.toml, on each migration's Up section. An
 * unsafe migration fails (exit 1, naming the rule and the line), a safe one passes, and so do
 * the repository's own migrations.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { lintFile } from '../app/dev/lint-migrations.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'lint-migrations-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function migration(name: string, sql: string): string {
  const file = path.join(dir, name);
  writeFileSync(file, sql);
  return file;
}

/** The command itself, as CI runs it. */
function lint(...files: string[]): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, ['node_modules/.bin/tsx', 'app/dev/lint-migrations.ts', ...files], { encoding: 'utf8' });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

const SAFE = `-- Up Migration
SET LOCAL lock_timeout = '5s';
-- Expand: a nullable column, no rewrite, no long lock.
ALTER TABLE accounts ADD COLUMN display_name text;

-- Down Migration
ALTER TABLE accounts DROP COLUMN display_name;
`;

describe('lint:migrations', () => {
  it('passes the repository\'s migrations', () => {
    const r = lint();
    expect(r.out).toMatch(/migrations: \d+ file\(s\) pass the lint/);
    expect(r.code).toBe(0);
  });

  it('passes a safe migration, whose Down section drops a column (only the Up section is linted)', () => {
    expect(lintFile(migration('1800000000000_safe.sql', SAFE))).toEqual([]);
  });

  it.each([
    ['a blocking index build', 'CREATE INDEX accounts_status ON accounts (status);', 'require-concurrent-index-creation'],
    ['a column drop in the release that stops reading it', 'ALTER TABLE accounts DROP COLUMN name;', 'ban-drop-column'],
    ['a column rename', 'ALTER TABLE usage RENAME COLUMN metric TO meter;', 'renaming-column'],
    ['a type change (a table rewrite under ACCESS EXCLUSIVE)', 'ALTER TABLE usage ALTER COLUMN quantity TYPE numeric;', 'changing-column-type'],
    ['a NOT NULL column added to a big table', 'ALTER TABLE usage ADD COLUMN region text NOT NULL;', 'adding-required-field'],
  ])('fails %s, naming the rule and the line', (_, statement, rule) => {
    const file = migration(`1800000000001_${rule}.sql`, `-- Up Migration\nSET LOCAL lock_timeout = '5s';\n${statement}\n`);
    const findings = lintFile(file);
    expect(findings.join('\n')).toMatch(new RegExp(`_${rule}\\.sql:3:\\d+: warning: ${rule} `));
  });

  it('fails DDL that could queue behind a long query without a lock_timeout', () => {
    const file = migration('1800000000002_no-lock-timeout.sql', '-- Up Migration\nALTER TABLE accounts ADD COLUMN note text;\n');
    expect(lintFile(file).join('\n')).toMatch(/:2:\d+: warning: require-lock-timeout /);
  });

  it('exits 1 for an unsafe file, 0 for a safe one, 2 for a missing one', () => {
    const bad = migration('1800000000003_bad.sql', '-- Up Migration\nSET LOCAL lock_timeout = \'5s\';\nALTER TABLE accounts DROP COLUMN name;\n');
    const good = migration('1800000000004_good.sql', SAFE);
    const r = lint(bad, good);
    expect(r.out).toMatch(/1 of 2 file\(s\) fail the lint/);
    expect(r.code).toBe(1);
    expect(lint(good).code).toBe(0);
    expect(lint(path.join(dir, 'nope.sql'))).toMatchObject({ code: 2, out: expect.stringMatching(/no such file: .*nope\.sql/) });
  });

  it('fails a file without "-- Up Migration" (node-pg-migrate would apply its Down section too)', () => {
    expect(lintFile(migration('1800000000005_no-marker.sql', 'ALTER TABLE accounts ADD COLUMN x text;\n'))[0]).toMatch(/missing "-- Up Migration"/);
  });
});
