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
 * Under load, lines are written in batches: a line logged after a quiet spell goes out at
 * once, and the lines logged in the LOG_BATCH_MS after it go out together in one write(2)
 * (at once if they reach LOG_BATCH_BYTES). The access log writes a line per request, and a
 * write per line (or per event-loop turn, which finishes one or two requests) woke stdout's
 * reader for nearly every request: on 2 busy cores the woken reader takes the server's core,
 * and the server waits for it (docs/performance.md). The awslogs driver that reads a task's
 * stdout sends its own batches every 5 seconds, so a few milliseconds here change nothing
 * downstream, and a job's sparse lines are not delayed at all. Lines stay in order (one
 * buffer, one writer), and the exit (process.exit included) writes what the batch still
 * holds; only a SIGKILL can lose a batch, at most LOG_BATCH_MS of lines.
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

/** How long a line may wait for others before its batch is written. */
export const LOG_BATCH_MS = 10;
/**
 * A batch this long is written at once: a quarter of Linux's default pipe buffer (64 KiB), so
 * a reader that keeps up never makes the write wait.
 */
const LOG_BATCH_BYTES = 16 * 1024;

/** Lines logged and not yet written. */
let pending = '';
/** Set while a batch window is open: lines logged then wait for its end. */
let batchTimer: NodeJS.Timeout | undefined;

function writePending(): void {
  if (pending === '') return;
  const lines = pending;
  pending = '';
  destination.write(lines);
}

/** The end of a window: writes its lines, and keeps batching while lines keep coming. */
function endWindow(): void {
  batchTimer = undefined;
  if (pending === '') return;
  writePending();
  openWindow();
}

function openWindow(): void {
  // Unref'd: an open window never keeps the process alive; the exit writes what it holds.
  batchTimer = setTimeout(endWindow, LOG_BATCH_MS).unref();
}

/**
 * What pino writes to. A line logged after a quiet spell goes out at once and opens a
 * window of LOG_BATCH_MS; the lines logged within it go out together when it ends.
 */
const batchWriter = {
  write(line: string): void {
    pending += line;
    if (batchTimer === undefined) {
      writePending();
      openWindow();
    } else if (pending.length >= LOG_BATCH_BYTES) {
      writePending();
    }
  },
};
process.on('exit', () => {
  limitLogWaits(Date.now() + EXIT_WRITE_GRACE_MS);
  writePending();
});

/** Fields every line carries from where it is logged: the trace's ids once tracing is on (app/tracing/setup.ts). */
let mixin: () => object = () => ({});

export function setLogMixin(fn: () => object): void {
  mixin = fn;
}

export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino(
    {
      level,
      mixin: () => mixin(),
      base: { service: 'ecs-saas-backend', ...base },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    batchWriter,
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
 * the deadline set by `limitLogWaits` (else EXIT_WRITE_GRACE_MS): the batch not yet written, and
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
