// @ts-check
/**
 * The deployment lifecycle hook ECS runs after the test traffic shift (POST_TEST_TRAFFIC_SHIFT):
 * the new revision answers all of the test listener's traffic and none of production's yet. It
 * runs the smoke test (smoke.mjs) through the test listener and answers ECS's hookStatus:
 * SUCCEEDED lets the deploy shift production traffic, FAILED rolls it back. A failed attempt is
 * tried again (IN_PROGRESS, with the attempt number in hookDetails, which ECS hands back) before
 * it fails the deploy, so one lost request does not roll a good release back.
 */
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { describeSmokeResult, smokeTest } from './smoke.mjs';

/** The hook's environment, set by lib/constructs/release-smoke-test.ts. */
export const HOOK_ENV = {
  /** The test listener's URL, e.g. https://api.example.com:9443. */
  baseUrl: 'SMOKE_BASE_URL',
  /** The ARN of the secret holding the operator key (ADMIN_API_KEY). */
  operatorKeySecret: 'OPERATOR_KEY_SECRET_ARN',
  /** Attempts before the hook answers FAILED. */
  attempts: 'SMOKE_ATTEMPTS',
  /** Seconds ECS waits before it calls the hook again after a failed attempt. */
  retrySeconds: 'SMOKE_RETRY_SECONDS',
};

/**
 * @typedef {{ serviceArn?: string, targetServiceRevisionArn?: string, hookDetails?: { attempt?: number } }} HookEvent
 * @typedef {{ hookStatus: 'SUCCEEDED' | 'FAILED' | 'IN_PROGRESS', callBackDelay?: number, hookDetails?: { attempt: number } }} HookAnswer
 */

/**
 * @param {string} name
 * @returns {string}
 */
function setting(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: the hook's environment comes from its construct`);
  return value;
}

/** @param {string} secretId */
async function readOperatorKey(secretId) {
  const client = new SecretsManagerClient({});
  try {
    const out = await client.send(new GetSecretValueCommand({ SecretId: secretId }));
    if (!out.SecretString) throw new Error(`the secret ${secretId} holds no string`);
    return out.SecretString;
  } finally {
    client.destroy();
  }
}

/**
 * @param {HookEvent} event
 * @returns {Promise<HookAnswer>}
 */
export async function handler(event) {
  const attempt = Number(event?.hookDetails?.attempt ?? 1);
  const revision = event?.targetServiceRevisionArn ?? 'the new revision';
  let attempts = 1;
  try {
    attempts = Number(setting(HOOK_ENV.attempts));
    const baseUrl = setting(HOOK_ENV.baseUrl);
    const result = await smokeTest({ baseUrl, operatorKey: await readOperatorKey(setting(HOOK_ENV.operatorKeySecret)) });
    console.log(`${revision}, attempt ${attempt} of ${attempts}: ${describeSmokeResult(baseUrl, result)}`);
    if (result.ok) return { hookStatus: 'SUCCEEDED' };
  } catch (err) {
    console.log(`${revision}, attempt ${attempt} of ${attempts}: the smoke test could not run: ${/** @type {Error} */ (err).message}`);
  }
  if (attempt < attempts) {
    console.log(`trying again in ${process.env[HOOK_ENV.retrySeconds]} s`);
    return { hookStatus: 'IN_PROGRESS', callBackDelay: Number(process.env[HOOK_ENV.retrySeconds]), hookDetails: { attempt: attempt + 1 } };
  }
  console.log('the release failed its smoke test: ECS rolls the deploy back before production traffic reaches it');
  return { hookStatus: 'FAILED' };
}
