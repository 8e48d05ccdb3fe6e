/**
 * Synthesizes the stack for a set of settings in this process, as `cdk synth` would with that
 * context (cdk.json's, then the settings'), and reads back its templates, nested stacks included.
 * `npm run check:updates` synthesizes every side of its transitions this way: one process, no CLI.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { App } from 'aws-cdk-lib';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import type { StackSettings } from '../update-transitions.js';
import { settingsFromContext } from './settings.js';
import { BackendStack, REPO_ROOT } from './stack.js';
import { templatesOfAssembly, type TemplateSet } from './stateful-changes.js';

const CDK_CONTEXT = JSON.parse(readFileSync(path.join(REPO_ROOT, 'cdk.json'), 'utf8')).context ?? {};
// Construct paths name the resources; asset paths find the nested stacks' templates.
const ASSEMBLY_METADATA = { 'aws:cdk:enable-path-metadata': true, 'aws:cdk:enable-asset-metadata': true };
// The templates are compared, never deployed: a registry image spares staging the Docker context.
const IMAGE = ecs.ContainerImage.fromRegistry('public.ecr.aws/docker/library/node:24');

/** The templates `settings` synthesize to in `outdir`; one `now` for every side, so the schedules agree. */
export function synthesizeSettings(settings: StackSettings, outdir: string, now: Date): TemplateSet {
  const app = new App({ outdir, context: { ...CDK_CONTEXT, ...ASSEMBLY_METADATA, ...settings.context }, builtinCloudFormationValidation: false });
  const { stackName, props } = settingsFromContext(app.node, { jobs: settings.props?.jobs });
  new BackendStack(app, stackName, { ...props, database: { ...props.database, ...settings.props?.database }, image: IMAGE, now });
  app.synth();
  return templatesOfAssembly(outdir, stackName);
}
