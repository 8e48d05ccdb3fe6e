#!/usr/bin/env node
/**
 * `npm run check:updates [-- --only <text>]`: synthesizes both sides of every update users make
 * (lib/update-transitions.ts), in this process, and judges each with the CDK's diff
 * (lib/constructs/update-plan.ts): prints each transition's plan, and fails when one would
 * create a resource whose fixed name or port another still holds, change the production
 * listener rule, or replace a stateful resource. A transition marked `unsafe` (documented, with
 * what to do instead) must be judged unsafe, so the mark cannot go stale. `--only` runs the
 * transitions whose name contains the text.
 *
 * Exit codes: 0 every update is judged as expected; 1 one or more are not; 2 bad arguments, or a side could not
 * be synthesized.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { TemplateSet } from '../lib/constructs/stateful-changes.js';
import { synthesizeSettings } from '../lib/constructs/synth-settings.js';
import { describeStep, judgeUpdate } from '../lib/constructs/update-plan.js';
import { TRANSITIONS, type StackSettings } from '../lib/update-transitions.js';

function main(argv: string[]): number {
  const { values } = parseArgs({ args: argv, options: { only: { type: 'string' } } });
  const transitions = TRANSITIONS.filter((t) => values.only === undefined || t.name.includes(values.only));
  if (transitions.length === 0) {
    console.error(`check:updates: no transition's name contains ${JSON.stringify(values.only)}; they are:\n${TRANSITIONS.map((t) => `  ${t.name}`).join('\n')}`);
    return 2;
  }
  const work = mkdtempSync(path.join(os.tmpdir(), 'check-updates-'));
  const now = new Date();
  // Most transitions start from the same settings: each distinct side is synthesized once.
  const synthesized = new Map<string, TemplateSet>();
  const templatesOf = (side: StackSettings) => {
    const key = JSON.stringify(side);
    if (!synthesized.has(key)) synthesized.set(key, synthesizeSettings(side, path.join(work, String(synthesized.size)), now));
    return synthesized.get(key)!;
  };
  try {
    let failed = 0;
    for (const transition of transitions) {
      const { plan, findings } = judgeUpdate(templatesOf(transition.before), templatesOf(transition.after));
      const verdict = findings.length === 0 ? (transition.unsafe ? 'STALE ' : 'safe  ') : (transition.unsafe ? 'known ' : 'UNSAFE');
      console.log(`\n${verdict} ${transition.name}: ${plan.length} resource(s) change`);
      for (const step of plan) console.log(`    ${describeStep(step)}`);
      for (const finding of findings) console.log(`  ✗ ${finding.message}`);
      if (transition.unsafe && findings.length > 0) console.log(`  known unsafe in one deploy: ${transition.unsafe}`);
      if (transition.unsafe && findings.length === 0) console.log('  ✗ marked unsafe in lib/update-transitions.ts, but found safe: remove the mark (and the docs\' warning)');
      if ((findings.length > 0) !== (transition.unsafe !== undefined)) failed += 1;
    }
    console.log(failed === 0
      ? `\ncheck:updates: all ${transitions.length} update(s) judged as expected (${transitions.filter((t) => t.unsafe).length} known unsafe in one deploy, documented)`
      : `\ncheck:updates: ${failed} of ${transitions.length} update(s) would fail or misroute traffic, or are marked unsafe but are not (docs/infrastructure.md, "Update paths")`);
    return failed === 0 ? 0 : 1;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

// A setting synth refuses is the user's to fix: one message, no stack trace.
try {
  process.exit(main(process.argv.slice(2)));
} catch (err) {
  console.error(`check:updates: ${(err as Error).message}`);
  process.exit(2);
}
