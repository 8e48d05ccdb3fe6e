/**
 * The process's one logger: pino writing JSON lines to stdout.
 *
 * The destination writes synchronously, one write(2) per line, as Node's own stdout does on
 * a Linux pipe. An asynchronous destination cannot keep its promise at exit: when stdout is
 * a full pipe (a slow awslogs driver), a write in flight waits for a retry timer while a
 * later flush writes the lines after it, so lines came out of order, and the exit dropped
 * the one still waiting. Written synchronously, a line is out (in order) when the call
 * returns. A full pipe makes the write wait and retry; `flushLogs(deadline)` bounds that wait
 * at exit, so a reader that never reads cannot hold the process past its shutdown deadline.
 */
import pino, { type Logger } from 'pino';

export type { Logger };

/** Epoch ms after which a write to a full stdout gives up instead of waiting; set at exit. */
let giveUpAt = Infinity;

const destination = pino.destination({
  dest: 1,
  sync: true,
  retryEAGAIN: () => Date.now() < giveUpAt,
});
// The write that gave up emits this; the line is lost, the process goes on to its exit.
destination.on('error', () => {});

export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino(
    {
      level,
      base: { service: 'ecs-saas-backend', ...base },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}

/**
 * From now on a write to a full stdout waits at most until `deadline` (epoch ms), then drops
 * its line: the shutdown coordinator sets its deadline here, so a reader that never reads
 * cannot hold the process past it.
 */
export function limitLogWaits(deadline: number): void {
  giveUpAt = Math.min(giveUpAt, deadline);
}

/** How long an exit without a deadline of its own waits for a full stdout. */
export const EXIT_WRITE_GRACE_MS = 2_000;

/**
 * Writes whatever is left before the process exits, waiting for a full pipe at most until
 * the deadline set by `limitLogWaits` (else EXIT_WRITE_GRACE_MS). Lines are written as they
 * are logged, so this finds nothing to do unless a write is still waiting.
 */
export function flushLogs(): void {
  limitLogWaits(Date.now() + EXIT_WRITE_GRACE_MS);
  try {
    destination.flushSync();
  } catch {
    // Gave up at the deadline: the reader holds the pipe full.
  }
}
