/**
 * The start-up owner of SIGTERM/SIGINT, until a shutdown coordinator takes over
 * (app/signals.ts). The entry installs it first, so from the first millisecond a signal ends
 * the process promptly with a log line and the documented code, instead of Node's silent
 * default (exit 143) while modules still load, or a signal ignored until start-up is done.
 *
 * Codes: a job exits 3 (interrupted: nothing was done, rerun the same scheduled time); the
 * server exits 0 (nothing was in flight); the other commands (migrate, seed, runs), which have
 * no shutdown sequence of their own, exit 1 (not done).
 *
 * It loads nothing but node:fs and the plain-data modules it reads, so it answers before pino,
 * pg or express are loaded; its lines have the logger's shape (app/logger.ts).
 */
import { writeSync } from 'node:fs';
import { CONTAINER_COMMANDS } from '../lib/commands.js';
import { EXIT } from './errors.js';
import { takeSignals } from './signals.js';

/** pino's level numbers, for LOG_LEVEL. */
const LEVELS: Readonly<Record<string, number>> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Infinity };

export interface StartupGuard {
  /** "the server", "job billing-run", "command migrate". */
  readonly what: string;
  /** The exit code of a signal during start-up. */
  readonly code: number;
  /** The exit code of a failed start (a job's is 4: failed, no alert sent; app/errors.ts). */
  readonly failureCode: number;
}

export function describeStart(argv: readonly string[]): StartupGuard {
  const command = argv[0];
  const isJob = command !== undefined && !command.startsWith('-') && !(CONTAINER_COMMANDS as readonly string[]).includes(command);
  return {
    what: command === undefined ? 'the server' : isJob ? `job ${command}` : `command ${command}`,
    code: command === undefined ? EXIT.ok : isJob ? EXIT.interrupted : EXIT.failure,
    failureCode: isJob ? EXIT.unalerted : EXIT.failure,
  };
}

/** A log line in the logger's shape, written before pino is loaded (or when it cannot be). */
export function startupLine(level: 'debug' | 'info' | 'warn' | 'fatal', fields: Record<string, unknown>, msg: string): void {
  const threshold = LEVELS[process.env.LOG_LEVEL ?? 'info'] ?? LEVELS.info!;
  if (LEVELS[level]! < threshold) return;
  const text = JSON.stringify({ level, time: new Date().toISOString(), service: 'ecs-saas-backend', mode: 'startup', ...fields, msg });
  try {
    writeSync(1, `${text}\n`);
  } catch {
    // stdout closed or full: the exit code still tells.
  }
}

/** Makes the start-up default the owner of shutdown signals, and says so at debug level. */
export function guardStartup(argv: readonly string[] = process.argv.slice(2)): void {
  const { what, code } = describeStart(argv);
  const isCommand = what.startsWith('command ');
  takeSignals((signal) => {
    const done = isCommand ? `during ${what}; it did not finish` : `while ${what} was starting; nothing was started`;
    startupLine('warn', { signal, exitCode: code }, `received ${signal} ${done}, exiting ${code}`);
    process.exit(code);
  });
  // From here on a signal is answered (tests wait for this line before they send one).
  startupLine('debug', { pid: process.pid, node: process.version }, `starting ${what}`);
}

/**
 * Ends a process whose modules failed to load (a bad build, a missing dependency): nothing ran
 * and nobody was alerted, so a job exits 4 and its execution retries it, then alerts once.
 */
export function exitOnLoadFailure(err: unknown, argv: readonly string[] = process.argv.slice(2)): never {
  const { what, failureCode } = describeStart(argv);
  const error = err instanceof Error ? err.message : String(err);
  startupLine('fatal', { err: error, stack: err instanceof Error ? err.stack : undefined, exitCode: failureCode }, `${what} could not load its modules: ${error}; exiting ${failureCode}`);
  process.exit(failureCode);
}
