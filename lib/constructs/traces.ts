/**
 * What a task needs to send its traces to X-Ray's OTLP endpoint (TRACES=xray,
 * app/tracing/xray-exporter.ts): the two write actions of that endpoint. X-Ray defines no
 * resource type for them, so "*" is as narrow as IAM can say; the role may write spans and
 * nothing else of X-Ray's (no reads, no sampling rules, no segments).
 */
import * as iam from 'aws-cdk-lib/aws-iam';
import { Validations } from 'aws-cdk-lib';

/** The actions of the OTLP traces endpoint (the Service Authorization Reference lists both with no resource type). */
export const TRACE_ACTIONS = ['xray:PutSpans', 'xray:PutSpansForIndexing'] as const;

/** The container's tracing settings in AWS: spans to X-Ray, at the container's default ratio. */
export const TRACES_ENVIRONMENT = { TRACES: 'xray' } as const;

/** Lets `role` send spans to X-Ray. */
export function grantTraces(role: iam.IRole): void {
  role.addToPrincipalPolicy(new iam.PolicyStatement({ sid: 'SendTracesToXRay', actions: [...TRACE_ACTIONS], resources: ['*'] }));
  Validations.of(role).acknowledge({
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason: 'xray:PutSpans and xray:PutSpansForIndexing have no resource type: "*" is the narrowest resource X-Ray accepts, and the statement allows nothing but writing spans.',
  });
}
