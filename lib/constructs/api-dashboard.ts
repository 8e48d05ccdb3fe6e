/**
 * The API's dashboard, beside the jobs': requests, errors and latency (p50, p99) per route,
 * the 429s and 503s, the database pool (in use, waiting), the drains and how long they took,
 * and the state of the alarms that page and roll a canary deploy back. The route metrics come
 * from the access log line (EMF, app/api/request-id.ts), the pool and drain metrics from the
 * server (lib/metrics.ts names them all). The first three alarms are also the canary deploy's
 * rollback alarms. docs/api-dashboard.svg is drawn from this dashboard's
 * body in the template (`npm run docs:dashboard`).
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import { REQUEST_METRICS, ROUTE_DIMENSION, SERVICE_METRICS } from '../metrics.js';

export interface ApiDashboardProps {
  /** Where the server writes its EMF metrics (METRICS_NAMESPACE). */
  readonly metricsNamespace: string;
  /** The dashboard's name is `<prefix>-api`. */
  readonly namePrefix: string;
  /** The alarms to show: the ones that page, and the canary deploy's rollback alarms. */
  readonly alarms: readonly cloudwatch.IAlarm[];
}

/** The period of every graph: a minute, the resolution EMF metrics arrive at. */
const PERIOD = Duration.minutes(1);

export class ApiDashboard extends Construct {
  /** The dashboard. */
  public readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: ApiDashboardProps) {
    super(scope, id);
    const ns = props.metricsNamespace;
    const perRoute = (metricName: string, statistic: string, label: string) => new cloudwatch.MathExpression({
      expression: `SEARCH('{${ns},${ROUTE_DIMENSION}} MetricName="${metricName}"', '${statistic}', ${PERIOD.toSeconds()})`,
      label,
      period: PERIOD,
    });
    const total = (metricName: string, statistic: string, label: string) =>
      new cloudwatch.Metric({ namespace: ns, metricName, statistic, label, period: PERIOD });
    const graph = (title: string, left: cloudwatch.IMetric[]) => new cloudwatch.GraphWidget({ title, left, width: 6, height: 6 });

    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `${props.namePrefix}-api`,
      defaultInterval: Duration.hours(3),
      widgets: [
        [
          graph('API: requests per route', [perRoute(REQUEST_METRICS.latency, 'SampleCount', 'requests')]),
          graph('API: 5xx per route', [perRoute(REQUEST_METRICS.errors, 'Sum', '5xx')]),
          graph('API: latency p50 per route (ms)', [perRoute(REQUEST_METRICS.latency, 'p50', 'p50')]),
          graph('API: latency p99 per route (ms)', [perRoute(REQUEST_METRICS.latency, 'p99', 'p99')]),
        ],
        [
          graph('API: 429s and 503s', [perRoute(REQUEST_METRICS.throttled, 'Sum', '429'), perRoute(REQUEST_METRICS.unavailable, 'Sum', '503')]),
          graph('API: database pool', [total(SERVICE_METRICS.poolInUse, 'Maximum', 'in use'), total(SERVICE_METRICS.poolWaiting, 'Maximum', 'waiting')]),
          graph('API: drains and their duration (ms)', [total(SERVICE_METRICS.drainDuration, 'SampleCount', 'drains'), total(SERVICE_METRICS.drainDuration, 'Maximum', 'longest (ms)')]),
          new cloudwatch.AlarmStatusWidget({ title: 'API: alarms', alarms: [...props.alarms], width: 6, height: 6 }),
        ],
      ],
    });
  }
}
