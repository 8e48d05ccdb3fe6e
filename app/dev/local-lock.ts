/**
 * One local command at a time decides about the local Postgres: whether one runs for the data
 * folder, starting one if not, and (the host) stopping it once nobody uses it. Without this,
 * two commands started together could both find none and both start one on the same folder, or
 * one could attach to a Postgres that is just stopping.
 *
 * The lock is a folder next to the data folder, from proper-lockfile: made atomically by
 * mkdir, its time refreshed while held, and taken over when stale (a holder killed with
 * SIGKILL), so no dead command blocks the others.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import lockfile from 'proper-lockfile';

/** A holder whose lock has not been refreshed for this long is taken to be dead. */
const STALE_MS = 20_000;
/** How long a command waits its turn: longer than a cold start of Postgres on a loaded machine. */
export const LOCAL_LOCK_WAIT_MS = 180_000;

/** Waits for the data folder's lock; resolves with the function that releases it. */
export async function lockLocalPostgres(dataDir: string): Promise<() => Promise<void>> {
  const base = path.resolve(dataDir);
  mkdirSync(path.dirname(base), { recursive: true });
  const retries = Math.ceil(LOCAL_LOCK_WAIT_MS / 250);
  const release = await lockfile.lock(base, {
    realpath: false,
    lockfilePath: `${base}.lock`,
    stale: STALE_MS,
    retries: { retries, minTimeout: 50, maxTimeout: 250, factor: 1.5 },
    // A lock lost while held (the machine stalled past STALE_MS) is not worth a crash: at
    // worst two commands start Postgres on one folder and the second one's start fails.
    onCompromised: () => {},
  });
  return () => release().catch(() => {});
}
