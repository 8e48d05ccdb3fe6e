/**
 * The role GitHub Actions deploys with (.github/workflows/deploy.yml), one per stage and
 * account, in its own small stack:
 *
 *   npx cdk deploy --app "npx tsx bin/deploy-role.ts" -c githubRepo=<owner>/<repo> -c stage=prod
 *
 * GitHub's OIDC token is its only way in (no stored keys), and only for jobs of main's deploy
 * workflow of that repository running in the GitHub environment named like the stage. IAM can
 * condition only on a token's `aud` and `sub` (GitHub's other claims are not condition keys),
 * so the repository's subject template is customized to carry the workflow file and its ref
 * (`job_workflow_ref`), and the trust matches the whole subject: a branch's copy of deploy.yml,
 * another workflow, or a reset template gets a different `sub` and no session.
 * The role may do one thing: assume the CDK bootstrap roles of its account, which `cdk deploy`
 * uses for everything else. In prod a second, read-only role lets the plan job (no environment,
 * before the approval) read the deployed templates for `cdk diff` and `check:stateful`.
 */
import { Stack, type StackProps } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { STACK_DEFAULTS, type Stage } from '../defaults.js';
import { throwIfProblems } from './validation.js';

/** The CDK bootstrap qualifier `cdk bootstrap` uses unless told otherwise. */
const DEFAULT_QUALIFIER = 'hnb659fds';
const GITHUB_OIDC = 'token.actions.githubusercontent.com';

export interface DeployRoleStackProps extends StackProps {
  /** The repository whose workflows may deploy, `owner/name`. */
  readonly githubRepo: string;
  /** The stage this account runs; also the GitHub environment the job must run in. */
  readonly stage: Stage;
  /** The account's existing GitHub OIDC provider ARN. @default - a new provider is created (one per account) */
  readonly oidcProviderArn?: string;
  /** The CDK bootstrap qualifier. @default 'hnb659fds' */
  readonly qualifier?: string;
}

/** The tag of the operator key's secret (lib/constructs/web-service.ts), by which the deploy role may read it for the smoke test. */
export const OPERATOR_KEY_TAG = { key: 'ecs-saas-backend:secret', value: 'operator-key' } as const;

/** The claims, in order, of the repository's OIDC subject template (docs/operations.md sets it). */
export const SUBJECT_CLAIM_KEYS = ['repo', 'context', 'job_workflow_ref'] as const;
/** The only workflow, and the only ref, that may deploy. */
export const DEPLOY_WORKFLOW = { path: '.github/workflows/deploy.yml', ref: 'refs/heads/main' } as const;

/**
 * The `sub` GitHub writes for a job of main's deploy workflow under SUBJECT_CLAIM_KEYS: its
 * context is `environment:<name>` for a job with an environment, else `ref:<ref>`.
 */
export function deploySubject(githubRepo: string, context: { readonly environment: string } | { readonly ref: string }): string {
  const ctx = 'environment' in context ? `environment:${context.environment}` : `ref:${context.ref}`;
  return `repo:${githubRepo}:${ctx}:job_workflow_ref:${githubRepo}/${DEPLOY_WORKFLOW.path}@${DEPLOY_WORKFLOW.ref}`;
}

/** The deploy role's name for `stage`; deploy.yml assumes it by this name. */
export function deployRoleName(stage: Stage): string {
  return `EcsSaasBackend-${stage}-github-deploy`;
}

/** The prod plan role's name; deploy.yml's plan job assumes it by this name. */
export function planRoleName(stage: Stage): string {
  return `EcsSaasBackend-${stage}-github-plan`;
}

export class DeployRoleStack extends Stack {
  public readonly role: iam.Role;
  /** The read-only role of the plan job; prod only. */
  public readonly planRole: iam.Role | undefined;

