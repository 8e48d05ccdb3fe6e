/**
 * The GitHub workflows: valid for GitHub's schema (action-validator, a real linter), CI runs
 * what .ci/run runs, the deploy workflow deploys only main after its CI passed, with OIDC, one
 * job per stage and a plan before prod's gate, every action pinned by commit; and the deploy
 * role admits only main's deploy workflow.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { STAGES } from '../../lib/defaults.js';
import { DEPLOY_WORKFLOW, DeployRoleStack, deployRoleName, deploySubject, OPERATOR_KEY_TAG, planRoleName } from '../../lib/constructs/deploy-role.js';
import { REPO_ROOT } from '../../lib/constructs/stack.js';
import { errorMessage, newApp } from './synth.js';

const WORKFLOWS = path.join(REPO_ROOT, '.github/workflows');
const read = (file: string) => readFileSync(path.join(WORKFLOWS, file), 'utf8');
const VALIDATOR = path.join(REPO_ROOT, 'node_modules/.bin/action-validator');

/** A workflow's jobs, each as its text, by id. */
function jobsOf(workflow: string): Record<string, string> {
  const jobs = workflow.slice(workflow.indexOf('\njobs:\n') + 7);
  return Object.fromEntries(jobs.split(/^(?= {2}[\w-]+:$)/m).filter((j) => /^ {2}[\w-]+:$/m.test(j)).map((j) => [/^ {2}([\w-]+):/.exec(j)![1]!, j]));
}

