/**
 * The container's commands, loaded by the entry (app/main.ts) once its start-up guard answers
 * signals: picks the command from the arguments and runs it.
 *
 * Exit codes (app/errors.ts): 0 ok, 1 failure (a job: alerted), 2 usage error, 3 job interrupted, 4 job failed unalerted.
 *
 * What can be checked with plain code (the command, the jobs table, a job's arguments) is
 * checked before the configuration (zod), the logger (pino) and the job machinery load; a
 * job then writes its first log line, and only then loads them (docs/performance.md#process-start).
 */
import { checkCommand, usage } from './command-check.js';
import { EXIT, StartupProblem, UsageError } from './errors.js';
import { describeStart, exitOnLoadFailure, startupLine } from './startup-guard.js';

/** A module of a command, loaded when the command runs; one that fails to load ends the process as the entry does. */
function load<T>(module: Promise<T>): Promise<T> {
  return module.catch((err: unknown) => exitOnLoadFailure(err));
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === '--help' || command === '-h') {
    process.stdout.write(`${usage()}\n`);
    return;
  }
  const jobArgs = checkCommand(command, rest);
  if (command === 'jobs') {
    // Works without a database: the run lengths then come from a stated assumption.
    const { runJobsCommand } = await load(import('./jobs/list.js'));
    await runJobsCommand(rest);
    return;
  }
  if (jobArgs !== undefined) {
    // The job's first line, before the heavy modules load (most of its start-up):
    // what runs, for when, in which process.
    const { scheduledTime, scheduledTimeSource } = jobArgs;
    startupLine(
      'info',
      { job: command, scheduledTime: scheduledTime.toISOString(), pid: process.pid, node: process.version },
      `starting job ${command} for ${scheduledTime.toISOString()} (from ${scheduledTimeSource}; pid ${process.pid}, Node ${process.version})`,
    );
  }
  const { loadConfig } = await load(import('./config.js'));
  const config = loadConfig();
  if (command === undefined) {
    const { runServer } = await load(import('./server.js'));
    await runServer(config);
  } else if (command === 'migrate') {
    const { runMigrate } = await load(import('./server.js'));
    await runMigrate(config);
  } else if (command === 'runs') {
    const { runRunsCommand } = await load(import('./jobs/runs.js'));
    await runRunsCommand(rest, config);
  } else if (command === 'seed') {
    const { runSeedCommand } = await load(import('./seed.js'));
    await runSeedCommand(rest, config);
  } else {
    const { runJobCommand } = await load(import('./jobs/cli.js'));
    await runJobCommand(command!, jobArgs!, config);
  }
}

main(process.argv.slice(2)).catch(async (err: unknown) => {
  if (err instanceof UsageError) {
    // For the user, without a stack; stderr, so that stdout carries only log lines.
    process.stderr.write(`${err.message}\n`);
    process.exitCode = EXIT.usage;
    return;
  }
  // Start-up failed before a shutdown coordinator took charge (database down, migration failed);
  // for a job nothing was alerted, so its code is 4, not 1.
  const { failureCode } = describeStart(process.argv.slice(2));
  const { createLogger, flushLogs } = await load(import('./logger.js'));
  const logger = createLogger(process.env.LOG_LEVEL ?? 'info');
  // A problem of the machine (a port taken) names its fix; only a fault of the code needs the stack.
  const stack = err instanceof StartupProblem ? undefined : (err as Error)?.stack;
  logger.fatal({ err: (err as Error)?.message, stack, exitCode: failureCode }, `start-up failed: ${(err as Error)?.message ?? String(err)}`);
  flushLogs();
  process.exit(failureCode);
});
