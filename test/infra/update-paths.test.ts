/**
 * `npm run check:updates` and its judge (lib/constructs/update-plan.ts): the move from HTTP to
 * HTTPS, judged on the templates as synthesized and on the same templates with the listener ids
 * the stack had before they were made stable; the production listener rule the same before and
 * after; and the command itself on the HTTPS transitions.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../lib/constructs/stack.js';
import type { TemplateSet } from '../../lib/constructs/stateful-changes.js';
import { synthesizeSettings } from '../../lib/constructs/synth-settings.js';
import { judgeUpdate } from '../../lib/constructs/update-plan.js';
import { TRANSITIONS } from '../../lib/update-transitions.js';
import { NOW } from './synth.js';

const PROD_HTTPS = TRANSITIONS.find((t) => t.name.startsWith('prod: HTTP (allowHttp) to HTTPS'))!;
let work: string;
let before: TemplateSet;
let after: TemplateSet;

type Resources = Record<string, { Type: string; Properties: Record<string, any>; DependsOn?: string[] }>;
const parent = (set: TemplateSet) => [...set.entries()].find(([key]) => !key.includes('/'))!;
const resourcesOf = (set: TemplateSet) => parent(set)[1].Resources as Resources;
const idsOf = (set: TemplateSet, type: string) => Object.entries(resourcesOf(set)).filter(([, r]) => r.Type === type).map(([id]) => id);

/** `set` with its parent template edited: resources renamed everywhere (references too), then `edit`. */
function edited(set: TemplateSet, renames: Record<string, string>, edit: (resources: Resources) => void = () => {}): TemplateSet {
  const [key, template] = parent(set);
  let text = JSON.stringify(template);
  for (const [from, to] of Object.entries(renames)) text = text.replaceAll(`"${from}"`, `"${to}"`);
  const copy = JSON.parse(text);
  edit(copy.Resources);
  return new Map([...set, [key, copy]]);
}

describe('update paths', () => {
  beforeAll(() => {
    work = mkdtempSync(path.join(os.tmpdir(), 'update-paths-test-'));
    before = synthesizeSettings(PROD_HTTPS.before, path.join(work, 'before'), NOW);
    after = synthesizeSettings(PROD_HTTPS.after, path.join(work, 'after'), NOW);
  }, 300_000);
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('moves prod from HTTP to HTTPS in place: the serving listener goes from 80 to 443, the redirect waits for it', () => {
    const { plan, findings } = judgeUpdate(before, after);
    expect(findings).toEqual([]);
    const [serving] = idsOf(before, 'AWS::ElasticLoadBalancingV2::Listener');
    expect(plan).toContainEqual(expect.objectContaining({ logicalId: serving, action: 'update', properties: expect.arrayContaining(['Port', 'Protocol']) }));
    const redirect = idsOf(after, 'AWS::ElasticLoadBalancingV2::Listener').find((id) => id !== serving)!;
    expect(resourcesOf(after)[redirect]).toMatchObject({ Properties: { Port: 80 }, DependsOn: expect.arrayContaining([serving]) });
    expect(plan.filter((s) => s.action !== 'add' && s.action !== 'update')).toEqual([]);
  });

  it('fails the same move with the listener ids the stack had before: a second listener on port 80, created before the first goes', () => {
    // What the stack synthesized before: the HTTP listener and its target group under an id of their own.
    const [serving] = idsOf(before, 'AWS::ElasticLoadBalancingV2::Listener');
    const group = idsOf(before, 'AWS::ElasticLoadBalancingV2::TargetGroup').find((id) => id.includes('ApiGroup'))!;
    const old = edited(before, { [serving!]: 'ApiLoadBalancerHttp1ABC2DEF', [group]: 'ApiLoadBalancerHttpApiGroup3ABC4DEF' });
    const { findings } = judgeUpdate(old, after);
    expect(findings).toContainEqual(expect.objectContaining({
      kind: 'collision',
      message: expect.stringMatching(/Listener ApiLoadBalancerRedirect80To443\w+ in EcsSaasBackend-prod would be created \(add\) while ApiLoadBalancerHttp1ABC2DEF in EcsSaasBackend-prod, deleted only afterwards, still holds .*Port=80/),
    }));
    // The production listener rule would move to the new listener: replaced, with the template's weights.
    expect(findings).toContainEqual(expect.objectContaining({ kind: 'production-rule', message: expect.stringMatching(/would replace \(.*ListenerArn/) }));
  });

  it('keeps the production listener rule\'s properties identical across the move, and fails any change to them', () => {
    // The rules the service names for ECS to shift: production and test.
    const [service] = idsOf(before, 'AWS::ECS::Service');
    const advanced = resourcesOf(before)[service!]!.Properties.LoadBalancers.map((lb: any) => lb.AdvancedConfiguration).find(Boolean);
    const rule = [advanced.ProductionListenerRule.Ref as string];
    for (const id of [rule[0]!, advanced.TestListenerRule?.Ref].filter(Boolean)) expect(resourcesOf(after)[id], id).toEqual(resourcesOf(before)[id]);
    // What a weight written into the template would do on the next deploy.
    const reweighted = edited(after, {}, (r) => { r[rule[0]!]!.Properties.Actions[0].ForwardConfig.TargetGroups[0].Weight = 50; });
    expect(judgeUpdate(after, reweighted).findings).toEqual([expect.objectContaining({ kind: 'production-rule', logicalId: rule[0], message: expect.stringContaining('would be updated (Actions)') })]);
  });

  it('fails a replaced stateful resource', () => {
    const [db] = idsOf(after, 'AWS::RDS::DBInstance');
    const renamed = edited(after, {}, (r) => { r[db!]!.Properties.DBName = 'other'; });
    expect(judgeUpdate(after, renamed).findings).toEqual([expect.objectContaining({ kind: 'stateful-replaced', logicalId: db, message: expect.stringContaining('(DBName changed)') })]);
  });

  it('npm run check:updates prints each transition\'s plan and passes the HTTPS move; an unknown --only is exit 2', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'bin/check-updates.ts', '--only', 'dev: HTTP to HTTPS'], { cwd: REPO_ROOT, encoding: 'utf8' });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/safe {3}dev: HTTP to HTTPS \(a domain\): \d+ resource\(s\) change\n(\s+(add|update) .*\n)+/);
    expect(run.stdout).toMatch(/update\s+AWS::ElasticLoadBalancingV2::Listener \w+ \[Port, Protocol/);
    expect(run.stdout).toContain('check:updates: all 1 update(s) judged as expected');
    const none = spawnSync(process.execPath, ['--import', 'tsx', 'bin/check-updates.ts', '--only', 'no such transition'], { cwd: REPO_ROOT, encoding: 'utf8' });
    expect(none.status).toBe(2);
    expect(none.stderr).toContain('no transition\'s name contains "no such transition"');
  });
});