describe('the workflow files', () => {
  it.each(readdirSync(WORKFLOWS))('%s passes action-validator', (file) => {
    const run = spawnSync(VALIDATOR, [path.join(WORKFLOWS, file)], { encoding: 'utf8' });
    expect(run.status, run.stdout + run.stderr).toBe(0);
  });

  it('are checked by a linter that does catch a mistake', () => {
    const run = spawnSync(VALIDATOR, [path.join(REPO_ROOT, 'test/fixtures/bad-workflow.yml')], { encoding: 'utf8' });
    expect(run.status).toBe(1);
    expect(run.stdout + run.stderr).toContain("Additional property 'step' is not allowed");
  });

  it('CI runs the install and test commands, both stages\' synth with cdk-nag, the guard rules and the linter', () => {
    const ci = read('ci.yml');
    for (const command of ['npm ci', 'npm test', '-c stage=dev', '-c stage=prod', 'npm run check:guard', 'npm run lint:workflows', 'npm run check:updates']) {
      expect(ci, command).toContain(`- run: ${command.startsWith('-c') ? 'npx cdk synth --quiet -c alertEmail=none ' + command : command}`);
    }
    const local = readFileSync(path.join(REPO_ROOT, '.ci/run'), 'utf8');
    for (const command of ['npm ci', 'npm test', 'npm run check:guard', 'npm run lint:workflows', 'npm run check:updates']) expect(local, command).toContain(command);
    // The stateful guard, for both stages, against the last commit whose CI passed, which the checkout must hold.
    for (const file of [ci, local]) {
      expect(file).toContain('base="$(.ci/base-ref)"');
      expect(file).toContain('npm run check:stateful -- --base "$base" -c stage=dev');
      expect(file).toContain('npm run check:stateful -- --base "$base"\n');
    }
    expect(ci).toMatch(/fetch-depth: 0/);
    expect(ci).toMatch(/^ {2}actions: read$/m);
  });

  it.each(readdirSync(WORKFLOWS))('%s pins every action by its full commit SHA, with its version in a comment', (file) => {
    const uses = [...read(file).matchAll(/^\s*(?:- )?uses: (.*)$/gm)].map((m) => m[1]!);
    expect(uses.length).toBeGreaterThan(0);
    for (const use of uses) expect(use).toMatch(/^[\w.-]+\/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$/);
  });

  it('deploys only a commit of main whose CI passed: that very commit, not main\'s tip', () => {
    const deploy = read('deploy.yml');
    expect(deploy).toMatch(/^on:\n {2}workflow_run:\n {4}workflows: \[ci\]\n {4}types: \[completed\]\n {4}branches: \[main\]\n\n/m);
    expect(deploy).not.toMatch(/^ {2}(push|workflow_dispatch|pull_request\w*):/m);
    for (const condition of ["conclusion == 'success'", "event == 'push'", "head_branch == 'main'", 'head_repository.full_name == github.repository']) {
      expect(deploy).toContain(`github.event.workflow_run.${condition}`);
    }
    const checkouts = deploy.match(/uses: actions\/checkout@.*\n {8}with:\n {10}ref: \$\{\{ github\.event\.workflow_run\.head_sha \}\}/g) ?? [];
    expect(checkouts).toHaveLength(deploy.match(/uses: actions\/checkout@/g)!.length);
    // Every later job waits for the build, so the condition on it holds for all.
    expect(deploy).toMatch(/^ {2}dev:\n {4}needs: build$/m);
    expect(deploy).toMatch(/^ {2}plan:\n {4}needs: dev$/m);
  });

  it('smoke-tests each stage right after its deploy', () => {
    const deploy = read('deploy.yml');
    for (const stage of ['dev', 'prod']) {
      const deployAt = deploy.search(new RegExp(`npx cdk deploy [^\\n]*-c stage=${stage}`));
      const smokeAt = deploy.indexOf(`npm run smoke -- --stage ${stage}`);
      expect(deployAt, stage).toBeGreaterThan(-1);
      expect(smokeAt, stage).toBeGreaterThan(deployAt);
    }
  });

  it('has one concurrency group per environment, so a pending prod approval never blocks dev', () => {
    const deploy = read('deploy.yml');
    expect(deploy).not.toMatch(/^concurrency:/m);
    const groups = [...deploy.matchAll(/^ {4}concurrency:\n {6}group: (.*)$/gm)].map((m) => m[1]);
    expect(groups).toEqual(['deploy-dev', 'plan-prod', 'deploy-prod']);
  });

  it('shows prod\'s diff and runs the stateful check before the approval gate, with the read-only role', () => {
    const deploy = read('deploy.yml');
    const plan = deploy.slice(deploy.indexOf('\n  plan:'), deploy.indexOf('\n  prod:'));
    expect(plan).not.toMatch(/^ {4}environment:/m);
    expect(plan).toContain(`role/${planRoleName('prod')}`);
    expect(plan).toContain('npx cdk diff --no-change-set -c stage=prod');
    expect(plan).toContain('npm run check:stateful -- --deployed-stack EcsSaasBackend-prod -c stage=prod');
    expect(deploy).toMatch(/^ {2}prod:\n {4}needs: plan$/m);
  });

  it('installs the dependencies (and so runs their install scripts) only in a job that cannot mint a token; the jobs that can only unpack its build', () => {
    const jobs = jobsOf(read('deploy.yml'));
    expect(Object.keys(jobs)).toEqual(['build', 'dev', 'plan', 'prod']);
    expect(jobs.build).toMatch(/^ {4}permissions:\n {6}contents: read\n {4}\w/m);
    expect(jobs.build).toContain('- run: npm ci');
    expect(jobs.build).toMatch(/uses: actions\/upload-artifact@.*\n {8}with:\n {10}name: workspace\n/);
    for (const name of ['dev', 'plan', 'prod']) {
      const job = jobs[name]!;
      expect(job, name).toMatch(/^ {4}permissions:\n {6}contents: read\n {6}id-token: write$/m);
      expect(job, name).not.toMatch(/npm (ci|install|i\b)|yarn|pnpm|actions\/checkout|actions\/cache|cache:/);
      expect(job, name).toMatch(/uses: actions\/download-artifact@.*\n {8}with:\n {10}name: workspace\n/);
    }
  });

  it('deploys nothing but main\'s head, so re-running an old run cannot put an old commit back', () => {
    const jobs = jobsOf(read('deploy.yml'));
    for (const name of ['dev', 'prod']) {
      const job = jobs[name]!;
      const gate = job.indexOf('name: The commit is still main\'s head');
      expect(gate, name).toBeGreaterThan(0);
      // Before any credentials are taken.
      expect(gate, name).toBeLessThan(job.indexOf('configure-aws-credentials'));
    }
    // The gate's script, run as the step runs it, against a stand-in for `gh api`.
    const script = /name: The commit is still main's head\n {8}run: \|\n((?: {10}.*\n)+)/.exec(jobs.dev!)![1]!.replace(/^ {10}/gm, '');
    const gateRun = (mainHead: string, sha: string) => spawnSync('bash', ['-euo', 'pipefail', '-c', `gh() { echo ${mainHead}; }\n${script}`], { encoding: 'utf8', env: { ...process.env, SHA: sha, GITHUB_REPOSITORY: 'acme/ecs-saas-backend' } });
    expect(gateRun('a'.repeat(40), 'a'.repeat(40)).status).toBe(0);
    const old = gateRun('b'.repeat(40), 'a'.repeat(40));
    expect(old.status).toBe(1);
    expect(old.stdout).toContain(`${'a'.repeat(40)} is no longer the head of main (${'b'.repeat(40)} is)`);
  });

  it('deploys the same environment-agnostic template as a laptop: no account or region context', () => {
    expect(read('deploy.yml')).not.toMatch(/-c (account|region)=/);
  });

  it('deploys with GitHub OIDC and no stored keys, one job per stage, prod after dev behind its environment', () => {
    const deploy = read('deploy.yml');
    expect(deploy).toMatch(/^permissions:\n {2}contents: read\n\n/m);
    expect(deploy).not.toMatch(/secrets\.|aws-access-key-id|aws-secret-access-key/i);
    for (const stage of STAGES) {
      expect(deploy).toMatch(new RegExp(`^ {2}${stage}:\\n(?: {4}.*\\n)*? {4}environment: ${stage}$`, 'm'));
      expect(deploy).toContain(`role/${deployRoleName(stage)}`);
      expect(deploy).toContain(`-c stage=${stage}`);
    }
  });
});

