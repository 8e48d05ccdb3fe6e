/** The backoff between two attempts of a run, and between two reconnection tries. */

/** The longest backoff between two attempts. */
export const MAX_BACKOFF_MS = 60_000;

/** Exponential backoff with jitter: about base·2^(n-1), between half and all of it, at most MAX_BACKOFF_MS. */
export function backoffMs(baseMs: number, failedAttempts: number, random: () => number = Math.random): number {
  const ceiling = Math.min(MAX_BACKOFF_MS, baseMs * 2 ** (failedAttempts - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
