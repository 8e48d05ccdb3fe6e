/**
 * docs/api.md's walk-through, written with a client generated from docs/openapi.json
 * (openapi-typescript's types, openapi-fetch's calls) and compiled under strict TypeScript
 * by test/generated-client.test.ts: a change to the document that breaks generated clients
 * fails to compile here, and one that breaks the server fails an assertion.
 *
 * Usage: node test/client/walk.ts <base-url> <admin-key>. Prints one JSON line and exits 0,
 * or prints the step that failed and exits 1.
 */
import createClient from 'openapi-fetch';
import type { paths } from './generated/openapi.js';

const [baseUrl, adminKey] = process.argv.slice(2);
if (!baseUrl || !adminKey) {
  console.error('usage: node test/client/walk.ts <base-url> <admin-key>');
  process.exit(2);
}

const as = (key: string) => createClient<paths>({ baseUrl, headers: { authorization: `Bearer ${key}` } });

function check(ok: boolean, step: string): asserts ok {
  if (!ok) throw new Error(`step failed: ${step}`);
}

async function walk(): Promise<Record<string, unknown>> {
  const operator = as(adminKey!);
  // The operator creates an account and its first API key (the key is in this answer only).
  const created = await operator.POST('/accounts', { body: { name: 'Acme', email: `billing+${Date.now()}@acme.example`, unitPriceCents: 3 } });
  check(created.response.status === 201 && created.data !== undefined, 'POST /accounts answers 201');
  const account = created.data.id;
  check(created.response.headers.get('location') === `/accounts/${account}`, 'POST /accounts answers its Location');
  const minted = await operator.POST('/accounts/{id}/api-keys', { params: { path: { id: account } } });
  check(minted.data !== undefined && minted.data.key.startsWith('sbk_'), 'POST /accounts/{id}/api-keys answers the key');
  const key = minted.data.key;

  // The account reports usage and reads itself; another account's id would answer 404.
  const tenant = as(key);
  const usage = await tenant.POST('/accounts/{id}/usage', { params: { path: { id: account } }, body: { metric: 'api.calls', quantity: 120, idempotencyKey: 'evt-1' } });
  check(usage.response.status === 201 && usage.data?.quantity === 120, 'POST /accounts/{id}/usage answers 201 with the event');
  const self = await tenant.GET('/accounts/{id}', { params: { path: { id: account } } });
  check(self.data !== undefined && self.data.status === 'active' && typeof self.data.usage30d.quantity === 'string', 'GET /accounts/{id} answers the account');
  const keys = await tenant.GET('/accounts/{id}/api-keys', { params: { path: { id: account } } });
  check(keys.data !== undefined && keys.data.items.length === 1 && keys.data.next === null, 'GET /accounts/{id}/api-keys answers one key, on a last page');
  const elsewhere = await tenant.GET('/accounts/{id}', { params: { path: { id: '999999999' } } });
  check(elsewhere.response.status === 404 && elsewhere.error?.error.code === 'NOT_FOUND', "another account's id answers 404 NOT_FOUND");

  // Rotation: the operator mints a second key, the client switches to it and revokes the first (401 at once).
  const second = await operator.POST('/accounts/{id}/api-keys', { params: { path: { id: account } } });
  check(second.data !== undefined, 'a second key is minted');
  const rotated = as(second.data.key);
  const first = await rotated.GET('/accounts/{id}/api-keys', { params: { path: { id: account }, query: { limit: 1 } } });
  check(first.data !== undefined && first.data.items[0] !== undefined && first.data.next !== null, 'the first page of one key has a next page');
  const revoked = await rotated.DELETE('/accounts/{id}/api-keys/{keyId}', { params: { path: { id: account, keyId: first.data.items[0].id } } });
  check(revoked.data !== undefined && revoked.data.revokedAt !== null, 'DELETE revokes the key');
  const old = await tenant.GET('/accounts/{id}', { params: { path: { id: account } } });
  check(old.response.status === 401 && old.error?.error.code === 'UNAUTHORIZED' && old.response.headers.get('www-authenticate') === 'Bearer realm="api"', 'the revoked key answers 401');
  const wrong = await as('wrong').GET('/accounts', {});
  check(wrong.response.status === 401, 'a wrong key answers 401');
  return { account, usage: usage.data.id, revoked: revoked.data.id };
}

walk().then(
  (result) => console.log(JSON.stringify(result)),
  (err: unknown) => {
    console.error((err as Error).message);
    process.exit(1);
  },
);