describe('the deploy role', () => {
  const app = newApp();
  const stack = new DeployRoleStack(app, 'DeployRole', { githubRepo: 'acme/ecs-saas-backend', stage: 'prod' });
  const template = Template.fromStack(stack);

  it('trusts only GitHub\'s OIDC tokens of main\'s deploy workflow of that repository, in the stage\'s environment', () => {
    const [role] = Object.values(template.findResources('AWS::IAM::Role', { Properties: { RoleName: deployRoleName('prod') } }));
    expect(role!.Properties).toMatchObject({
      RoleName: deployRoleName('prod'),
      AssumeRolePolicyDocument: {
        Statement: [{
          Action: 'sts:AssumeRoleWithWebIdentity',
          Effect: 'Allow',
          Principal: { Federated: { Ref: expect.stringMatching(/^GitHub/) } },
          Condition: { StringEquals: { 'token.actions.githubusercontent.com:aud': 'sts.amazonaws.com', 'token.actions.githubusercontent.com:sub': 'repo:acme/ecs-saas-backend:environment:prod:job_workflow_ref:acme/ecs-saas-backend/.github/workflows/deploy.yml@refs/heads/main' } },
        }],
      },
    });
    // The subject GitHub writes for a branch's copy of the workflow, or under the default template, is another string.
    expect(deploySubject('acme/ecs-saas-backend', { environment: 'prod' })).toContain(`@${DEPLOY_WORKFLOW.ref}`);
    expect(JSON.stringify(role)).not.toMatch(/StringLike|\*/);
    template.resourceCountIs('AWS::IAM::OIDCProvider', 1);
    template.resourceCountIs('AWS::Lambda::Function', 0);
  });

  it('has a read-only plan role in prod for the job without an environment, main\'s deploy workflow only', () => {
    const [plan] = Object.values(template.findResources('AWS::IAM::Role', { Properties: { RoleName: planRoleName('prod') } }));
    expect(plan!.Properties.AssumeRolePolicyDocument.Statement[0].Condition.StringEquals['token.actions.githubusercontent.com:sub'])
      .toBe('repo:acme/ecs-saas-backend:ref:refs/heads/main:job_workflow_ref:acme/ecs-saas-backend/.github/workflows/deploy.yml@refs/heads/main');
    const [policy] = Object.values(template.findResources('AWS::IAM::Policy', { Properties: { Roles: [{ Ref: stack.getLogicalId(stack.planRole!.node.defaultChild as never) }] } }));
    const actions = policy!.Properties.PolicyDocument.Statement.flatMap((s: { Action: string | string[] }) => s.Action);
    expect(actions.sort()).toEqual(['cloudformation:DescribeStacks', 'cloudformation:GetTemplate', 'cloudformation:ListStackResources', 'sts:AssumeRole', 'sts:TagSession']);
    expect(JSON.stringify(stack.resolve(policy!.Properties.PolicyDocument))).toContain(':role/cdk-hnb659fds-lookup-role-');
    expect(new DeployRoleStack(newApp(), 'Dev', { githubRepo: 'acme/x', stage: 'dev' }).planRole).toBeUndefined();
  });

  it('may only assume the account\'s CDK bootstrap roles, and read what the smoke test needs of its own stage', () => {
    const policies = Object.values(template.findResources('AWS::IAM::Policy', { Properties: { Roles: [{ Ref: stack.getLogicalId(stack.role.node.defaultChild as never) }] } }));
    expect(policies).toHaveLength(1);
    const [statement, ...rest] = policies[0]!.Properties.PolicyDocument.Statement;
    expect(statement.Action).toEqual(['sts:AssumeRole', 'sts:TagSession']);
    const resources = JSON.stringify(stack.resolve(statement.Resource));
    for (const kind of ['deploy', 'file-publishing', 'image-publishing', 'lookup']) expect(resources).toContain(`:role/cdk-hnb659fds-${kind}-role-`);
    const smoke = Object.fromEntries(rest.map((st: { Sid: string }) => [st.Sid, stack.resolve(st)]));
    expect(Object.keys(smoke).sort()).toEqual(['SmokeTestReadsTheOperatorKey', 'SmokeTestReadsTheStackOutputs']);
    expect(smoke.SmokeTestReadsTheStackOutputs.Action).toBe('cloudformation:DescribeStacks');
    expect(JSON.stringify(smoke.SmokeTestReadsTheStackOutputs.Resource)).toContain(':stack/EcsSaasBackend-prod/*');
    expect(smoke.SmokeTestReadsTheOperatorKey.Action).toBe('secretsmanager:GetSecretValue');
    // Only the prod stack's secret tagged as the operator key: no other secret of the account.
    expect(smoke.SmokeTestReadsTheOperatorKey.Condition).toEqual({ StringEquals: { 'aws:ResourceTag/aws:cloudformation:stack-name': 'EcsSaasBackend-prod', [`aws:ResourceTag/${OPERATOR_KEY_TAG.key}`]: OPERATOR_KEY_TAG.value } });
    template.resourceCountIs('AWS::IAM::ManagedPolicy', 0);
  });

  it('rejects a repository that is not owner/name', () => {
    expect(errorMessage(() => new DeployRoleStack(newApp(), 'Bad', { githubRepo: 'https://github.com/acme/x', stage: 'dev' }))).toContain('githubRepo must be owner/name, got "https://github.com/acme/x"');
  });

  it('synthesizes from its own app entry', () => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', 'bin/deploy-role.ts'], {
      cwd: REPO_ROOT,
      env: { ...process.env, CDK_OUTDIR: path.join(REPO_ROOT, 'cdk.out', 'deploy-role-test'), CDK_CONTEXT_JSON: JSON.stringify({ githubRepo: 'acme/x', stage: 'dev' }) },
      encoding: 'utf8',
    });
    expect(out).toBe('');
    expect(readFileSync(path.join(REPO_ROOT, 'cdk.out/deploy-role-test/EcsSaasBackend-dev-deploy-role.template.json'), 'utf8')).toContain(deployRoleName('dev'));
    // A fresh process loading aws-cdk-lib through tsx: past a minute on a loaded two-core machine.
  }, 240_000);
});
