/**
 * The in-task rate limit per API key: the backstop that works without WAF and locally (WAF's
 * rule keyed on the Authorization header is the first line, lib/constructs/waf.ts). Each key
 * may make RATE_LIMIT_REQUESTS requests per RATE_LIMIT_WINDOW_MS on this task, the operator
 * RATE_LIMIT_OPERATOR_REQUESTS; past that, 429 RATE_LIMITED with `Retry-After` and the
 * `RateLimit-Policy` and `RateLimit` fields of the IETF draft (draft-ietf-httpapi-ratelimit-headers-10,
 * `"per-key";q=<quota>;w=<window s>` and `"per-key";r=<remaining>;t=<reset s>`).
 *
 * Counted by the key's SHA-256 as the caller sent it, before the key is checked: an unknown
 * key costs a 401's query, so it is limited too. A fixed window per key, in a map of at most
 * RATE_LIMIT_KEYS entries: past that the key first counted is dropped, so no stream of made-up
 * keys grows the memory. A key dropped that way starts again from zero, a bound this backstop
 * accepts. Per request: one map lookup, no allocation once a key is counted.
 */
import type { RequestHandler } from 'express';
import { UserError } from './errors.js';
import type { Identity } from './tenancy.js';

export interface RateLimits {
  /** Requests per window for an account key; 0: no limit. */
  readonly perKey: number;
  /** Requests per window for the operator; 0: no limit. */
  readonly operator: number;
  readonly windowMs: number;
  /** Keys counted at once. */
  readonly maxKeys: number;
}

interface Count {
  windowStart: number;
  used: number;
}

const POLICY = 'per-key';
/** The operator's entry in the map: no account key hashes to this. */
const OPERATOR_KEY = 'operator';

export function rateLimit(limits: RateLimits): RequestHandler {
  const counts = new Map<string, Count>();
  const windowSeconds = Math.ceil(limits.windowMs / 1_000);
  const policy = (quota: number) => `"${POLICY}";q=${quota};w=${windowSeconds}`;
  const policies = { key: policy(limits.perKey), operator: policy(limits.operator) };

  function counted(id: string, now: number): Count {
    let count = counts.get(id);
    if (count === undefined) {
      if (counts.size >= limits.maxKeys) counts.delete(counts.keys().next().value!);
      counts.set(id, (count = { windowStart: now, used: 0 }));
    } else if (now - count.windowStart >= limits.windowMs) {
      count.windowStart = now;
      count.used = 0;
    }
    return count;
  }

  return (_req, res, next) => {
    const identity = res.locals.identity as Identity;
    const operator = identity.kind === 'operator';
    const quota = operator ? limits.operator : limits.perKey;
    if (quota === 0) {
      next();
      return;
    }
    const now = Date.now();
    // The hash's latin1 string: 32 characters, one per byte, the cheapest string a Buffer makes.
    const count = counted(operator ? OPERATOR_KEY : (identity as { hash: Buffer }).hash.toString('latin1'), now);
    if (++count.used <= quota) {
      next();
      return;
    }
    const reset = Math.max(1, Math.ceil((count.windowStart + limits.windowMs - now) / 1_000));
    throw new UserError('RATE_LIMITED', `More than ${quota} requests in ${windowSeconds} s with this key; retry in ${reset} s`, 429, undefined, {
      'Retry-After': String(reset),
      'RateLimit-Policy': operator ? policies.operator : policies.key,
      RateLimit: `"${POLICY}";r=0;t=${reset}`,
    });
  };
}
