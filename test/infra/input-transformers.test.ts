import { describe, expect, it } from 'vitest';
import { inputTransformers, renderInputTransformer, type InputTransformer } from '../helpers/input-transformer.js';
import { synth } from './synth.js';

/** A value with everything that breaks a JSON string spliced in unescaped. */
const NASTY = 'CannotPullContainerError: pull "repo/app:v1" failed \\ C:\\tmp\n\tsecond line </script>';
/** Fields EventBridge itself writes, always in their documented format. */
const SERVICE_FIELDS: Record<string, unknown> = { $: undefined, '$.time': '2026-01-05T03:00:00Z', '$.id': '7bf73129-1428-4cd3-a780-95db273d1602', '$.account': '123456789012', '$.region': 'eu-west-1' };

/** An event in which every path the transformer reads holds NASTY (or a service field's real value). */
function eventFor(transformer: InputTransformer): Record<string, unknown> {
  const event: Record<string, unknown> = {};
  for (const path of Object.values(transformer.InputPathsMap ?? {})) {
    const steps = [...path.slice(1).matchAll(/\.([^.[\]]+)|\[(\d+)\]/g)].map((m) => m[1] ?? Number(m[2]));
    let node: any = event;
    steps.forEach((step, i) => {
      const last = i === steps.length - 1;
      const next = typeof steps[i + 1] === 'number' ? [] : {};
      if (last) node[step] = path in SERVICE_FIELDS ? SERVICE_FIELDS[path] : NASTY;
      else node = node[step] ??= next;
    });
  }
  return event;
}

/** A template whose tokens (Fn::Join of references) are written out as plain text. */
function plain(template: unknown): string {
  if (typeof template === 'string') return template;
  const join = (template as { 'Fn::Join': [string, unknown[]] })['Fn::Join'];
  if (join) return join[1].map((part) => (typeof part === 'string' ? part : 'resolved-reference')).join(join[0]);
  throw new Error(`unexpected InputTemplate ${JSON.stringify(template)}`);
}

describe('the input transformer renderer (EventBridge semantics)', () => {
  it('inserts a value unescaped inside quotes and as JSON outside them', () => {
    const transformer = { InputPathsMap: { r: '$.detail.reason' }, InputTemplate: '{"quoted":"Reason: <r>","whole":<r>}' };
    const text = renderInputTransformer(transformer, { detail: { reason: 'say "hi"' } });
    expect(text).toBe('{"quoted":"Reason: say "hi"","whole":"say \\"hi\\""}');
    expect(() => JSON.parse(text)).toThrow();
  });

  it('inserts null for a path that selects nothing, outside quotes', () => {
    expect(renderInputTransformer({ InputPathsMap: { r: '$.detail.none' }, InputTemplate: '{"r":<r>}' }, {})).toBe('{"r":null}');
  });
});

describe('every input transformer of the stack', () => {
  const { template } = synth();
  const transformers = inputTransformers(template.toJSON());

  it('finds the alert messages', () => {
    expect(transformers.size).toBeGreaterThan(0);
  });

  it('builds valid JSON that keeps each event field intact, whatever quotes, backslashes and newlines it holds', () => {
    for (const [where, raw] of transformers) {
      const transformer = { ...raw, InputTemplate: plain(raw.InputTemplate) };
      const text = renderInputTransformer(transformer, eventFor(transformer));
      let parsed: unknown;
      expect(() => { parsed = JSON.parse(text); }, `${where} renders invalid JSON:\n${text}`).not.toThrow();
      const fields = Object.values(transformer.InputPathsMap ?? {}).filter((p) => !(p in SERVICE_FIELDS));
      if (fields.length > 0) expect(JSON.stringify(parsed), where).toContain(JSON.stringify(NASTY));
    }
  });
});
