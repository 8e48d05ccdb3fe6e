/**
 * The process's one logger: pino writing JSON lines to stdout through an asynchronous,
 * buffered destination (fast under load). Buffered lines are lost if the process dies by a
 * signal, so every exit path goes through `flushLogs()` first.
 */
import pino, { type Logger } from 'pino';

export type { Logger };

const destination = pino.destination({ dest: 1, sync: false });

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

/** Writes every buffered line to stdout, synchronously; safe to call more than once. */
export function flushLogs(): void {
  try {
    destination.flushSync();
  } catch {
    // flushSync throws EAGAIN when stdout is a full non-blocking pipe; the async flush then finishes on exit.
    destination.flush();
  }
}

/** A line on stderr for the user, without a stack: used before the logger exists (config errors, usage). */
export function printError(message: string): void {
  process.stderr.write(`${message}\n`);
}
