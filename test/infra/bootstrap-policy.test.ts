/**
 * The CloudFormation execution policy for `cdk bootstrap` (deploy/bootstrap-execution-policy.json)
 * covers every service of the synthesized templates, both stages, every option on, and no other.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../lib/constructs/stack.js';
import { synth, TEST_DOMAIN, type Synthesized } from './synth.js';

const POLICY = JSON.parse(readFileSync(path.join(REPO_ROOT, 'deploy/bootstrap-execution-policy.json'), 'utf8')) as {
  Statement: { Sid: string; Action: string | string[]; Resource: string; Condition?: Record<string, Record<string, string[]>> }[];
};
const statement = (sid: string) => POLICY.Statement.find((s) => s.Sid === sid)!;

/** IAM's service prefix of a CloudFormation type's namespace, where the two differ. */
const PREFIX: Record<string, string> = {
  ApplicationAutoScaling: 'application-autoscaling',
  CertificateManager: 'acm',
  ElasticLoadBalancingV2: 'elasticloadbalancing',
  StepFunctions: 'states',
  WAFv2: 'wafv2',
};

/** The IAM service prefix of every resource type in `s`'s templates, nested stacks included. */
function servicesOf(s: Synthesized): Set<string> {
  const templates = [s.template, ...[...s.stack.scheduledJobs.jobs.values()].map((j) => Template.fromStack(j.stack))];
  const services = new Set<string>();
  for (const t of templates) {
    for (const r of Object.values(t.toJSON().Resources as Record<string, { Type: string }>)) {
      // A custom resource is a Lambda function the stack deploys.
      const namespace = r.Type.startsWith('Custom::') ? 'Lambda' : r.Type.split('::')[1]!;
      services.add(PREFIX[namespace] ?? namespace.toLowerCase());
    }
  }
  return services;
}

describe('the bootstrap execution policy', () => {
  it('names exactly the services of the templates (IAM apart: scoped to the stack\'s roles)', () => {
    // The image is ECR's either way; a registry image only skips staging the Docker context.
    const image = ecs.ContainerImage.fromRegistry('public.ecr.aws/docker/library/node:24');
    const used = new Set([...servicesOf(synth({ stage: 'dev', image })), ...servicesOf(synth({ stage: 'prod', waf: {}, image, service: { domain: TEST_DOMAIN } }))]);
    expect(used.has('iam')).toBe(true);
    used.delete('iam');
    const granted = (statement('TheServicesTheStackUses').Action as string[]).map((a) => a.replace(/:\*$/, ''));
    expect(granted.sort()).toEqual([...used].sort());
  }, 300_000);

  it('lets IAM touch only the stacks\' own roles, and create only the service-linked roles a fresh account lacks', () => {
    const roles = statement('OnlyTheStacksOwnRoles');
    expect(roles.Resource).toBe('arn:aws:iam::*:role/EcsSaasBackend-*');
    expect(roles.Action).not.toContain('iam:AttachRolePolicy');
    expect(JSON.stringify(POLICY)).not.toMatch(/"iam:\*"|"\*:\*"|"Action": "\*"/);
    expect(statement('TheServiceLinkedRolesOfAFreshAccount').Condition!.StringEquals!['iam:AWSServiceName']).toEqual(
      expect.arrayContaining(['ecs.amazonaws.com', 'elasticloadbalancing.amazonaws.com', 'rds.amazonaws.com']),
    );
  });
});
