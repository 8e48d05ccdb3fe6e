/**
 * The updates users make to a deployed stack, as data: each is two sets of settings, before and
 * after, given as `cdk synth` context (what cdk.json or `-c` holds) and, for what context cannot
 * say, the stack's props (the jobs table, the database's storage). `npm run check:updates`
 * synthesizes both sides of each and judges the update (lib/constructs/update-plan.ts).
 */
import { JOBS, type JobDefinition } from './jobs.js';

/** One side of a transition. */
export interface StackSettings {
  /** Context keys (docs/infrastructure.md lists them), on top of cdk.json's. */
  readonly context: Readonly<Record<string, string | boolean | number>>;
  /** The stack's props on top of those the context gives (BackendStackProps'). @default - none */
  readonly props?: { readonly jobs?: readonly JobDefinition[]; readonly database?: { readonly allocatedStorageGiB?: number } };
}

export interface Transition {
  /** A short name, printed with the plan. */
  readonly name: string;
  readonly before: StackSettings;
  readonly after: StackSettings;
  /**
   * Known to be unsafe in one deploy: why, and what to do instead (docs/infrastructure.md says
   * the same). The check then expects findings, and fails when there are none, so the mark
   * cannot outlive the problem. @default - the update must be safe
   */
  readonly unsafe?: string;
}

/** A domain for HTTPS, as synth takes it (nothing is looked up or created). */
const DOMAIN = { domainName: 'api.acme.io', hostedZoneId: 'Z0123456789ABCDEFGHIJ', hostedZoneName: 'acme.io' } as const;

const DEV: StackSettings = { context: { stage: 'dev', alertEmail: 'none' } };
const PROD: StackSettings = { context: { stage: 'prod', alertEmail: 'none', ...DOMAIN } };
const PROD_HTTP: StackSettings = { context: { stage: 'prod', alertEmail: 'none', allowHttp: true } };

const withContext = (side: StackSettings, context: StackSettings['context']): StackSettings => ({ ...side, context: { ...side.context, ...context } });
const withJobs = (side: StackSettings, jobs: readonly JobDefinition[]): StackSettings => ({ ...side, props: { ...side.props, jobs } });

const TABLE: readonly JobDefinition[] = JOBS;
const ZONED = TABLE.find((j) => j.timeZone !== undefined && j.enabled);
// The last: billing-run, first, bills UTC days and refuses a time zone.
const UNZONED = TABLE.findLast((j) => j.timeZone === undefined && j.enabled);
if (!ZONED || !UNZONED) throw new Error('lib/update-transitions.ts needs a job with a timeZone and one without in lib/jobs.ts');
const LAST = JOBS.at(-1)!;
const replaceJob = (name: string, job: JobDefinition) => JOBS.map((j) => (j.name === name ? job : j));

/** An extra job, as a team would add one. */
const NEW_JOB: JobDefinition = { ...UNZONED, name: 'usage-digest', description: 'Mails each account a digest of yesterday\'s usage', schedule: 'cron(0 6 * * ? *)' };

/** Every transition the check runs. */
export const TRANSITIONS: readonly Transition[] = [
  { name: 'dev: HTTP to HTTPS (a domain)', before: DEV, after: withContext(DEV, DOMAIN) },
  { name: 'prod: HTTP (allowHttp) to HTTPS (a domain)', before: PROD_HTTP, after: PROD },
  { name: `prod: job ${UNZONED.name} gains a timeZone (a rule becomes a schedule)`, before: PROD, after: withJobs(PROD, replaceJob(UNZONED.name, { ...UNZONED, timeZone: 'Europe/Berlin' })) },
  { name: `prod: job ${ZONED.name} loses its timeZone (a schedule becomes a rule)`, before: PROD, after: withJobs(PROD, replaceJob(ZONED.name, { ...ZONED, timeZone: undefined })) },
  {
    name: 'prod: HTTPS back to HTTP (allowHttp)',
    before: PROD,
    after: PROD_HTTP,
    unsafe: 'the serving listener moves back to port 80 while the redirect listener, deleted only at the end of the update, still holds it; delete the redirect listener by hand (aws elbv2 delete-listener) just before that deploy',
  },
  { name: 'prod: a job added', before: PROD, after: withJobs(PROD, [...JOBS, NEW_JOB]) },
  { name: `prod: job ${LAST.name} removed`, before: PROD, after: withJobs(PROD, JOBS.slice(0, -1)) },
  { name: `prod: job ${LAST.name} renamed`, before: PROD, after: withJobs(PROD, replaceJob(LAST.name, { ...LAST, name: `${LAST.name}-v2` })) },
  { name: 'prod: a larger database class', before: PROD, after: withContext(PROD, { databaseInstanceType: 'm7g.large' }) },
  { name: 'prod: more database storage', before: PROD, after: { ...PROD, props: { database: { allocatedStorageGiB: 100 } } } },
  { name: 'dev: canary deploys turned on', before: DEV, after: withContext(DEV, { canaryDeploys: true }) },
  {
    name: 'prod: canary deploys turned off',
    before: PROD,
    after: withContext(PROD, { canaryDeploys: false }),
    unsafe: 'the production listener rule goes while the traffic may sit on the alternate target group, which goes too; to leave canary deploys, first deploy until the rule forwards everything to the primary group (aws elbv2 describe-rules), then turn them off',
  },
  { name: 'prod: the WAF turned on', before: PROD, after: withContext(PROD, { waf: true }) },
  { name: 'prod: the WAF turned off', before: withContext(PROD, { waf: true }), after: PROD },
];
