/**
 * The name of a stage's stack, as `cdk synth -c stage=<stage>` names it: for the commands that
 * find a deployed stack by stage (`npm run job:aws`, `npm run smoke`).
 */
import { readFileSync } from 'node:fs';
import { DEFAULT_STAGE, STACK_DEFAULTS } from '../../lib/defaults.js';

/** The stack name `cdk synth -c stage=<stage>` uses: cdk.json's `stackName`, else `<default>-<stage>` (lib/constructs/settings.ts). */
export function contextStackName(stage: string | undefined): string {
  let context: { stackName?: unknown; stage?: unknown } = {};
  try {
    context = (JSON.parse(readFileSync('cdk.json', 'utf8')) as { context?: typeof context }).context ?? {};
  } catch {
    // No cdk.json here: the defaults, as `cdk synth` would use them.
  }
  if (typeof context.stackName === 'string' && context.stackName !== '') return context.stackName;
  return `${STACK_DEFAULTS.stackName}-${stage ?? (typeof context.stage === 'string' ? context.stage : DEFAULT_STAGE)}`;
}

