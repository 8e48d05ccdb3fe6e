/**
 * The role GitHub Actions deploys with (.github/workflows/deploy.yml), one per stage and
 * account, in its own small stack:
 *
 *   npx cdk deploy --app "npx tsx bin/deploy-role.ts" -c githubRepo=<owner>/<repo> -c stage=prod
 *
 * GitHub's OIDC token is its only way in (no stored keys), and only for workflow jobs of that
 * repository running in the GitHub environment named like the stage. It may do one thing:
 * assume the CDK bootstrap roles of its account, which `cdk deploy` uses for everything else.
 */
import { Stack, type StackProps } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import type { Stage } from '../defaults.js';
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

/** The deploy role's name for `stage`; deploy.yml assumes it by this name. */
export function deployRoleName(stage: Stage): string {
  return `EcsSaasBackend-${stage}-github-deploy`;
}

export class DeployRoleStack extends Stack {
  public readonly role: iam.Role;

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
      assumedBy: new iam.WebIdentityPrincipal(provider.oidcProviderArn, {
        StringEquals: {
          [`${GITHUB_OIDC}:aud`]: 'sts.amazonaws.com',
          [`${GITHUB_OIDC}:sub`]: `repo:${props.githubRepo}:environment:${props.stage}`,
        },
      }),
    });
    const qualifier = props.qualifier ?? DEFAULT_QUALIFIER;
    this.role.addToPolicy(new iam.PolicyStatement({
      sid: 'UseTheCdkBootstrapRoles',
      actions: ['sts:AssumeRole', 'sts:TagSession'],
      resources: ['deploy', 'file-publishing', 'image-publishing', 'lookup'].map((kind) =>
        `arn:${this.partition}:iam::${this.account}:role/cdk-${qualifier}-${kind}-role-${this.account}-*`),
    }));
  }
}
