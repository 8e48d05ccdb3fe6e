/**
 * deploy/bootstrap-execution-policy.json, CloudFormation's execution role, allows every call
 * CloudFormation's resource handlers make to create, update and delete each resource of both
 * stages' templates (deploy/resource-permissions.json), on the ARNs the stack's names give them,
 * conditions included, as IAM's evaluation logic (@cloud-copilot/iam-simulate) decides. And the
 * check can fail: without any one action or any one entry of the policy, it names what is missing.
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { HANDLERS, readPermissions, type PermissionsData } from '../../lib/deploy-permissions/data.js';
import { matches } from '../../lib/deploy-permissions/policy.js';
import { withoutAction, withoutEntry } from '../../lib/deploy-permissions/policy-edits.js';
import { ACCOUNT, deployRequests, typesWithoutData, unknownActions, type DeployRequest } from '../../lib/deploy-permissions/requests.js';
import { denials, KEY_POLICY_OF_THE_ACCOUNT, type PolicyDocument } from '../../lib/deploy-permissions/simulate.js';
import { deployedTemplates, resourceTypes, type DeployedTemplate } from '../../lib/deploy-permissions/templates.js';

const POLICY_FILE = new URL('../../deploy/bootstrap-execution-policy.json', import.meta.url);
const POLICY = JSON.parse(readFileSync(POLICY_FILE, 'utf8')) as PolicyDocument;
const REFRESH = 'npm run permissions:refresh -- <a checkout of github.com/pulumi/pulumi-aws-native>';

let templates: DeployedTemplate[];
let data: PermissionsData;
let requests: DeployRequest[];

beforeAll(async () => {
  templates = deployedTemplates();
  data = readPermissions();
  requests = await deployRequests(templates, data);
}, 300_000);

const messages = async (policy: PolicyDocument, of = requests) => (await denials(policy, of)).map((d) => d.message);

describe('the resource permissions data', () => {
  it('has an entry for every resource type of the templates, and for no other', () => {
    const missing = typesWithoutData(templates, data);
    expect(missing, `no permissions for ${missing.join(', ')}: run ${REFRESH}, or write a hand-written entry ("source": "hand-written from <doc>") in deploy/resource-permissions.json`).toEqual([]);
    expect(Object.keys(data.types).sort()).toEqual(resourceTypes(templates));
  });

  it('names a type the data lacks', () => {
    const { ['AWS::ECS::Service']: _, ...types } = data.types;
    expect(typesWithoutData(templates, { ...data, types })).toEqual(['AWS::ECS::Service']);
  });

  it('says where and when it was taken, and where each list comes from', () => {
    expect(data.schemas).toMatchObject({ repository: expect.stringMatching(/^https:\/\/github\.com\//), commit: expect.stringMatching(/^[0-9a-f]{40}$/), taken: expect.stringMatching(/^\d{4}-\d\d-\d\d$/) });
    for (const [type, entry] of Object.entries(data.types)) {
      expect(entry.source, type).toMatch(/^(aws-cloudformation-schema\/[a-z0-9-]+\.json|hand-written from .+)$/);
      for (const h of HANDLERS) expect(Array.isArray(entry[h]), `${type} ${h}`).toBe(true);
    }
  });

  it('names only actions IAM knows, and sets aside only actions of the lists, each with a reason', async () => {
    expect(await unknownActions(data), 'actions IAM does not know: add each to its type\'s "notNeeded" with the reason').toEqual([]);
    for (const [type, entry] of Object.entries(data.types)) {
      const listed = new Set(HANDLERS.flatMap((h) => entry[h]));
      for (const [action, reason] of Object.entries(entry.notNeeded ?? {})) {
        expect(listed.has(action), `${type} notNeeded ${action} is in none of its lists`).toBe(true);
        expect(reason.length, `${type} notNeeded ${action} needs a reason`).toBeGreaterThan(20);
      }
    }
  });

  it('every key policy lets the account\'s IAM policies grant use of the key, as the simulation assumes', () => {
    const keys = templates.flatMap((t) => Object.values(t.resources).filter((r) => r.Type === 'AWS::KMS::Key'));
    expect(keys.length).toBeGreaterThan(0);
    for (const key of keys) {
      const [first] = (key.Properties!.KeyPolicy as PolicyDocument).Statement;
      expect(JSON.stringify(first)).toContain(':root');
      expect(first).toMatchObject({ Effect: 'Allow', Action: KEY_POLICY_OF_THE_ACCOUNT.Statement[0]!.Action, Resource: '*' });
    }
  });
});

describe('the bootstrap execution policy', () => {
  it('allows every call a deploy of either stage makes', async () => {
    expect(requests.length).toBeGreaterThan(1000);
    expect(await messages(POLICY)).toEqual([]);
  }, 120_000);

  it('is checked with the conditions: the stack\'s own roles, their managed policies, the services they are passed to', async () => {
    const attach = requests.filter((r) => r.action === 'iam:AttachRolePolicy');
    expect(new Set(attach.map((r) => r.context['iam:PolicyARN']))).toEqual(new Set([
      'arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole',
      'arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole',
      'arn:aws:iam::aws:policy/AmazonECSInfrastructureRolePolicyForLoadBalancers',
    ]));
    expect(new Set(requests.filter((r) => r.action === 'iam:PassRole').map((r) => r.context['iam:PassedToService']))).toEqual(new Set([
      'ecs-tasks.amazonaws.com', 'ecs.amazonaws.com', 'events.amazonaws.com', 'lambda.amazonaws.com', 'scheduler.amazonaws.com', 'states.amazonaws.com',
      'ecs.application-autoscaling.amazonaws.com',
    ]));
    // The same requests on another managed policy, another service, or a role of another stack are refused.
    const [one] = attach;
    const refused = [
      { ...one!, context: { 'iam:PolicyARN': 'arn:aws:iam::aws:policy/AdministratorAccess' } },
      { ...requests.find((r) => r.action === 'iam:PassRole' && r.context['iam:PassedToService'] === 'lambda.amazonaws.com')!, context: { 'iam:PassedToService': 'ec2.amazonaws.com' } },
      { ...requests.find((r) => r.action === 'iam:CreateRole')!, resource: `arn:aws:iam::${ACCOUNT}:role/SomeoneElses-Role` },
    ];
    expect(await messages(POLICY, refused)).toHaveLength(3);
  });

  it('fails without iam:AttachRolePolicy, naming each role, the policy and the statement to change', async () => {
    const iam = requests.filter((r) => r.action.startsWith('iam:'));
    const failures = await messages(withoutAction(POLICY, 'iam:AttachRolePolicy', []), iam);
    expect(failures.length).toBe(iam.filter((r) => r.action === 'iam:AttachRolePolicy').length);
    expect(failures.every((m) => m.includes(' iam:AttachRolePolicy on '))).toBe(true);
    expect(failures).toContainEqual(expect.stringMatching(
      /^EcsSaasBackend-prod ApiServiceCanaryRole\w+ \(AWS::IAM::Role\): iam:AttachRolePolicy on arn:aws:iam::\d+:role\/EcsSaasBackend-prod-ApiServiceCanaryRole\S+ with iam:PolicyARN=arn:aws:iam::aws:policy\/AmazonECSInfrastructureRolePolicyForLoadBalancers is not allowed; add it to statement \w+$/,
    ));
  }, 120_000);

  it('fails without any one action a deploy needs, naming it', async () => {
    const needed = [...new Set(requests.map((r) => r.action))].sort();
    for (const action of needed) {
      const of = requests.filter((r) => r.action === action);
      const failures = await messages(withoutAction(POLICY, action, needed), of);
      expect(failures.length, `removing ${action} went unnoticed`).toBeGreaterThan(0);
      expect(failures[0]).toContain(` ${action} on `);
    }
  }, 180_000);

  it('holds nothing a deploy does not need: without any one entry, some call fails', async () => {
    for (const statement of POLICY.Statement) {
      for (const entry of [statement.Action].flat()) {
        // Only the calls the entry covers can change.
        const failures = await messages(withoutEntry(POLICY, statement.Sid!, entry), requests.filter((r) => matches(entry, r.action)));
        expect(failures.length, `${statement.Sid} ${entry} is needed by no call of the templates`).toBeGreaterThan(0);
      }
    }
  }, 180_000);
});
