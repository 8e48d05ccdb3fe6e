/**
 * `npm run check:stateful`: the real command, on the prod stage's assembly (synthesized once, in
 * this process) and copies of it edited as a code change would change them: an ordinary change
 * (a job's cpu) passes, and a change that would replace or delete a stateful resource fails,
 * naming each one. CI runs the git path (against the last commit whose CI passed) on every push.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { App } from 'aws-cdk-lib';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendStack, REPO_ROOT } from '../../lib/constructs/stack.js';
import { STATEFUL_TYPES } from '../../lib/constructs/stateful-changes.js';
import { JOBS } from '../../lib/jobs.js';
import { CDK_CONTEXT, NO_BUILTIN_VALIDATION, NOW } from './synth.js';

const STACK = 'EcsSaasBackend-prod';
const CLI = path.join(REPO_ROOT, 'bin/check-stateful.ts');
let work: string;

function synthTo(dir: string): void {
  const app = new App({ ...NO_BUILTIN_VALIDATION, outdir: dir, context: { ...CDK_CONTEXT, 'aws:cdk:enable-path-metadata': true, 'aws:cdk:enable-asset-metadata': true, stage: 'prod', alertEmail: 'none' } });
  // A registry image: the check compares templates, and staging the Docker context would only cost time.
  new BackendStack(app, STACK, { alertEmail: 'none', stage: 'prod', now: NOW, image: ecs.ContainerImage.fromRegistry('public.ecr.aws/docker/library/node:24') });
  app.synth();
}

function check(...args: string[]) {
  const run = spawnSync(process.execPath, ['--import', 'tsx', CLI, ...args], { cwd: REPO_ROOT, encoding: 'utf8' });
  return { status: run.status, output: run.stdout + run.stderr };
}

/** A copy of the assembly at `from` with `edit` applied to one of its templates (the parent's by default). */
function edited(from: string, name: string, edit: (resources: Record<string, any>) => void, templateFile = `${STACK}.template.json`): string {
  const dir = path.join(work, name);
  cpSync(from, dir, { recursive: true });
  const file = path.join(dir, templateFile);
  const template = JSON.parse(readFileSync(file, 'utf8'));
  edit(template.Resources);
  writeFileSync(file, JSON.stringify(template));
  return dir;
}

const idOf = (resources: Record<string, any>, type: string, pathPart: string): string => {
  const found = Object.entries(resources).find(([, r]) => r.Type === type && String(r.Metadata?.['aws:cdk:path']).includes(pathPart));
  expect(found, `${type} at ${pathPart}`).toBeDefined();
  return found![0];
};

