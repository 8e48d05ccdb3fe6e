/**
 * The API's dashboard and the tasks' tracing grant, in the synthesized template: the
 * dashboard plots the route metrics the access log line writes, and its picture in the docs is
 * the one drawn from this template; the API and job task roles may write spans to X-Ray and
 * nothing more of X-Ray's.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REQUEST_METRICS, ROUTE_DIMENSION, SERVICE_METRICS } from '../../lib/metrics.js';
import { API_DASHBOARD_PICTURE, API_DASHBOARD_TITLE, dashboardBody, dashboardSvg } from '../../lib/dashboard-picture.js';
import { TRACE_ACTIONS } from '../../lib/constructs/traces.js';
import { STACK_ID, synth } from './synth.js';

const s = synth();
const resources = s.template.toJSON().Resources as Record<string, { Type: string; Properties: Record<string, any> }>;

describe('the API dashboard', () => {
  const body = dashboardBody(resources, STACK_ID, 'api');
  const text = JSON.stringify(body);

  it('plots requests, 5xx, p50 and p99 per route, 429s and 503s, the pool, the drains and the alarms', () => {
    for (const metric of Object.values(REQUEST_METRICS)) expect(text).toContain(`{EcsSaasBackend/Jobs,${ROUTE_DIMENSION}} MetricName=\\"${metric}\\"`);
    expect(text).toContain("'p50'");
    expect(text).toContain("'p99'");
    for (const metric of [SERVICE_METRICS.poolInUse, SERVICE_METRICS.poolWaiting, SERVICE_METRICS.drainDuration]) expect(text).toContain(`"${metric}"`);
    const alarms = body.widgets.find((w: any) => w.type === 'alarm').properties.alarms as string[];
    const names = alarms.map((a) => a.split(':alarm:').pop());
    expect(names).toEqual(expect.arrayContaining(['<stack>-api-5xx', '<stack>-api-unhealthy-targets', '<stack>-api-p99-latency']));
    // The canary deploy's rollback alarms, one per target group and measure.
    const rollback = resources[s.stack.getLogicalId(s.stack.serviceMonitoring.deploymentAlarms.serverErrorRates[0]!.node.defaultChild as never)]!;
    expect(names).toContain(rollback.Properties.AlarmName.replace(STACK_ID, '<stack>'));
  });

  it('is pictured in the docs as the template draws it (npm run docs:dashboard redraws it)', () => {
    expect(readFileSync(API_DASHBOARD_PICTURE, 'utf8')).toBe(dashboardSvg(body, API_DASHBOARD_TITLE));
  });
});

describe('the tracing grant', () => {
  const statements = Object.entries(resources)
    .filter(([, r]) => r.Type === 'AWS::IAM::Policy')
    .flatMap(([id, r]) => (r.Properties.PolicyDocument.Statement as any[]).map((st) => ({ id, roles: JSON.stringify(r.Properties.Roles), ...st })));
  const xray = statements.filter((st) => [st.Action].flat().some((a: string) => a.startsWith('xray:')));

  it('lets the API and job task roles write spans, and nothing else of X-Ray\'s', () => {
    const traces = xray.filter((st) => st.Sid === 'SendTracesToXRay');
    expect(traces.map((st) => st.roles).join(' ')).toMatch(/ApiTaskDefTaskRole/);
    expect(traces.map((st) => st.roles).join(' ')).toMatch(/JobsTaskRole/);
    for (const st of traces) expect(st).toMatchObject({ Effect: 'Allow', Action: [...TRACE_ACTIONS], Resource: '*' });
  });
});
