/**
 * Edits of a policy that prove the permissions check can fail: the policy without one action
 * (a wildcard that covered it becomes the list of the other actions it must still cover), or
 * without one entry of a statement's Action list.
 */
import { matches, type PolicyDocument, type PolicyStatement } from './policy.js';

function withActions(s: PolicyStatement, actions: string[]): PolicyStatement[] {
  return actions.length === 0 ? [] : [{ ...s, Action: actions }];
}

/** `policy` with `action` allowed nowhere, and every other action of `needed` still allowed where it was. */
export function withoutAction(policy: PolicyDocument, action: string, needed: readonly string[]): PolicyDocument {
  return {
    ...policy,
    Statement: policy.Statement.flatMap((s) => s.Effect !== 'Allow' ? [s] : withActions(s, [s.Action].flat().flatMap((entry) => {
      if (!matches(entry, action)) return [entry];
      return needed.filter((a) => a !== action && matches(entry, a));
    }))),
  };
}

/** `policy` without the entry `entry` of statement `sid`'s Action list. */
export function withoutEntry(policy: PolicyDocument, sid: string, entry: string): PolicyDocument {
  return {
    ...policy,
    Statement: policy.Statement.flatMap((s) => s.Sid !== sid ? [s] : withActions(s, [s.Action].flat().filter((a) => a !== entry))),
  };
}
