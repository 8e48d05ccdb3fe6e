/**
 * SIGTERM/SIGINT before the shutdown coordinator exists. The entry imports this module first,
 * so from the first milliseconds a signal ends the process promptly with a log line and the
 * documented code, instead of Node's silent default (exit 143) while modules still load, or a
 * signal ignored until start-up is done. The coordinator's `install()` releases the guard.
 *
 * Codes: a job exits 3 (interrupted: nothing was done, rerun the same scheduled time); the
 * server exits 0 (nothing was in flight); the other commands (migrate, seed, runs), which have
 * no shutdown sequence of their own, exit 1 (not done).
 */
import { CONTAINER_COMMANDS } from '../lib/jobs.js';
import { EXIT } from './errors.js';
import { createLogger, flushLogs } from './logger.js';

const COMMANDS: ReadonlySet<string> = new Set(CONTAINER_COMMANDS);

const command = process.argv[2];
const isJob = command !== undefined && !command.startsWith('-') && !COMMANDS.has(command);
const what = command === undefined ? 'the server' : isJob ? `job ${command}` : `command ${command}`;
const code = command === undefined ? EXIT.ok : isJob ? EXIT.interrupted : EXIT.failure;
const logger = createLogger(process.env.LOG_LEVEL ?? 'info', { mode: 'startup' });

function onSignal(signal: NodeJS.Signals): void {
  const done = command === undefined || isJob ? `while ${what} was starting; nothing was started` : `during ${what}; it did not finish`;
  logger.warn({ signal, exitCode: code }, `received ${signal} ${done}, exiting ${code}`);
  flushLogs();
  process.exit(code);
}

for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, onSignal);
// From here on a signal is answered (tests wait for this line before they send one).
logger.debug({ pid: process.pid, node: process.version }, `starting ${what}`);

export function releaseStartupGuard(): void {
  for (const sig of ['SIGTERM', 'SIGINT'] as const) process.removeListener(sig, onSignal);
}