describe('npm run check:stateful', () => {
  let base: string;
  let cpuChanged: string;
  let jobTemplateFile: string;

  beforeAll(() => {
    work = mkdtempSync(path.join(os.tmpdir(), 'stateful-test-'));
    base = path.join(work, 'base');
    synthTo(base);
    jobTemplateFile = readdirSync(base).find((f) => f.endsWith('.nested.template.json') && f.includes(JOBS[0]!.name.replaceAll('-', '')))!;
    // What doubling the first job's cpu in lib/jobs.ts does to its nested stack.
    cpuChanged = edited(base, 'cpu', (resources) => {
      const task = resources[idOf(resources, 'AWS::ECS::TaskDefinition', '')];
      task.Properties.Cpu = String(Number(task.Properties.Cpu) * 2);
      task.Properties.Memory = String(Math.max(Number(task.Properties.Memory), Number(task.Properties.Cpu) * 2));
    }, jobTemplateFile);
  }, 300_000);
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('passes an ordinary change: a job\'s cpu (its task definition is replaced, which holds no data)', () => {
    const run = check('--base-assembly', base, '--assembly', cpuChanged);
    expect(run.output).toMatch(/no stateful resource of EcsSaasBackend-prod replaced or deleted against .* \([1-9]\d* resource\(s\) changed\)/);
    expect(run.status).toBe(0);
  });

  let broken: string;
  it('fails on a renamed database construct and a replaced bucket, naming each resource and why', () => {
    broken = edited(cpuChanged, 'broken', (resources) => {
      const db = idOf(resources, 'AWS::RDS::DBInstance', '/Database/Instance');
      resources[`${db}Renamed`] = resources[db];
      delete resources[db];
      resources[idOf(resources, 'AWS::S3::Bucket', '/LogBucket')].Properties.BucketName = 'a-new-name';
    });
    const run = check('--base-assembly', base, '--assembly', broken);
    expect(run.status, run.output).toBe(1);
    expect(run.output).toContain(`2 stateful resource(s) of ${STACK} would be lost`);
    expect(run.output).toMatch(/AWS::RDS::DBInstance DatabaseInstance\w+ \(EcsSaasBackend-prod\/Database\/Instance\/Resource\) in EcsSaasBackend-prod would be deleted/);
    expect(run.output).toMatch(/AWS::S3::Bucket LogBucket\w+ \(EcsSaasBackend-prod\/LogBucket\/Resource\) in EcsSaasBackend-prod would be replaced: BucketName changed/);
  });

  it('passes a loss a team acknowledged by its logical id, still naming it, and fails on the others', () => {
    const ids = [...check('--base-assembly', base, '--assembly', broken).output.matchAll(/AWS::\S+ (\w+) \(/g)].map((m) => m[1]!);
    const [db, bucket] = [ids.find((id) => id.startsWith('DatabaseInstance'))!, ids.find((id) => id.startsWith('LogBucket'))!];
    const both = check('--base-assembly', base, '--assembly', broken, '--acknowledge', db, '--acknowledge', `${STACK}/${bucket}`);
    expect(both.status, both.output).toBe(0);
    expect(both.output).toMatch(new RegExp(`acknowledged: AWS::RDS::DBInstance ${db} .* would be deleted`));
    expect(both.output).toContain(`only the 2 acknowledged stateful resource(s) of ${STACK} would be lost`);
    const one = check('--base-assembly', base, '--assembly', broken, '--acknowledge', db);
    expect(one.status, one.output).toBe(1);
    expect(one.output).toContain(`1 stateful resource(s) of ${STACK} would be lost`);
    expect(one.output).toMatch(new RegExp(`- AWS::S3::Bucket ${bucket} `));
    // An acknowledgement for another deploy must not quietly cover this one.
    const stale = check('--base-assembly', base, '--assembly', cpuChanged, '--acknowledge', db);
    expect(stale.status, stale.output).toBe(1);
    expect(stale.output).toContain(`--acknowledge ${db}: no stateful resource of that id would be lost`);
  });

  it('looks into the nested stacks: a job stack that goes takes its resources with it', () => {
    // A stateful resource in a job's stack, then that stack's removal from the new side.
    const dir = edited(base, 'nested', (resources) => {
      resources.Checkpoints = { Type: 'AWS::Logs::LogGroup', Properties: {}, Metadata: { 'aws:cdk:path': 'job/Checkpoints' } };
    }, jobTemplateFile);
    const gone = edited(base, 'gone', (resources) => {
      for (const [id, r] of Object.entries(resources)) if (r.Type === 'AWS::CloudFormation::Stack' && r.Metadata['aws:asset:path'] === jobTemplateFile) delete resources[id];
    });
    const run = check('--base-assembly', dir, '--assembly', gone);
    expect(run.status, run.output).toBe(1);
    expect(run.output).toMatch(/AWS::Logs::LogGroup Checkpoints \(job\/Checkpoints\) in EcsSaasBackend-prod\/\w+ would be deleted/);
  });

  it('fails a database moved to other subnets (RDS refuses it) and a replaced dead-letter queue, in a job\'s stack', () => {
    const moved = edited(base, 'moved', (resources) => {
      const group = resources[idOf(resources, 'AWS::RDS::DBSubnetGroup', '/Database/')];
      group.Properties.SubnetIds = [...group.Properties.SubnetIds].reverse().slice(1);
    });
    const requeued = edited(moved, 'requeued', (resources) => {
      resources[idOf(resources, 'AWS::SQS::Queue', '/DeadLetterQueue')].Properties.QueueName = 'another-name';
    }, jobTemplateFile);
    const run = check('--base-assembly', base, '--assembly', requeued);
    expect(run.status, run.output).toBe(1);
    expect(run.output).toMatch(/AWS::RDS::DBSubnetGroup \w+ .* would move the database to other subnets, which RDS refuses .*: SubnetIds changed/);
    expect(run.output).toMatch(/AWS::SQS::Queue DeadLetterQueue\w+ \(.*\/DeadLetterQueue\/Resource\) in EcsSaasBackend-prod\/\w+ would be replaced: QueueName changed/);
  });

  it('passes a loss recorded in an acknowledgements file with its reason, only for that resource lost that way', () => {
    const recorded = path.join(work, 'recorded.json');
    const renamedBucket = edited(base, 'renamed-bucket', (resources) => {
      resources[idOf(resources, 'AWS::S3::Bucket', '/LogBucket')].Properties.BucketName = 'a-new-name';
    });
    const bucket = idOf(JSON.parse(readFileSync(path.join(base, `${STACK}.template.json`), 'utf8')).Resources, 'AWS::S3::Bucket', '/LogBucket');
    const entry = { stack: STACK, logicalId: bucket, type: 'AWS::S3::Bucket', because: ['BucketName'], reason: 'the logs were copied to the new bucket' };
    writeFileSync(recorded, JSON.stringify([entry, { ...entry, logicalId: 'SomethingElse' }]));
    const run = check('--base-assembly', base, '--assembly', renamedBucket, '--acknowledgements', recorded);
    expect(run.status, run.output).toBe(0);
    expect(run.output).toMatch(new RegExp(`acknowledged in .*recorded\\.json: AWS::S3::Bucket ${bucket} .* would be replaced: BucketName changed \\(the logs were copied to the new bucket\\)`));
    expect(run.output).toContain('1 entry of');
    // The same resource lost another way is not covered.
    writeFileSync(recorded, JSON.stringify([{ ...entry, because: ['ObjectLockEnabled'] }]));
    expect(check('--base-assembly', base, '--assembly', renamedBucket, '--acknowledgements', recorded).status).toBe(1);
    writeFileSync(recorded, JSON.stringify([{ ...entry, reason: '' }]));
    const bad = check('--base-assembly', base, '--assembly', renamedBucket, '--acknowledgements', recorded);
    expect(bad.status).toBe(2);
    expect(bad.output).toContain('entry 0: reason must be a non-empty string, got ""');
  });

  it('refuses bad arguments and a ref git does not know with exit 2 and one line, no stack trace', () => {
    const none = check();
    expect(none.status).toBe(2);
    expect(none.output).toContain('give exactly one of --base, --deployed-stack and --base-assembly');
    const badRef = check('--base', 'no-such-ref-anywhere', '--assembly', base);
    expect(badRef.status).toBe(2);
    expect(badRef.output).toContain('cannot read git ref "no-such-ref-anywhere"');
    expect(badRef.output).not.toMatch(/\n\s+at /);
  });

  it('counts the database, its groups, secrets, keys, buckets, log groups and queues as stateful', () => {
    for (const type of ['AWS::RDS::DBInstance', 'AWS::RDS::DBSubnetGroup', 'AWS::RDS::DBParameterGroup', 'AWS::SecretsManager::Secret', 'AWS::KMS::Key', 'AWS::S3::Bucket', 'AWS::Logs::LogGroup', 'AWS::SQS::Queue']) {
      expect(STATEFUL_TYPES).toContain(type);
    }
  });
});
