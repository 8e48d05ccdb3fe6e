/** An IAM policy document, as the deploy-permissions checks read and edit it. */
export interface PolicyStatement {
  readonly Sid?: string;
  readonly Effect: 'Allow' | 'Deny';
  readonly Action: string | string[];
  readonly Resource: string | string[];
  readonly Condition?: Record<string, Record<string, string | string[]>>;
  readonly Principal?: unknown;
}
export interface PolicyDocument {
  readonly Version: string;
  readonly Statement: PolicyStatement[];
}

/** Whether an Action entry of a policy (`ecs:*`, `iam:PassRole`) covers `action`, as IAM matches them. */
export const matches = (pattern: string, action: string) =>
  new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replaceAll('*', '.*').replaceAll('?', '.')}$`, 'i').test(action);

