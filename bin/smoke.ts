/**
 * `npm run smoke -- --stage <dev|prod> | --stack <name>`: the release smoke test
 * (lib/hooks/smoke.mjs, the one the canary deploy's lifecycle hook runs through the test
 * listener) against a deployed stage's public URL. The URL is the stack's `ApiUrl` output and
 * the operator key is read from the secret its `OperatorKeySecret` output names; credentials and
 * region are the AWS SDK's usual ones (AWS_PROFILE, AWS_REGION, ...).
 *
 * Exit codes: 0 every check passed; 1 a check failed (each is printed, pass or FAIL); 2 bad
 * arguments, a stack that cannot be read, or no AWS region or credentials.
 */
import { pathToFileURL } from 'node:url';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { awsSetupAdvice } from '../app/dev/aws-errors.js';
import { contextStackName } from '../app/dev/stack-name.js';
import { EXIT, UsageError } from '../app/errors.js';
import { STAGES } from '../lib/defaults.js';
import { describeSmokeResult, smokeTest } from '../lib/hooks/smoke.mjs';

const USAGE = `Usage: npm run smoke -- --stage <${STAGES.join('|')}> | --stack <name>`;

/** The outputs the smoke test reads (lib/constructs/stack.ts). */
export const SMOKE_OUTPUTS = { url: 'ApiUrl', operatorKeySecret: 'OperatorKeySecret' } as const;

export function parseSmokeArgs(args: readonly string[]): { stack: string } {
  let stage: string | undefined;
  let stack: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg !== '--stage' && arg !== '--stack') throw new UsageError(`Unknown argument "${arg}". ${USAGE}`);
    const value = args[++i];
    if (value === undefined || value.startsWith('--')) throw new UsageError(`${arg} needs a value. ${USAGE}`);
    if (arg === '--stage') stage = value;
    else stack = value;
  }
  if (stage !== undefined && !(STAGES as readonly string[]).includes(stage)) throw new UsageError(`--stage "${stage}" is not a stage; accepted: ${STAGES.join(', ')}. ${USAGE}`);
  if (stage === undefined && stack === undefined) throw new UsageError(`Which stage? ${USAGE}`);
  return { stack: stack ?? contextStackName(stage) };
}

async function stackOutputs(stack: string): Promise<Record<string, string>> {
  const cfn = new CloudFormationClient({});
  try {
    const { Stacks } = await cfn.send(new DescribeStacksCommand({ StackName: stack }));
    return Object.fromEntries((Stacks?.[0]?.Outputs ?? []).map((o) => [o.OutputKey ?? '', o.OutputValue ?? '']));
  } catch (err) {
    if ((err as Error).name === 'ValidationError') throw new UsageError(`No stack ${stack} in this region: is it deployed (npx cdk deploy), and are AWS_REGION and the credentials those of its account?`);
    throw err;
  } finally {
    cfn.destroy();
  }
}

async function secretValue(secretId: string): Promise<string> {
  const client = new SecretsManagerClient({});
  try {
    const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: secretId }));
    if (!SecretString) throw new UsageError(`The secret ${secretId} holds no string`);
    return SecretString;
  } finally {
    client.destroy();
  }
}

/** Runs the smoke test against the stack's URL; the exit code. */
export async function runSmoke(args: { stack: string }, out: (text: string) => void): Promise<number> {
  const outputs = await stackOutputs(args.stack);
  const missing = Object.values(SMOKE_OUTPUTS).filter((key) => !outputs[key]);
  if (missing.length > 0) throw new UsageError(`The stack ${args.stack} has no ${missing.join(' or ')} output: deploy the current version (npx cdk deploy).`);
  const baseUrl = outputs[SMOKE_OUTPUTS.url]!;
  const result = await smokeTest({ baseUrl, operatorKey: await secretValue(outputs[SMOKE_OUTPUTS.operatorKeySecret]!) });
  out(describeSmokeResult(baseUrl, result));
  return result.ok ? EXIT.ok : EXIT.failure;
}

/** The process's exit code for an error: its one line goes to `err`, never a stack trace. */
export function reportSmokeError(error: unknown, err: (line: string) => void): number {
  if (error instanceof UsageError) {
    err(error.message);
    return EXIT.usage;
  }
  const advice = awsSetupAdvice(error);
  if (advice) {
    err(advice);
    return EXIT.usage;
  }
  const e = error as Error;
  err(`smoke: ${e.name}: ${e.message}`);
  return EXIT.usage;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const err = (line: string) => process.stderr.write(`${line}\n`);
  try {
    process.exitCode = await runSmoke(parseSmokeArgs(process.argv.slice(2)), (text) => process.stdout.write(`${text}\n`));
  } catch (error) {
    process.exitCode = reportSmokeError(error, err);
  }
}
