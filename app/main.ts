/**
 * The container's one entry.
 *
 *   node dist/app/main.js                      runs the HTTP API
 *   node dist/app/main.js <job> [flags]        runs one scheduled job and exits
 *   node dist/app/main.js migrate              applies the migrations and exits
 *   node dist/app/main.js jobs [--json]        prints the jobs table, next runs and Fargate costs
 *   node dist/app/main.js runs [<job>]         prints the recent job runs
 *   node dist/app/main.js seed --accounts N    migrates, then creates demo accounts and usage
 *
 * Exit codes (app/errors.ts): 0 ok, 1 failure, 2 usage error, 3 job interrupted.
 *
 * Kept tiny on purpose: it takes charge of SIGTERM/SIGINT before anything else loads
 * (app/signals.ts, app/startup-guard.ts), then loads the rest (app/command.ts).
 */
import { describeStart, guardStartup, startupLine } from './startup-guard.js';

guardStartup();
try {
  await import('./command.js');
} catch (err) {
  // A module that fails to load (a bad build, a missing dependency): nothing ran and nobody was
  // alerted, so a job exits 4 and its execution retries it, then alerts once.
  const { what, failureCode } = describeStart(process.argv.slice(2));
  const error = err instanceof Error ? err.message : String(err);
  startupLine('fatal', { err: error, stack: err instanceof Error ? err.stack : undefined, exitCode: failureCode }, `${what} could not load its modules: ${error}; exiting ${failureCode}`);
  process.exit(failureCode);
}
