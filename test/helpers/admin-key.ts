/** A fresh admin key of random bytes, as `openssl rand -base64 32` makes: what the server's strength check expects. */
import { randomBytes } from 'node:crypto';

export function randomAdminKey(): string {
  return randomBytes(32).toString('base64url');
}
