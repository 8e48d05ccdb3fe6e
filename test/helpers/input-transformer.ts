/**
 * EventBridge's InputTransformer, as the service applies it, so tests can render a rule
 * target's template for an event and check what the target would receive.
 *
 * The rules (EventBridge User Guide, "Transforming target input"):
 * - each `<name>` of InputPathsMap is replaced by the value its JSON path selects;
 * - inside a quoted JSON string of the template the value is inserted as it is, with no
 *   escaping (so a `"` in the value ends the string early);
 * - outside quotes the value is inserted as JSON (a string arrives quoted and escaped);
 * - a path that selects nothing inserts nothing inside quotes and `null` outside;
 * - the predefined `<aws.events.event>` / `<aws.events.event.json>` insert the whole event
 *   (as JSON), `<aws.events.rule-arn>`, `<aws.events.rule-name>` and `<aws.events.event.ingestion-time>` their values.
 */

export interface InputTransformer {
  readonly InputPathsMap?: Record<string, string>;
  readonly InputTemplate: string;
}

/** The value `path` (`$.detail.a`, `$.resources[0]`, `$`) selects in `event`, or undefined. */
export function selectPath(event: unknown, path: string): unknown {
  if (!path.startsWith('$')) throw new Error(`input path must start with $, got ${path}`);
  const steps = [...path.slice(1).matchAll(/\.([^.[\]]+)|\[(\d+)\]/g)].map((m) => m[1] ?? Number(m[2]));
  let value: unknown = event;
  for (const step of steps) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string | number, unknown>)[step];
  }
  return value;
}

/** The text the target receives for `event` (the rendered template). */
export function renderInputTransformer(transformer: InputTransformer, event: Record<string, unknown>, rule = { arn: 'arn:aws:events:eu-west-1:123456789012:rule/r', name: 'r' }): string {
  const values: Record<string, unknown> = {
    'aws.events.event': event,
    'aws.events.event.json': event,
    'aws.events.rule-arn': rule.arn,
    'aws.events.rule-name': rule.name,
    'aws.events.event.ingestion-time': event.time,
  };
  for (const [name, path] of Object.entries(transformer.InputPathsMap ?? {})) values[name] = selectPath(event, path);

  let out = '';
  let inString = false;
  const template = transformer.InputTemplate;
  for (let i = 0; i < template.length; i++) {
    const c = template[i]!;
    if (c === '<') {
      const end = template.indexOf('>', i);
      const name = end > i ? template.slice(i + 1, end) : '';
      if (name in values) {
        const value = values[name];
        if (inString) out += value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
        else out += value === undefined ? 'null' : JSON.stringify(value);
        i = end;
        continue;
      }
    }
    if (c === '\\' && inString) {
      out += c + (template[i + 1] ?? '');
      i++;
      continue;
    }
    if (c === '"') inString = !inString;
    out += c;
  }
  return out;
}

/** Every InputTransformer of every rule target in a synthesized template, by `<rule logical id>/<target id>`. */
export function inputTransformers(template: { Resources?: Record<string, { Type: string; Properties?: any }> }): Map<string, InputTransformer> {
  const found = new Map<string, InputTransformer>();
  for (const [id, resource] of Object.entries(template.Resources ?? {})) {
    if (resource.Type !== 'AWS::Events::Rule') continue;
    for (const target of resource.Properties?.Targets ?? []) {
      if (target.InputTransformer) found.set(`${id}/${target.Id}`, target.InputTransformer);
    }
  }
  return found;
}
