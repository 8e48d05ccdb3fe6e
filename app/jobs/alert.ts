/**
 * The failure alert: one SNS message to ALERT_TOPIC_ARN when a run fails for good.
 *
 * @aws-sdk/client-sns is loaded only here, only then: a run that succeeds never pays for
 * it. Without ALERT_TOPIC_ARN (a local run) the alert is logged instead. A publish that
 * fails is logged; the run's exit code stays 1 either way.
 */
import { rerunCommand } from '../../lib/job-flow.js';
import type { Logger } from '../logger.js';
import { errorText } from '../shutdown.js';
import type { RunLocation } from './where.js';

export interface FailureReport {
  readonly job: string;
  readonly scheduledTime: Date;
  readonly period: string;
  /** The job_runs id of the last attempt; undefined when the run could not be recorded. */
  readonly runId?: string;
  readonly attempts: number;
  readonly maxAttempts: number;
  readonly durationMs: number;
  readonly error: string;
  readonly location: RunLocation;
}

/** SNS subjects: ASCII, no line breaks, under 100 characters. */
const SUBJECT_MAX = 99;

export function alertSubject(r: FailureReport): string {
  return safeSubject(`[job failed] ${r.job} scheduled ${r.scheduledTime.toISOString()}`);
}

function safeSubject(subject: string): string {
  return subject.replace(/[^\x20-\x7e]/g, '?').slice(0, SUBJECT_MAX);
}

/** The arguments that rerun the same run key; the rerun resumes from the last checkpoint. */
export function rerunArgs(r: Pick<FailureReport, 'job' | 'scheduledTime'>): string[] {
  return [r.job, '--scheduled-time', r.scheduledTime.toISOString()];
}

export function alertBody(r: FailureReport): string {
  const args = rerunArgs(r);
  const lines = [
    `The scheduled job ${r.job} failed for good.`,
    '',
    `Job:            ${r.job}`,
    `Scheduled time: ${r.scheduledTime.toISOString()}`,
    `Period:         ${r.period}`,
    `Run id:         ${r.runId ?? '(none: the run could not be recorded)'}`,
    `Attempts:       ${r.attempts} of ${r.maxAttempts}`,
    `Duration:       ${(r.durationMs / 1_000).toFixed(1)} s`,
    `Ran on:         ${r.location.ranOn}`,
    `Error:          ${r.error}`,
    '',
    'Rerun it (it resumes from the last checkpoint and cannot double any work):',
    `  node dist/app/main.js ${args.join(' ')}`,
  ];
  const ecs = r.location.ecs;
  if (ecs) {
    // A job's task family is `<stack>-<job>` (lib/constructs/scheduled-jobs.ts): the stack whose state machine reruns it.
    const family = ecs.taskDefinition.replace(/:\d+$/, '');
    const stack = family.endsWith(`-${r.job}`) ? family.slice(0, -(r.job.length + 1)) : undefined;
    if (stack) {
      lines.push(
        '',
        'In AWS, as a new execution of the job\'s state machine (it retries the task as a scheduled run does):',
        `  ${rerunCommand(r.job, r.scheduledTime.toISOString(), stack)}`,
      );
    } else {
      const overrides = JSON.stringify({ containerOverrides: [{ name: ecs.container, command: ['node', 'dist/app/main.js', ...args] }] });
      lines.push(
        '',
        'As an ECS task, with the network configuration of the job\'s subnets and security group:',
        `  aws ecs run-task --cluster ${ecs.cluster} --task-definition ${ecs.taskDefinition}${ecs.launchType ? ` --launch-type ${ecs.launchType}` : ''} --network-configuration <the job's> --overrides '${overrides}'`,
      );
    }
  }
  lines.push('', 'From a checkout, against the database in DATABASE_URL:', `  npm run job -- ${args.join(' ')}`, `Recent runs: npm run runs -- ${r.job}`);
  return lines.join('\n');
}

export interface AlertOptions {
  readonly topicArn: string | undefined;
  readonly logger: Logger;
}

/** Publishes the alert (or logs it); resolves either way, never throws. */
export function sendFailureAlert(report: FailureReport, opts: AlertOptions): Promise<'published' | 'logged' | 'failed'> {
  return publishAlert(alertSubject(report), alertBody(report), opts, { name: 'failure alert', onError: '; the run exits 4 (failed, not alerted), so its execution retries it and then alerts' });
}

/** Publishes one message to the alert topic (or logs it without one); resolves either way, never throws. */
export async function publishAlert(
  subject: string,
  message: string,
  { topicArn, logger }: AlertOptions,
  log: { readonly name: string; readonly onError: string } = { name: 'alert', onError: '' },
): Promise<'published' | 'logged' | 'failed'> {
  subject = safeSubject(subject);
  if (!topicArn) {
    logger.error({ alert: { subject, message } }, `ALERT (ALERT_TOPIC_ARN is not set, so it is logged, not published): ${subject}`);
    return 'logged';
  }
  const t0 = Date.now();
  try {
    const { SNSClient, PublishCommand } = await import('@aws-sdk/client-sns');
    // The topic's own region, whatever AWS_REGION says: a topic is only reachable there.
    const region = topicArn.split(':')[3];
    const client = new SNSClient({ region, maxAttempts: 3, requestHandler: { connectionTimeout: 2_000, requestTimeout: 5_000 } });
    try {
      const out = await client.send(new PublishCommand({ TopicArn: topicArn, Subject: subject, Message: message }));
      logger.info({ topicArn, messageId: out.MessageId, ms: Date.now() - t0 }, `${log.name} published to ${topicArn}`);
      return 'published';
    } finally {
      client.destroy();
    }
  } catch (err) {
    logger.error(
      { topicArn, err: errorText(err), ms: Date.now() - t0, alert: { subject, message } },
      `could not publish the ${log.name} to ${topicArn}: ${errorText(err)}${log.onError}`,
    );
    return 'failed';
  }
}
