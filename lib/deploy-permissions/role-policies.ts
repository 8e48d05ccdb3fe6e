/**
 * A role's permissions as IAM reads them: its inline policies and every AWS::IAM::Policy of the
 * template attached to it, intrinsics resolved to the ARNs the stack's names give.
 */
import type { Resolver } from './requests.js';
import type { PolicyDocument, PolicyStatement } from './simulate.js';

export function rolePolicy(resolver: Resolver, roleId: string): PolicyDocument {
  const resources = resolver.template.resources;
  const role = resources[roleId];
  if (role?.Type !== 'AWS::IAM::Role') throw new Error(`${resolver.template.label}: ${roleId} is not a role`);
  const inline = ((role.Properties?.Policies as { PolicyDocument: { Statement: unknown[] } }[] | undefined) ?? []).map((p) => p.PolicyDocument);
  const attached = Object.values(resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy' && (r.Properties!.Roles as { Ref?: string }[]).some((ref) => ref.Ref === roleId))
    .map((r) => r.Properties!.PolicyDocument as { Statement: unknown[] });
  const statements = [...inline, ...attached].flatMap((d) => d.Statement).map((s) => resolver.deep(s) as PolicyStatement);
  return { Version: '2012-10-17', Statement: statements };
}
