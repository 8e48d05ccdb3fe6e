#!/usr/bin/env node
/**
 * `npm run check:stateful -- --base <git-ref> [-c key=value ...]`: fails when deploying the
 * working tree over what `<git-ref>` deployed would replace or delete a stateful resource
 * (lib/constructs/stateful-changes.ts lists the types), naming each one.
 *
 * The other side may instead be the deployed stack (`--deployed-stack <name>`, its templates
 * read with GetTemplate, nested stacks too) or a synthesized assembly (`--base-assembly <dir>`);
 * `--assembly <dir>` stands in for the working tree's synth. `--out <dir>` keeps the synth outputs.
 * `--acknowledge <LogicalId>` (repeatable) accepts that one loss knowingly: it is still printed,
 * and an acknowledgement that names no loss fails the check. The losses recorded in
 * deploy/acknowledged-losses.json (or `--acknowledgements <file>`), each with its reason, are
 * accepted too, for every base before the change that made them; an entry that matches no loss
 * is only noted, since a stack deployed before it may still need it.
 * The context is cdk.json's plus `-c` (default stage=prod, alertEmail=none, allowHttp=true: prod holds the data).
 *
 * Exit codes: 0 no stateful resource lost, or only acknowledged ones; 1 one or more would be, or
 * an acknowledgement names none; 2 bad arguments, or a side could not be synthesized or read.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { acknowledgeLosses, applyRecordedAcknowledgements, compareTemplateSets, describeLoss, templatesOfAssembly, validateRecordedAcknowledgements, type RecordedAcknowledgement, type TemplateSet } from '../lib/constructs/stateful-changes.js';

// Not lib/constructs/stack.ts's REPO_ROOT: importing the stack would load aws-cdk-lib into a check that only compares JSON.
const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));
// allowHttp: HTTPS settings change no stateful resource, and a team's domain is not ours to know.
const DEFAULT_CONTEXT = { stage: 'prod', alertEmail: 'none', allowHttp: 'true' };
const ASSEMBLY_METADATA = { 'aws:cdk:enable-path-metadata': true, 'aws:cdk:enable-asset-metadata': true };
const USAGE = 'usage: npm run check:stateful -- (--base <git-ref> | --deployed-stack <name> | --base-assembly <dir>) [--assembly <dir>] [--out <dir>] [--acknowledge <LogicalId> ...] [--acknowledgements <file>] [-c key=value ...]';
/** The losses the team accepted on purpose, with their reasons (docs/infrastructure.md, The stateful guard). */
const RECORDED_ACKNOWLEDGEMENTS = path.join(REPO_ROOT, 'deploy/acknowledged-losses.json');

/** A failure to run the check at all (exit 2), as opposed to a failed check (exit 1). */
class UsageError extends Error {}

