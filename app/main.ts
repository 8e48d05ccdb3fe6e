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
 * Exit codes (app/errors.ts): 0 ok, 1 failure (a job: alerted), 2 usage error, 3 job interrupted, 4 job failed unalerted.
 *
 * Kept tiny on purpose: it takes charge of SIGTERM/SIGINT before anything else loads
 * (app/signals.ts, app/startup-guard.ts), then loads the rest (app/command.ts).
 */
import nodeModule from 'node:module';
import { exitOnLoadFailure, guardStartup } from './startup-guard.js';

guardStartup();
// V8's code for the modules below, kept on disk (NODE_COMPILE_CACHE, else the OS temp folder)
// and reused by the next start; it never fails the start. The image turns it off: every task
// starts with an empty /tmp (docs/performance.md#process-start). Node 22.1 and later (the
// types are Node 20's, which lacks it).
(nodeModule as { enableCompileCache?: () => unknown }).enableCompileCache?.();
// The rest loads from here; command.ts loads each command's modules when it runs it.
await import('./command.js').catch((err: unknown) => exitOnLoadFailure(err));
