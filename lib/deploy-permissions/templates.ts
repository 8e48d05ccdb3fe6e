/**
 * Every CloudFormation template a deploy creates: each stage as `.ci/run` synthesizes it, with
 * every option that adds resources on (prod with its domain and the WAF), nested stacks
 * included. The deploy-permissions data and its test read exactly these.
 */
import { readFileSync } from 'node:fs';
import { App, type CfnElement, Stack } from 'aws-cdk-lib';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import { DeployRoleStack } from '../constructs/deploy-role.js';
import { settingsFromContext } from '../constructs/settings.js';
import { BackendStack } from '../constructs/stack.js';

/** One resource of a synthesized template, as CloudFormation reads it. */
export interface TemplateResource {
  readonly Type: string;
  readonly Properties?: Record<string, unknown>;
}

/** A template and the name of the stack CloudFormation creates from it. */
export interface DeployedTemplate {
  /** The parent stack's name (`EcsSaasBackend-prod`); a nested stack's name starts with it. */
  readonly stackName: string;
  /** `EcsSaasBackend-prod` for the parent, `EcsSaasBackend-prod/<job>` for a nested stack. */
  readonly label: string;
  readonly resources: Readonly<Record<string, TemplateResource>>;
  readonly parameters: Readonly<Record<string, { readonly Type: string; readonly Default?: string }>>;
  /** A nested stack's AWS::CloudFormation::Stack resource in the parent template. */
  readonly nestedLogicalId?: string;
}

/** The context of each variant: `.ci/run`'s synth commands, plus every option that adds a resource type. */
export const VARIANTS: readonly Record<string, string>[] = [
  { stage: 'dev', alertEmail: 'none' },
  { stage: 'prod', alertEmail: 'none', domainName: 'api.acme.io', hostedZoneId: 'Z0123456789ABCDEFGHIJ', hostedZoneName: 'acme.io', waf: 'true' },
];

const CDK_CONTEXT = JSON.parse(readFileSync(new URL('../../cdk.json', import.meta.url), 'utf8')).context as Record<string, unknown>;
// The image is ECR's either way; a registry image only skips staging the Docker context.
const IMAGE = ecs.ContainerImage.fromRegistry('public.ecr.aws/docker/library/node:24');

/**
 * The templates of every variant: each parent stack, then its nested stacks; and the GitHub
 * deploy roles' own stacks (bin/deploy-role.ts), which the same bootstrap deploys.
 */
export function deployedTemplates(): DeployedTemplate[] {
  return [...backendTemplates(), ...(['dev', 'prod'] as const).map(deployRoleTemplate)];
}

function deployRoleTemplate(stage: 'dev' | 'prod'): DeployedTemplate {
  const app = new App({ analyticsReporting: true, builtinCloudFormationValidation: false });
  const stack = new DeployRoleStack(app, `EcsSaasBackend-${stage}-deploy-role`, { githubRepo: 'acme/backend', stage });
  return { stackName: stack.stackName, label: stack.stackName, ...parts(app.synth().getStackArtifact(stack.artifactId).template) };
}

function backendTemplates(): DeployedTemplate[] {
  return VARIANTS.flatMap((context) => {
    // analyticsReporting: the CLI's templates carry AWS::CDK::Metadata, so these do too.
    const app = new App({ context: { ...CDK_CONTEXT, ...context }, analyticsReporting: true, builtinCloudFormationValidation: false });
    const { stackName, props } = settingsFromContext(app.node);
    const stack = new BackendStack(app, stackName, { ...props, image: IMAGE });
    const assembly = app.synth();
    const read = (s: Stack) => assembly.getStackArtifact(s.artifactId).template;
    const nested = [...stack.scheduledJobs.jobs.entries()].map(([job, j]) => ({
      stackName, label: `${stackName}/${job}`, nestedLogicalId: stack.getLogicalId(j.stack.nestedStackResource as CfnElement),
      ...parts(JSON.parse(readFileSync(`${assembly.directory}/${j.stack.templateFile}`, 'utf8'))),
    }));
    return [{ stackName, label: stackName, ...parts(read(stack)) }, ...nested];
  });
}

const parts = (template: { Resources: DeployedTemplate['resources']; Parameters?: DeployedTemplate['parameters'] }) =>
  ({ resources: template.Resources, parameters: template.Parameters ?? {} });

/** The resource types of `templates`, sorted. */
export function resourceTypes(templates: readonly DeployedTemplate[]): string[] {
  return [...new Set(templates.flatMap((t) => Object.values(t.resources).map((r) => r.Type)))].sort();
}
