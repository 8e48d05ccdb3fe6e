/**
 * The release smoke test's lifecycle hook (lib/hooks/smoke-test.mjs), run here as ECS runs it:
 * against the project's API served on a real Postgres, with the operator key read through the
 * real Secrets Manager client from a local endpoint. A good release answers SUCCEEDED; a broken
 * one is tried again (IN_PROGRESS), then FAILED, which makes ECS roll the deploy back.
 */
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handler, HOOK_ENV, type HookAnswer } from '../lib/hooks/smoke-test.mjs';
import { CHECKS } from '../lib/hooks/smoke.mjs';
import { startApi, type InProcessApi } from './helpers/api.js';
import { awsEnv, startFakeCloudFormation, startFakeJsonService, type FakeService } from './helpers/aws-json.js';
import { parseSmokeArgs, reportSmokeError, runSmoke, SMOKE_OUTPUTS } from '../bin/smoke.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { randomAdminKey } from './helpers/admin-key.js';

const OPERATOR_KEY = randomAdminKey();
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
    const api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: randomAdminKey() });
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

describe('npm run smoke, against a deployed stage', () => {
  let api: InProcessApi;
  let broken: InProcessApi;
  let cfn: FakeService;
  beforeAll(async () => {
    api = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: OPERATOR_KEY });
    broken = await startApi({ DATABASE_URL: db.url, ADMIN_API_KEY: randomAdminKey() });
    cfn = await startFakeCloudFormation({
      'EcsSaasBackend-dev': { [SMOKE_OUTPUTS.url]: api.base, [SMOKE_OUTPUTS.operatorKeySecret]: SECRET_ARN },
      'EcsSaasBackend-prod': { [SMOKE_OUTPUTS.url]: broken.base, [SMOKE_OUTPUTS.operatorKeySecret]: SECRET_ARN },
      Old: { [SMOKE_OUTPUTS.url]: api.base },
    });
    process.env.AWS_ENDPOINT_URL_CLOUDFORMATION = cfn.url;
  });
  afterAll(async () => {
    await Promise.all([api?.stop(), broken?.stop(), cfn?.close()]);
  });

  async function smoke(argv: string[]): Promise<{ code: number; text: string }> {
    let text = '';
    try {
      return { code: await runSmoke(parseSmokeArgs(argv), (t) => (text += `${t}\n`)), text };
    } catch (error) {
      return { code: reportSmokeError(error, (line) => (text += `${line}\n`)), text };
    }
  }

  it('finds the stage\'s URL and operator key and exits 0 when every check passes', async () => {
    const { code, text } = await smoke(['--stage', 'dev']);
    expect(text).toMatch(/every check passed/);
    expect(text.match(/^pass {2}/gm)).toHaveLength(CHECKS.length);
    expect(code).toBe(0);
  });

  it('exits 1 naming the failed check when the stage answers badly', async () => {
    const { code, text } = await smoke(['--stage', 'prod']);
    expect(text).toMatch(/^FAIL {2}GET \/accounts with the operator key answers 200 with a page of accounts: got 401/m);
    expect(code).toBe(1);
  });

  it('exits 2 with one line for bad arguments, an unknown stack, or a stack without the outputs', async () => {
    for (const [argv, message] of [
      [[], /^Which stage\? Usage: npm run smoke/],
      [['--stage', 'staging'], /^--stage "staging" is not a stage; accepted: dev, prod/],
      [['--stack', 'Nope'], /^No stack Nope in this region/],
      [['--stack', 'Old'], /^The stack Old has no OperatorKeySecret output/],
    ] as const) {
      const { code, text } = await smoke([...argv]);
      expect(text, argv.join(' ')).toMatch(message);
      expect(text.trim().split('\n'), argv.join(' ')).toHaveLength(1);
      expect(code, argv.join(' ')).toBe(2);
    }
  });

  it('runs as `npm run smoke` does: exit 2 and one line on stderr for a bad stage', () => {
    const run = spawnSync(process.execPath, ['node_modules/tsx/dist/cli.mjs', 'bin/smoke.ts', '--stage', 'staging'], { encoding: 'utf8', timeout: 120_000 });
    expect(run.stderr.trim()).toMatch(/^--stage "staging" is not a stage; accepted: dev, prod\. Usage: npm run smoke -- --stage <dev\|prod> \| --stack <name>$/);
    expect(run.status).toBe(2);
  });
});
