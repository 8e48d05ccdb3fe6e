/**
 * The process's one logger: pino writing JSON lines to stdout.
 *
 * The destination writes synchronously, as Node's own stdout does on a Linux pipe. An
 * asynchronous destination cannot keep its promise at exit: when stdout is a full pipe (a slow
 * awslogs driver), a write in flight waits for a retry timer while a later flush writes the
 * lines after it, so lines came out of order, and the exit dropped the one still waiting.
 * Written synchronously, lines are out (in order) when the call returns. A full pipe makes the
 * write wait and retry; `flushLogs(deadline)` bounds that wait at exit, so a reader that never
 * reads cannot hold the process past its shutdown deadline.
 *
 * The lines of one turn of the event loop go out together, in one write(2) at the end of that
 * turn (setImmediate): under load, a turn finishes several requests, and one write per access
 * log line cost the server a system call and its reader a wake-up for each. A line therefore
 * leaves within the turn that logged it, and the exit (process.exit included) writes what the
 * turn still holds.
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

/** Lines logged in this turn of the event loop, not yet written. */
let pending = '';

function writePending(): void {
  if (pending === '') return;
  const lines = pending;
  pending = '';
  destination.write(lines);
}

/** What pino writes to: each turn's lines, in order, in one write at the turn's end. */
const turnWriter = {
  write(line: string): void {
    if (pending === '') setImmediate(writePending);
    pending += line;
  },
};
process.on('exit', () => {
  limitLogWaits(Date.now() + EXIT_WRITE_GRACE_MS);
  writePending();
});

export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino(
    {
      level,
      base: { service: 'ecs-saas-backend', ...base },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    turnWriter,
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
 * the deadline set by `limitLogWaits` (else EXIT_WRITE_GRACE_MS): the current turn's lines, and
 * a write still waiting on a full pipe.
 */
export function flushLogs(): void {
  limitLogWaits(Date.now() + EXIT_WRITE_GRACE_MS);
  try {
    writePending();
    destination.flushSync();
  } catch {
    // Gave up at the deadline: the reader holds the pipe full.
  }
}
