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
import { guardStartup } from './startup-guard.js';

guardStartup();
await import('./command.js');
