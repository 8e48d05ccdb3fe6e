/** The migrate command's check of the server's version (app/pg-version.ts), against servers that report an older one. */
import { describe, expect, it } from 'vitest';
import { requireSupportedServer, SUPPORTED_MAJOR } from '../app/pg-version.js';
import { UsageError } from '../app/errors.js';

/** A server that answers the version query as `version` would, and records every statement it is sent. */
function server(num: string, version: string) {
  const sent: string[] = [];
  return {
    sent,
    query: async (sql: string) => {
      sent.push(sql);
      return { rows: [{ num, version }] };
    },
  };
}

describe('the supported server check', () => {
  it.each([
    ['150004', '15.4'],
    ['160009', '16.9 (Debian 16.9-1.pgdg120+1)'],
    ['90624', '9.6.24'],
  ])('refuses PostgreSQL %s with one line naming the version found and the version needed', async (num, version) => {
    const db = server(num, version);
    const err = await requireSupportedServer(db).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message).toBe(`PostgreSQL ${version} found (server_version_num ${num}); this needs PostgreSQL ${SUPPORTED_MAJOR} or later. Nothing was changed: upgrade the server, then migrate again`);
    expect((err as Error).message).not.toContain('\n');
    // One read, nothing else: the check comes before any change.
    expect(db.sent).toHaveLength(1);
    expect(db.sent[0]).toMatch(/^SELECT current_setting\('server_version_num'\)/);
  });

  it.each([['170000', '17.0'], ['180004', '18.4']])('accepts PostgreSQL %s', async (num, version) => {
    await expect(requireSupportedServer(server(num, version))).resolves.toBeUndefined();
  });
});
