const t0 = performance.now(); const lap = (l) => { const u = process.cpuUsage(); console.log(l.padEnd(28), ((u.user + u.system) / 1000).toFixed(0)); };
process.argv[2] = 'data-cleanup';
await import('../dist/app/startup-guard.js'); lap('startup-guard (pino, lib/jobs)');
const j = await import('../dist/lib/jobs.js'); lap('lib/jobs');
j.assertValidJobs(j.JOBS); lap('assertValidJobs');
const c = await import('../dist/app/config.js'); lap('config (zod)');
c.loadConfig({DATABASE_URL:'postgres://x@127.0.0.1/x'}); lap('loadConfig');
await import('../dist/app/jobs/cli.js'); lap('jobs/cli (pg, runner...)');
