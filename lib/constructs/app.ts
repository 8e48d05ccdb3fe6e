/**
 * The backend as `cdk synth` builds it: the settings from the App's context, then the stack.
 * bin/app.ts (and the synth benchmark, with a generated jobs table) call this, then add cdk-nag.
 */
import type { App } from 'aws-cdk-lib';
import type { JobDefinition } from '../jobs.js';
import { settingsFromContext } from './settings.js';
import { BackendStack } from './stack.js';
import { InvalidSettingsError } from './validation.js';

/**
 * Adds the backend stack to `app`. A bad setting or jobs table is the user's to fix, so it
 * prints every problem (no stack trace) and exits 1.
 */
export function addBackendStack(app: App, options: { readonly jobs?: readonly JobDefinition[] } = {}): BackendStack {
  try {
    const { stackName, props } = settingsFromContext(app.node, options);
    return new BackendStack(app, stackName, props);
  } catch (err) {
    if (!(err instanceof InvalidSettingsError)) throw err;
    console.error(err.message);
    process.exit(1);
  }
}
