/**
 * A picture of a dashboard, drawn from its body as the synthesized template holds it: each
 * widget's box where CloudWatch places it (24 columns), its title, and what it plots (each
 * metric's label and statistic, or each alarm's name). docs/api-dashboard.svg is this picture
 * of the API's dashboard (`npm run docs:dashboard`); a test redraws it from the template and
 * compares, so the picture cannot drift from the stack.
 */

/** Where the API dashboard's picture is, and its title. */
export const API_DASHBOARD_PICTURE = new URL('../docs/api-dashboard.svg', import.meta.url);
export const API_DASHBOARD_TITLE = 'The API dashboard (<stack>-api)';

/** A template's resources, as CloudFormation holds them. */
type Resources = Record<string, { Type: string; Properties?: Record<string, any> }>;

const COLUMN = 40;
const ROW = 36;
const LINE = 16;
const FONT = 'font-family="Helvetica, Arial, sans-serif"';

/** The body of the dashboard named `<stack>-<suffix>`, its references written as names; the stack's name reads `<stack>`. */
export function dashboardBody(resources: Resources, stackName: string, suffix: string): Record<string, any> {
  const entry = Object.values(resources).find((r) => r.Type === 'AWS::CloudWatch::Dashboard' && r.Properties?.DashboardName === `${stackName}-${suffix}`);
  if (entry === undefined) throw new Error(`no dashboard named ${stackName}-${suffix} in the template`);
  const part = (v: unknown): string => {
    if (typeof v === 'string') return v;
    const o = v as Record<string, any>;
    if ('Ref' in o) return `<${o.Ref}>`;
    if ('Fn::GetAtt' in o) return String(resources[o['Fn::GetAtt'][0]]?.Properties?.AlarmName ?? `<${o['Fn::GetAtt'].join('.')}>`);
    if ('Fn::Join' in o) return (o['Fn::Join'][1] as unknown[]).map(part).join(o['Fn::Join'][0]);
    throw new Error(`cannot read ${JSON.stringify(v)} in a dashboard body`);
  };
  return JSON.parse(part(entry.Properties!.DashboardBody).split(stackName).join('<stack>'));
}

const escape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** What one widget plots, a line each. */
function linesOf(widget: Record<string, any>): string[] {
  const p = widget.properties ?? {};
  if (widget.type === 'alarm') return (p.alarms as string[]).map((arn) => `● ${arn.split(':alarm:').pop()}`);
  return ((p.metrics ?? []) as unknown[][]).map((m) => {
    const options = (m.at(-1) ?? {}) as Record<string, any>;
    if (options.expression) return `${options.label}: ${String(options.expression).replace(/^SEARCH\('\{[^,]+,(\w+)\} MetricName="(\w+)"', '(\w+)'.*$/, '$2 $3 by $1')}`;
    const name = m.find((x) => typeof x === 'string' && x !== '.' && !String(x).includes('/'));
    return `${options.label ?? name}: ${name} ${options.stat ?? ''}`.trim();
  });
}

/** The SVG picture of a dashboard body. */
export function dashboardSvg(body: Record<string, any>, title: string): string {
  const widgets = body.widgets as Record<string, any>[];
  const height = Math.max(...widgets.map((w) => w.y + w.height)) * ROW + 48;
  const width = 24 * COLUMN + 16;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    `<rect width="${width}" height="${height}" fill="#f4f5f7"/>`,
    `<text x="8" y="26" ${FONT} font-size="18" font-weight="bold" fill="#16191f">${escape(title)}</text>`,
  ];
  for (const w of widgets) {
    const x = 8 + w.x * COLUMN;
    const y = 40 + w.y * ROW;
    parts.push(`<rect x="${x + 2}" y="${y + 2}" width="${w.width * COLUMN - 4}" height="${w.height * ROW - 4}" rx="4" fill="#ffffff" stroke="#d5dbdb"/>`);
    parts.push(`<text x="${x + 10}" y="${y + 22}" ${FONT} font-size="13" font-weight="bold" fill="#16191f">${escape(String(w.properties?.title ?? ''))}</text>`);
    linesOf(w).forEach((line, i) => parts.push(`<text x="${x + 10}" y="${y + 46 + i * LINE}" ${FONT} font-size="11" fill="#545b64">${escape(line)}</text>`));
  }
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
