/**
 * The contract: the OpenAPI document built from the routes' zod schemas is valid OpenAPI 3.1
 * (checked by @readme/openapi-parser), equal to the committed docs/openapi.json (run
 * `npm run openapi` after changing a schema), and served at GET /openapi.json with no key.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { validate } from '@readme/openapi-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../app/api.js';
import { openApiDocument } from '../app/api/openapi.js';
import { API_ERRORS } from '../app/errors.js';
import { API_DOC, OPENAPI_FILE, openApiText, statusTable } from '../app/api/write-openapi.js';
import { loadConfig } from '../app/config.js';
import { createPool, type Pool } from '../app/db.js';
import { DrainableServer } from '../app/http-server.js';
import { createLogger } from '../app/logger.js';
import { randomAdminKey } from './helpers/admin-key.js';

let pool: Pool;
let server: DrainableServer;
let base: string;
beforeAll(async () => {
  // No query runs: the document and the 401 need no database.
  const config = loadConfig({ DATABASE_URL: 'postgres://unused@127.0.0.1:1/none', ADMIN_API_KEY: randomAdminKey() });
  pool = createPool(config.database, { role: 'test-openapi', max: 1, logger: createLogger('silent'), waitMs: 100, statementTimeoutMs: 0 });
  server = new DrainableServer(createApi({ pool, logger: createLogger('silent'), config, isDraining: () => false }), config);
  base = `http://127.0.0.1:${((await server.listen(0)) as AddressInfo).port}`;
});
afterAll(async () => {
  await server.drain();
  await pool.end();
});

describe('the OpenAPI document', () => {
  it('is valid OpenAPI 3.1', async () => {
    const result = await validate(structuredClone(openApiDocument()) as never);
    expect(result.valid, JSON.stringify(result)).toBe(true);
    expect(result.specification).toBe('OpenAPI');
    expect(openApiDocument().openapi).toBe('3.1.0');
  });

  it('passes Redocly\'s lint: recommended-strict, with each rule switched off in redocly.yaml given its reason', () => {
    const lint = spawnSync(process.execPath, ['node_modules/@redocly/cli/bin/cli.js', 'lint', '--config', 'redocly.yaml', OPENAPI_FILE], {
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
    });
    expect(lint.status, `${lint.stdout}${lint.stderr}`).toBe(0);
    const lines = readFileSync('redocly.yaml', 'utf8').split('\n');
    const off = lines.flatMap((line, i) => (/:\s*off\s*$/.test(line) ? [{ rule: line.trim(), reason: lines[i - 1]?.trim() ?? '' }] : []));
    expect(off.length).toBeGreaterThan(0);
    for (const { rule, reason } of off) expect(reason, rule).toMatch(/^# .{20,}/);
  }, 120_000);

  it(`matches the committed ${OPENAPI_FILE} (npm run openapi rewrites it)`, () => {
    expect(readFileSync(OPENAPI_FILE, 'utf8')).toBe(openApiText());
  });

  it(`has its statuses and error codes by route in ${API_DOC}, as npm run openapi writes them`, () => {
    expect(readFileSync(API_DOC, 'utf8')).toContain(statusTable());
  });

  it('declares every error code, the account states and the response headers', () => {
    const doc = openApiDocument() as any;
    expect(doc.components.schemas.Error.properties.error.properties.code.enum).toEqual(Object.keys(API_ERRORS));
    expect(doc.paths['/accounts/{id}'].get.responses['200'].content['application/json'].schema.properties.status.enum).toEqual(['active', 'suspended', 'closed']);
    expect(doc.paths['/accounts'].post.responses['201'].headers).toHaveProperty('Location');
    expect(doc.paths['/accounts'].get.responses['401'].headers).toHaveProperty('WWW-Authenticate');
    expect(doc.paths['/accounts'].get.responses['405'].headers).toHaveProperty('Allow');
    expect(Object.keys(doc.paths['/accounts'].get.responses['429'].headers)).toEqual(expect.arrayContaining(['Retry-After', 'RateLimit', 'RateLimit-Policy']));
    expect(doc.paths['/livez'].get.responses).toHaveProperty('503');
    expect(doc.servers.length).toBeGreaterThan(0);
  });

  it('is served at GET /openapi.json with no key, while every API route asks for one', async () => {
    const res = await fetch(`${base}/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual(openApiDocument());
    const paths = Object.keys(openApiDocument().paths as object);
    expect(paths).toEqual(expect.arrayContaining(['/accounts', '/accounts/{id}/usage', '/accounts/{id}/api-keys/{keyId}', '/livez', '/openapi.json']));
    expect((await fetch(`${base}/accounts`)).status).toBe(401);
  });

  it('is served byte for byte as committed, with no key or with a bad one', async () => {
    const committed = readFileSync(OPENAPI_FILE, 'utf8');
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: `Bearer sbk_${'A'.repeat(43)}` }, { authorization: 'Basic x' }]) {
      const res = await fetch(`${base}/openapi.json`, { headers });
      expect(res.status, JSON.stringify(headers)).toBe(200);
      expect(await res.text()).toBe(committed);
    }
  });

  it('documents every route the app serves, and serves every route it documents', () => {
    const app = createApi({ pool, logger: createLogger('silent'), config: loadConfig({ DATABASE_URL: 'postgres://unused@127.0.0.1:1/none' }), isDraining: () => false });
    interface Layer { route?: { path: string; methods: Record<string, boolean> }; handle?: { stack?: Layer[] } }
    const served: string[] = [];
    const walk = (stack: Layer[]) => {
      for (const layer of stack) {
        if (layer.route) for (const m of Object.keys(layer.route.methods)) served.push(`${m} ${layer.route.path.replace(/:(\w+)/g, '{$1}')}`);
        else if (layer.handle?.stack) walk(layer.handle.stack);
      }
    };
    walk((app as unknown as { router: { stack: Layer[] } }).router.stack);
    const documented = Object.entries(openApiDocument().paths as Record<string, object>).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`));
    expect(served.sort()).toEqual(documented.sort());
  });
});
