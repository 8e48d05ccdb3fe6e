/**
 * The shape of the CloudFormation execution policy for `cdk bootstrap`
 * (deploy/bootstrap-execution-policy.json): IAM only on the stacks' own roles, with conditions.
 * deploy-permissions.test.ts proves it allows every call a deploy makes, and nothing more.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../lib/constructs/stack.js';

const POLICY = JSON.parse(readFileSync(path.join(REPO_ROOT, 'deploy/bootstrap-execution-policy.json'), 'utf8')) as {
  Statement: { Sid: string; Action: string | string[]; Resource: string; Condition?: Record<string, Record<string, string[]>> }[];
};
const statement = (sid: string) => POLICY.Statement.find((s) => s.Sid === sid)!;
const STACK_ROLES = 'arn:aws:iam::*:role/EcsSaasBackend-*';
/** The deploy roles' stacks (bin/deploy-role.ts) create GitHub's OIDC provider, and no other. */
const GITHUB_OIDC_PROVIDER = 'arn:aws:iam::*:oidc-provider/token.actions.githubusercontent.com';

describe('the bootstrap execution policy', () => {
  it('lets IAM touch only the stacks\' own roles, attach only the managed policies they use, and pass them only to their services', () => {
    expect(JSON.stringify(POLICY)).not.toMatch(/"iam:\*"|"\*:\*"|"Action": "\*"/);
    for (const s of POLICY.Statement.filter((s) => [s.Action].flat().some((a) => a.startsWith('iam:')))) {
      const unconditionedStar = s.Resource === '*' && !s.Condition;
      // The one read of the whole account: RDS's handler lists roles.
      if (unconditionedStar) expect([s.Action].flat(), s.Sid).toEqual(['iam:ListRoles']);
      else expect([STACK_ROLES, '*', GITHUB_OIDC_PROVIDER, expect.stringMatching(/^arn:aws:iam::\*:role\/aws-service-role\//)], s.Sid).toContainEqual(s.Resource);
    }
    const attach = statement('OnlyTheManagedPoliciesTheStacksAttach');
    expect(attach).toMatchObject({ Action: ['iam:AttachRolePolicy', 'iam:DetachRolePolicy'], Resource: STACK_ROLES });
    expect(attach.Condition!.ArnEquals!['iam:PolicyARN']!.every((arn) => arn.startsWith('arn:aws:iam::aws:policy/'))).toBe(true);
    expect(statement('PassTheStacksRolesToTheirServices')).toMatchObject({ Action: 'iam:PassRole', Resource: STACK_ROLES });
    expect(statement('PassTheStacksRolesToTheirServices').Condition!.StringEquals!['iam:PassedToService']).not.toContain('ec2.amazonaws.com');
    expect(statement('OnlyTheStacksOwnRoles').Action).not.toContain('iam:DeleteRolePermissionsBoundary');
  });

  it('creates only the service-linked roles a fresh account lacks', () => {
    expect(statement('TheServiceLinkedRolesOfAFreshAccount').Condition!.StringEquals!['iam:AWSServiceName']).toEqual(
      expect.arrayContaining(['ecs.amazonaws.com', 'elasticloadbalancing.amazonaws.com', 'rds.amazonaws.com']),
    );
  });
});