  constructor(scope: Construct, id: string, props: DeployRoleStackProps) {
    throwIfProblems('The deploy role', /^[\w.-]+\/[\w.-]+$/.test(props.githubRepo)
      ? []
      : [`githubRepo must be owner/name, got ${JSON.stringify(props.githubRepo)}`]);
    super(scope, id, props);

    // The native resource, not OpenIdConnectProvider's custom resource (and its Lambda).
    const provider = props.oidcProviderArn
      ? iam.OidcProviderNative.fromOidcProviderArn(this, 'GitHub', props.oidcProviderArn)
      : new iam.OidcProviderNative(this, 'GitHub', { url: `https://${GITHUB_OIDC}`, clientIds: ['sts.amazonaws.com'] });

    this.role = new iam.Role(this, 'Role', {
      roleName: deployRoleName(props.stage),
      description: `GitHub Actions of ${props.githubRepo} deploy the ${props.stage} stage`,
      assumedBy: this.githubPrincipal(provider, deploySubject(props.githubRepo, { environment: props.stage })),
    });
    const qualifier = props.qualifier ?? DEFAULT_QUALIFIER;
    const bootstrapRole = (kind: string) => `arn:${this.partition}:iam::${this.account}:role/cdk-${qualifier}-${kind}-role-${this.account}-*`;
    this.role.addToPolicy(new iam.PolicyStatement({
      sid: 'UseTheCdkBootstrapRoles',
      actions: ['sts:AssumeRole', 'sts:TagSession'],
      resources: ['deploy', 'file-publishing', 'image-publishing', 'lookup'].map(bootstrapRole),
    }));

    // After each deploy, deploy.yml runs `npm run smoke` (bin/smoke.ts): it reads the stack's
    // outputs, and the operator key from the one secret tagged as it (OPERATOR_KEY_TAG) in this stage's stack.
    const stageStack = `${STACK_DEFAULTS.stackName}-${props.stage}`;
    this.role.addToPolicy(new iam.PolicyStatement({
      sid: 'SmokeTestReadsTheStackOutputs',
      actions: ['cloudformation:DescribeStacks'],
      resources: [`arn:${this.partition}:cloudformation:${this.region}:${this.account}:stack/${stageStack}/*`],
    }));
    this.role.addToPolicy(new iam.PolicyStatement({
      sid: 'SmokeTestReadsTheOperatorKey',
      actions: ['secretsmanager:GetSecretValue'],
      resources: [`arn:${this.partition}:secretsmanager:${this.region}:${this.account}:secret:*`],
      conditions: { StringEquals: { 'aws:ResourceTag/aws:cloudformation:stack-name': stageStack, [`aws:ResourceTag/${OPERATOR_KEY_TAG.key}`]: OPERATOR_KEY_TAG.value } },
    }));

    // Only prod has an approval gate, so only prod needs a plan before it.
    this.planRole = props.stage === 'prod' ? new iam.Role(this, 'PlanRole', {
      roleName: planRoleName(props.stage),
      description: `GitHub Actions of ${props.githubRepo} read the deployed ${props.stage} stack before its approval`,
      assumedBy: this.githubPrincipal(provider, deploySubject(props.githubRepo, { ref: DEPLOY_WORKFLOW.ref })),
    }) : undefined;
    if (this.planRole) {
      this.planRole.addToPolicy(new iam.PolicyStatement({
        sid: 'UseTheCdkLookupRole',
        actions: ['sts:AssumeRole', 'sts:TagSession'],
        resources: [bootstrapRole('lookup')],
      }));
      this.planRole.addToPolicy(new iam.PolicyStatement({
        sid: 'ReadTheDeployedTemplates',
        actions: ['cloudformation:GetTemplate', 'cloudformation:DescribeStacks', 'cloudformation:ListStackResources'],
        // The stack and its nested stacks, whose names start with the stack's.
        resources: [`arn:${this.partition}:cloudformation:${this.region}:${this.account}:stack/${STACK_DEFAULTS.stackName}-${props.stage}*`],
      }));
    }
  }

  private githubPrincipal(provider: iam.IOidcProvider, subject: string): iam.WebIdentityPrincipal {
    return new iam.WebIdentityPrincipal(provider.oidcProviderArn, {
      StringEquals: { [`${GITHUB_OIDC}:aud`]: 'sts.amazonaws.com', [`${GITHUB_OIDC}:sub`]: subject },
    });
  }
}
