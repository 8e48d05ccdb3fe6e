/**
 * EventBridge's quota of rules per event bus: 300 by default, per account and region, shared
 * by every stack there. Each job without a time zone brings one rule on the default bus, so
 * 200 jobs in a dev and a prod stage of one account (about 400 rules) pass it. Synth reports
 * how many rules this stack adds to the default bus, and warns when they alone pass the
 * quota. Jobs with a time zone are started by EventBridge Scheduler schedules, which are not
 * rules and do not count.
 */
import { Annotations, Stack, Token } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import type { IConstruct } from 'constructs';

/** EventBridge's default quota of rules per event bus (its guide, "Amazon EventBridge quotas"). */
export const DEFAULT_BUS_RULE_QUOTA = 300;

/** The rules under `scope` (nested stacks included) that go to the account's default event bus. */
export function defaultBusRules(scope: IConstruct): events.CfnRule[] {
  return scope.node.findAll().filter((c): c is events.CfnRule => c instanceof events.CfnRule).filter((rule) => {
    const bus = rule.eventBusName;
    return bus === undefined || (!Token.isUnresolved(bus) && bus === 'default');
  });
}

/** Adds synth's report of the stack's default-bus rules: an info line, or a warning past the quota. */
export function reportDefaultBusRules(stack: Stack): number {
  const count = defaultBusRules(stack).length;
  const text = `EventBridge rules on the account's default bus: this stack adds ${count} (one per job without a time zone, plus the stack's own); ` +
    `the default quota is ${DEFAULT_BUS_RULE_QUOTA} per account and region, shared by every stack there. ` +
    'Past it, give jobs a time zone (EventBridge Scheduler schedules do not count) or ask for a higher quota (docs/jobs.md, "Rules and the quota").';
  if (count > DEFAULT_BUS_RULE_QUOTA) Annotations.of(stack).addWarningV2('ecs-saas-backend:default-bus-rules', text);
  else Annotations.of(stack).addInfo(text);
  return count;
}