/** Synthesizes the app in `root` into `outdir`, as `cdk synth` would (cdk.json's context, then `context`). */
async function synth(root: string, outdir: string, context: Record<string, string>): Promise<void> {
  const cdkContext = JSON.parse(readFileSync(path.join(root, 'cdk.json'), 'utf8')).context ?? {};
  const child = spawn(process.execPath, ['--import', 'tsx', 'bin/app.ts'], {
    cwd: root,
    // The paths the CDK CLI writes by default: construct paths name the resources, asset paths find the nested templates.
    env: { ...process.env, CDK_OUTDIR: outdir, CDK_CONTEXT_JSON: JSON.stringify({ ...cdkContext, ...ASSEMBLY_METADATA, ...context }) },
    stdio: ['ignore', 'inherit', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk; });
  const code = await new Promise<number | null>((resolve, reject) => child.on('error', reject).on('close', resolve));
  if (code !== 0) throw new UsageError(`synth of ${root} failed (exit ${code}):\n${stderr.trim()}`);
}

/** The files of `ref`, in `dir`, with this checkout's node_modules. */
function checkOut(ref: string, dir: string): void {
  let archive: Buffer;
  try {
    archive = execFileSync('git', ['archive', '--format=tar', ref], { cwd: REPO_ROOT, maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    throw new UsageError(`cannot read git ref ${JSON.stringify(ref)}: ${String((err as { stderr?: Buffer }).stderr ?? err).trim()}`);
  }
  mkdirSync(dir, { recursive: true });
  execFileSync('tar', ['-x', '-C', dir], { input: archive });
  symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
}

/** The recorded acknowledgements in `file`; a missing file records none. */
function readRecorded(file: string): RecordedAcknowledgement[] {
  if (!existsSync(file)) return [];
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new UsageError(`${file} is not valid JSON: ${(err as Error).message}`);
  }
  const problems = validateRecordedAcknowledgements(value);
  if (problems.length > 0) throw new UsageError(`${file}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  return value as RecordedAcknowledgement[];
}

/** The only stack of the assembly at `dir`. */
function stackOf(dir: string): string {
  const manifest = JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as { artifacts: Record<string, { type: string }> };
  const stacks = Object.entries(manifest.artifacts).filter(([, a]) => a.type === 'aws:cloudformation:stack').map(([name]) => name);
  if (stacks.length !== 1) throw new UsageError(`expected one stack in ${dir}, found ${stacks.join(', ') || 'none'}`);
  return stacks[0]!;
}

/** The deployed templates of `stackName` and of its nested stacks, keyed as templatesOfAssembly keys them. */
async function deployedTemplates(stackName: string): Promise<TemplateSet> {
  // Loaded only here: the other sides need no AWS SDK.
  const { CloudFormationClient, GetTemplateCommand, paginateListStackResources } = await import('@aws-sdk/client-cloudformation');
  const cfn = new CloudFormationClient({});
  const set = new Map<string, Record<string, unknown>>();
  const add = async (key: string, stack: string) => {
    const { TemplateBody } = await cfn.send(new GetTemplateCommand({ StackName: stack, TemplateStage: 'Original' }));
    set.set(key, JSON.parse(TemplateBody ?? '{}'));
    for await (const page of paginateListStackResources({ client: cfn }, { StackName: stack })) {
      for (const r of page.StackResourceSummaries ?? []) {
        if (r.ResourceType === 'AWS::CloudFormation::Stack' && r.PhysicalResourceId && r.LogicalResourceId) await add(`${key}/${r.LogicalResourceId}`, r.PhysicalResourceId);
      }
    }
  };
  try {
    await add(stackName, stackName);
  } catch (err) {
    throw new UsageError(`cannot read the deployed stack ${stackName}: ${(err as Error).message}`);
  }
  return set;
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      base: { type: 'string' },
      'deployed-stack': { type: 'string' },
      'base-assembly': { type: 'string' },
      assembly: { type: 'string' },
      out: { type: 'string' },
      acknowledge: { type: 'string', multiple: true },
      acknowledgements: { type: 'string' },
      context: { type: 'string', short: 'c', multiple: true },
    },
  });
  const sources = [values.base, values['deployed-stack'], values['base-assembly']].filter((v) => v !== undefined);
  if (sources.length !== 1) throw new UsageError(`give exactly one of --base, --deployed-stack and --base-assembly\n${USAGE}`);
  const context: Record<string, string> = { ...DEFAULT_CONTEXT };
  for (const pair of values.context ?? []) {
    const eq = pair.indexOf('=');
    if (eq < 1) throw new UsageError(`-c takes key=value, got ${JSON.stringify(pair)}`);
    context[pair.slice(0, eq)] = pair.slice(eq + 1);
  }

  const recordedFile = values.acknowledgements ? path.resolve(values.acknowledgements) : RECORDED_ACKNOWLEDGEMENTS;
  const recorded = readRecorded(recordedFile);

  const out = values.out ? path.resolve(values.out) : mkdtempSync(path.join(os.tmpdir(), 'check-stateful-'));
  try {
    const newDir = values.assembly ?? path.join(out, 'new');
    const pending: Promise<void>[] = [];
    let baseDir = values['base-assembly'];
    if (values.base !== undefined) {
      const root = path.join(out, 'base-src');
      rmSync(root, { recursive: true, force: true });
      checkOut(values.base, root);
      baseDir = path.join(out, 'base');
      pending.push(synth(root, baseDir, context));
    }
    if (!values.assembly) pending.push(synth(REPO_ROOT, newDir, context));
    // Both sides at once: one synth per core.
    await Promise.all(pending);
    const stackName = stackOf(newDir);
    const after = templatesOfAssembly(newDir, stackName);
    const before = values['deployed-stack'] !== undefined ? await deployedTemplates(values['deployed-stack']) : templatesOfAssembly(baseDir!, stackOf(baseDir!));
    const against = values.base ?? values['deployed-stack'] ?? baseDir!;

    const { losses: all, changedResources } = compareTemplateSets(before, after);
    const fromFile = applyRecordedAcknowledgements(all, recorded);
    const losses = fromFile.remaining;
    const { accepted, remaining, unused } = acknowledgeLosses(losses, values.acknowledge ?? []);
    for (const { loss, reason } of fromFile.accepted) console.log(`check:stateful: acknowledged in ${path.relative(process.cwd(), recordedFile)}: ${describeLoss(loss)} (${reason})`);
    if (fromFile.unused.length > 0) console.log(`check:stateful: ${fromFile.unused.length} entr${fromFile.unused.length === 1 ? 'y' : 'ies'} of ${path.relative(process.cwd(), recordedFile)} name no loss against ${against} (kept for stacks deployed before them)`);
    for (const loss of accepted) console.log(`check:stateful: acknowledged: ${describeLoss(loss)}`);
    if (remaining.length > 0) {
      console.error(`check:stateful: ${remaining.length} stateful resource(s) of ${stackName} would be lost against ${against}:`);
      for (const loss of remaining) console.error(`  - ${describeLoss(loss)}`);
      console.error('Keep the construct ids and the replacing properties of these resources, or migrate the data first and acknowledge each with --acknowledge <LogicalId> (docs/infrastructure.md, The stateful guard).');
    }
    if (unused.length > 0) {
      console.error(`check:stateful: --acknowledge ${unused.join(', ')}: no stateful resource of that id would be lost against ${against}; remove the acknowledgement (the losses are: ${losses.map((l) => l.logicalId).join(', ') || 'none'})`);
    }
    if (remaining.length > 0 || unused.length > 0) return 1;
    const acceptedCount = accepted.length + fromFile.accepted.length;
    console.log(acceptedCount > 0
      ? `check:stateful: only the ${acceptedCount} acknowledged stateful resource(s) of ${stackName} would be lost against ${against} (${changedResources} resource(s) changed)`
      : `check:stateful: no stateful resource of ${stackName} replaced or deleted against ${against} (${changedResources} resource(s) changed)`);
    return 0;
  } finally {
    if (!values.out) rmSync(out, { recursive: true, force: true });
    else if (existsSync(path.join(out, 'base-src'))) rmSync(path.join(out, 'base-src'), { recursive: true, force: true });
  }
}

// Every failure is the user's to act on (a bad ref, a setting synth refuses, no credentials): one message, no stack trace.
main(process.argv.slice(2)).then((code) => process.exit(code), (err: unknown) => {
  console.error(`check:stateful: ${(err as Error).message}`);
  process.exit(2);
});
