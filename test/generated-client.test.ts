/**
 * A client generated from docs/openapi.json, as a user would make one: openapi-typescript's
 * types and openapi-fetch's calls. The test generates the types, compiles docs/api.md's
 * walk-through (test/client/walk.ts) against them under strict TypeScript, and runs it
 * against a real server on a real Postgres. A change to the document that breaks generated
 * clients fails the compile; one that breaks the server fails the walk.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPENAPI_FILE } from '../app/api/write-openapi.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { start, startServer, type Proc } from './helpers/process.js';
import { randomAdminKey } from './helpers/admin-key.js';

const ADMIN_KEY = randomAdminKey();
const CLIENT_DIR = path.resolve('test/client');
const GENERATED = path.join(CLIENT_DIR, 'generated/openapi.d.ts');
// openapi-typescript needs TypeScript 5's API; it lives in a dev-only workspace beside it.
const OPENAPI_TS = path.resolve('tools/openapi-client/node_modules/openapi-typescript/bin/cli.js');
const TSC = path.resolve('node_modules/typescript/bin/tsc');

let db: TestDatabase;
let server: Proc & { url: string };
beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({ DATABASE_URL: db.url, ADMIN_API_KEY: ADMIN_KEY, ENABLE_WORKERS: 'false' });
});
afterAll(async () => {
  if (server) {
    server.kill('SIGTERM');
    await server.exited;
  }
  await db?.drop();
});

function node(args: string[]): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('a client generated from the document', () => {
  it("walks docs/api.md's examples, compiled under strict TypeScript", async () => {
    mkdirSync(path.dirname(GENERATED), { recursive: true });
    const generated = node([OPENAPI_TS, OPENAPI_FILE, '--output', GENERATED]);
    expect(generated.code, generated.out).toBe(0);
    const compiled = node([TSC, '-p', path.join(CLIENT_DIR, 'tsconfig.json')]);
    expect(compiled.code, compiled.out).toBe(0);
    const walk = start([server.url, ADMIN_KEY], {}, [process.execPath, path.join(CLIENT_DIR, 'walk.ts')]);
    expect((await walk.exited).code, walk.stderr()).toBe(0);
    expect(JSON.parse(walk.stdout())).toEqual({ account: expect.stringMatching(/^\d+$/), usage: expect.stringMatching(/^\d+$/), revoked: expect.stringMatching(/^\d+$/) });
  }, 180_000);
});
