/**
 * Postgres advisory locks, held on one dedicated client.
 *
 * A session-level advisory lock belongs to the connection that took it. Taken through
 * `pool.query` it lands on whichever pooled connection was free, and an unlock sent through
 * another connection fails quietly while the lock stays held until that first connection
 * closes: a classic outage. So a lock here is always taken, checked and released on a client
 * checked out of the pool for the whole hold. On release the lock is freed first, then the
 * client; when the release is in doubt (an error, or Postgres says the lock was not held)
 * the client is destroyed, which frees every lock it had.
 *
 * Keys. `lockKey(name)` is the first 8 bytes of SHA-256("ecs-saas-backend:" + name), read as a
 * signed 64-bit integer. The prefix keeps our keys apart from other users of the same
 * database (node-pg-migrate, for one, locks 7241865325823964); a 64-bit hash makes two of
 * our own names collide with odds near n²/2⁶⁵, about 1 in 10¹⁴ for a thousand names. Job
 * runs lock `job:<name>` (overlap) and `run:<name>@<time>` (one run key), workers lock
 * `worker:<name>`: distinct prefixes, so a job and a worker of one name never collide.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolClient } from './db.js';
import type { Logger } from './logger.js';

export const LOCK_NAMESPACE = 'ecs-saas-backend:';

/** The bigint advisory-lock key of a name, as a decimal string for a `$1::bigint` parameter. */
export function lockKey(name: string): string {
  const digest = createHash('sha256').update(LOCK_NAMESPACE + name).digest();
  return digest.readBigInt64BE(0).toString();
}

export class AdvisoryLock {
  readonly key: string;
  private client: PoolClient | undefined;
  private lost = false;

  constructor(
    private readonly pool: Pool,
    readonly name: string,
    private readonly logger?: Logger,
  ) {
    this.key = lockKey(name);
  }

  /** The holding session's backend pid: recorded in job_runs so that a rerun can tell it is gone. */
  private holderPid: number | undefined;

  /** True while this process holds the lock on a live connection. */
  get held(): boolean {
    return this.client !== undefined && !this.lost;
  }

  /** True when the connection that held the lock died: the lock is gone and the dead client is still kept. */
  get broken(): boolean {
    return this.client !== undefined && this.lost;
  }

  /** The backend pid of the session holding the lock. */
  get pid(): number {
    if (!this.held || this.holderPid === undefined) throw new Error(`advisory lock ${this.name} is not held`);
    return this.holderPid;
  }

  /** The connection holding the lock, for work that must run on it. */
  get connection(): PoolClient {
    if (!this.client) throw new Error(`advisory lock ${this.name} is not held`);
    return this.client;
  }

  /** Takes the lock if it is free; false (and no client kept) if another session holds it. */
  async tryAcquire(): Promise<boolean> {
    if (this.held) return true;
    // The connection that held it died: free that client (the pool destroys it) before trying anew.
    if (this.broken) await this.release();
    const client = await this.pool.connect();
    let ok = false;
    try {
      const { rows } = await client.query<{ ok: boolean; pid: number }>('SELECT pg_try_advisory_lock($1::bigint) AS ok, pg_backend_pid() AS pid', [this.key]);
      ok = rows[0]!.ok;
      this.holderPid = rows[0]!.pid;
    } catch (err) {
      client.release(err as Error);
      throw err;
    }
    if (!ok) {
      client.release();
      return false;
    }
    this.adopt(client);
    return true;
  }

  /** Waits for the lock, polling every `pollMs`, until it is taken or `signal` aborts (then false). */
  async acquire(signal?: AbortSignal, pollMs = 1_000): Promise<boolean> {
    while (!signal?.aborted) {
      if (await this.tryAcquire()) return true;
      await sleep(pollMs, undefined, { signal }).catch(() => undefined);
    }
    return false;
  }

  /** Frees the lock, then the client; destroys the client when the unlock is in doubt. Idempotent. */
  async release(): Promise<void> {
    const client = this.client;
    if (!client) return;
    this.client = undefined;
    client.removeListener('error', this.onError);
    if (this.lost) {
      client.release(new Error('connection lost'));
      return;
    }
    try {
      const { rows } = await client.query<{ ok: boolean }>('SELECT pg_advisory_unlock($1::bigint) AS ok', [this.key]);
      if (rows[0]!.ok) {
        client.release();
      } else {
        this.logger?.warn({ lock: this.name }, 'advisory lock was not held at release; closing its connection');
        client.release(new Error('advisory lock not held at release'));
      }
    } catch (err) {
      this.logger?.warn({ lock: this.name, err: (err as Error).message }, 'advisory unlock failed; closing its connection to free the lock');
      client.release(err as Error);
    }
  }

  /** Drops the connection without a word to Postgres, which frees the lock: the deadline's last resort. */
  destroy(): void {
    const client = this.client;
    if (!client) return;
    this.client = undefined;
    client.removeListener('error', this.onError);
    client.release(new Error(`advisory lock ${this.name} destroyed at shutdown deadline`));
  }

  /** Checks that the connection (and so the lock) is still alive. */
  async verify(): Promise<boolean> {
    if (!this.held) return false;
    try {
      await this.client!.query('SELECT 1');
      return true;
    } catch {
      this.lost = true;
      return false;
    }
  }

  private adopt(client: PoolClient): void {
    this.client = client;
    this.lost = false;
    client.on('error', this.onError);
  }

  private readonly onError = (err: Error): void => {
    this.lost = true;
    this.logger?.warn({ lock: this.name, err: err.message }, 'connection holding an advisory lock failed; the lock is gone');
  };
}
