/**
 * The release smoke test's lifecycle hook (lib/hooks/smoke-test.mjs), run here as ECS runs it:
 * against the project's API served on a real Postgres, with the operator key read through the
 * real Secrets Manager client from a local endpoint. A good release answers SUCCEEDED; a broken
 * one is tried again (IN_PROGRESS), then FAILED, which makes ECS roll the deploy back.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handler, HOOK_ENV, type HookAnswer } from '../lib/hooks/smoke-test.mjs';
import { CHECKS } from '../lib/hooks/smoke.mjs';
import { startApi, type InProcessApi } from './helpers/api.js';
import { awsEnv, startFakeJsonService, type FakeService } from './helpers/aws-json.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';

const OPERATOR_KEY = 'smoke-operator-key-0123456789abcdefghijklmnopqrstuv';
const SECRET_ARN = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:ApiAdminApiKey-AbCdEf';
const ATTEMPTS = 2;

let db: TestDatabase;
let secrets: FakeService;
const saved = { ...process.env };

beforeAll(async () => {
  db = await createTestDatabase();
  secrets = await startFakeJsonService('secretsmanager', '1.1', {
    GetSecretValue: (body) => ({ ARN: body.SecretId, Name: 'ApiAdminApiKey-AbCdEf', SecretString: OPERATOR_KEY, VersionId: 'v1' }),
  });
  Object.assign(process.env, awsEnv({}), {
    AWS_ENDPOINT_URL_SECRETS_MANAGER: secrets.url,
    [HOOK_ENV.operatorKeySecret]: SECRET_ARN,
    [HOOK_ENV.attempts]: String(ATTEMPTS),
    [HOOK_ENV.retrySeconds]: '15',
  });
});
afterAll(async () => {
  for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
  await secrets?.close();
  await db?.drop();
});

/** The hook as ECS drives it: called again with the hookDetails it answered, while it answers IN_PROGRESS. */
async function runHook(baseUrl: string): Promise<HookAnswer[]> {
  process.env[HOOK_ENV.baseUrl] = baseUrl;
  const answers: HookAnswer[] = [];
  let details: HookAnswer['hookDetails'];
  for (;;) {
    const answer = await handler({ serviceArn: 'arn:aws:ecs:us-east-1:123456789012:service/backend/api', targetServiceRevisionArn: 'rev-2', ...(details ? { hookDetails: details } : {}) });
    answers.push(answer);
    if (answer.hookStatus !== 'IN_PROGRESS') return answers;
    details = answer.hookDetails;
    expect(answers.length).toBeLessThan(ATTEMPTS + 1);
  }
}

describe('a good release', () => {
  let api: InProcessApi;
  beforeAll(async () => {
    api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: OPERATOR_KEY });
  });
  afterAll(async () => api?.stop());

  it('passes at once: SUCCEEDED, with the operator key read from Secrets Manager', async () => {
    secrets.requests.length = 0;
    expect(await runHook(api.base)).toEqual([{ hookStatus: 'SUCCEEDED' }]);
    expect(secrets.requests.map((r) => [r.operation, r.body.SecretId])).toEqual([['GetSecretValue', SECRET_ARN]]);
    expect(secrets.requests[0]!.authorization).toMatch(/^AWS4-HMAC-SHA256 /);
  });
});

describe('a broken release', () => {
  it('whose operator key is not the stage\'s: tried again, then FAILED', async () => {
    const api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: 'another-operator-key-0123456789abcdefghijklmnop' });
    try {
      expect(await runHook(api.base)).toEqual([
        { hookStatus: 'IN_PROGRESS', callBackDelay: 15, hookDetails: { attempt: 2 } },
        { hookStatus: 'FAILED' },
      ]);
    } finally {
      await api.stop();
    }
  });

  it('that cannot reach its database: FAILED (health answers, the authenticated read does not)', async () => {
    const missing = new URL(db.url);
    missing.pathname = '/no_such_database_for_smoke';
    const api = await startApi({ DATABASE_URL: missing.toString(), ADMIN_API_KEY: OPERATOR_KEY });
    try {
      expect((await runHook(api.base)).at(-1)).toEqual({ hookStatus: 'FAILED' });
    } finally {
      await api.stop();
    }
  });

  it('that is not the API at all, or does not answer: FAILED', async () => {
    const other = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>welcome</html>'));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const port = (other.address() as AddressInfo).port;
    try {
      expect((await runHook(`http://127.0.0.1:${port}`)).at(-1)).toEqual({ hookStatus: 'FAILED' });
    } finally {
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
    // The port is free again: nothing listens there.
    expect((await runHook(`http://127.0.0.1:${port}`)).at(-1)).toEqual({ hookStatus: 'FAILED' });
  });

  it('when the operator key cannot be read: FAILED, not a crash', async () => {
    const api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: OPERATOR_KEY });
    const endpoint = process.env.AWS_ENDPOINT_URL_SECRETS_MANAGER;
    process.env.AWS_ENDPOINT_URL_SECRETS_MANAGER = 'http://127.0.0.1:9';
    try {
      expect((await runHook(api.base)).at(-1)).toEqual({ hookStatus: 'FAILED' });
    } finally {
      process.env.AWS_ENDPOINT_URL_SECRETS_MANAGER = endpoint;
      await api.stop();
    }
  });
});

it('checks health, an authenticated read, authentication and the OpenAPI document', () => {
  expect(CHECKS.map((c) => c.name.split(' ').slice(0, 2).join(' '))).toEqual(['GET /healthz', 'GET /accounts', 'GET /accounts', 'GET /openapi.json']);
});
