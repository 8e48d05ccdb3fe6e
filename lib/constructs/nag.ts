/**
 * Helpers for cdk-nag v3 acknowledgements (`Validations.of(construct).acknowledge`).
 *
 * An IAM5 finding names the resource it allows the way cdk-nag writes it (`<LogicalId.Arn>/*`),
 * so an acknowledgement of exactly one finding must spell it the same way.
 */
import { Stack } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

/**
 * `value` as cdk-nag writes it in a finding: a literal stays as it is, a reference becomes
 * `<LogicalId>`, `<LogicalId.Attribute>` or `<AWS::Region>`. So `arn:${stack.partition}:...`
 * reads `arn:<AWS::Partition>:...` in an environment-agnostic stack and `arn:aws:...` in one
 * pinned to a region.
 */
export function nagText(scope: IConstruct, value: string): string {
  const resolved: unknown = Stack.of(scope).resolve(value);
  const part = (v: unknown): string => {
    if (typeof v === 'string') return v;
    const o = v as Record<string, unknown>;
    if ('Ref' in o) return `<${o.Ref as string}>`;
    if ('Fn::GetAtt' in o) return `<${(o['Fn::GetAtt'] as string[]).join('.')}>`;
    if ('Fn::Join' in o) return (o['Fn::Join'] as [string, unknown[]])[1].map(part).join((o['Fn::Join'] as [string])[0]);
    throw new Error(`cannot write ${JSON.stringify(v)} as cdk-nag does`);
  };
  return part(resolved);
}
