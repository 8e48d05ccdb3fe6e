#!/usr/bin/env node
/**
 * The GitHub deploy role's own app (lib/constructs/deploy-role.ts): deploy it once per account, by hand,
 * with credentials that may create IAM roles.
 *   npx cdk deploy --app "npx tsx bin/deploy-role.ts" -c githubRepo=<owner>/<repo> -c stage=<dev|prod>
 */
import { App } from 'aws-cdk-lib';
import { DEFAULT_STAGE, STAGES, type Stage } from '../lib/defaults.js';
import { DeployRoleStack } from '../lib/constructs/deploy-role.js';
import { InvalidSettingsError } from '../lib/constructs/validation.js';

const app = new App();
const stage = (app.node.tryGetContext('stage') ?? DEFAULT_STAGE) as Stage;
try {
  if (!STAGES.includes(stage)) throw new InvalidSettingsError('The deploy role', [`stage must be one of ${STAGES.join(', ')}, got ${JSON.stringify(stage)}`]);
  new DeployRoleStack(app, `EcsSaasBackend-${stage}-deploy-role`, {
    githubRepo: app.node.tryGetContext('githubRepo') ?? '',
    stage,
    oidcProviderArn: app.node.tryGetContext('oidcProviderArn'),
  });
} catch (err) {
  if (!(err instanceof InvalidSettingsError)) throw err;
  console.error(err.message);
  process.exit(1);
}
