/**
 * Helpers for cdk-nag v3 acknowledgements (`Validations.of(construct).acknowledge`).
 *
 * An IAM5 finding names the resource it allows as `<LogicalId>` or `<LogicalId.Arn>`, so an
 * acknowledgement of exactly one finding must spell the logical id the same way.
 */
import { CfnElement, Stack } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

/** The logical id of `construct`'s CloudFormation resource (itself, or its default child). */
export function logicalId(construct: IConstruct): string {
  const element = CfnElement.isCfnElement(construct) ? construct : construct.node.defaultChild;
  if (!element || !CfnElement.isCfnElement(element)) {
    throw new Error(`${construct.node.path} has no CloudFormation resource to name`);
  }
  return Stack.of(element).resolve(element.logicalId) as string;
}
