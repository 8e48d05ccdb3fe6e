/**
 * The database watched: alarms on a new RDS instance's free storage, CPU, CPU credits (burstable
 * classes only), connections against max_connections, and freeable memory, each threshold derived
 * from the instance class (lib/pool-budget.ts knows its memory and max_connections), all sent to
 * the alert topic.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as rds from 'aws-cdk-lib/aws-rds';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { instanceMemoryGiB, rdsMaxConnections } from '../pool-budget.js';

/** Where each threshold sits, as a share of what the class has. */
export const DATABASE_ALARM_DEFAULTS = {
  /** Storage autoscaling grows the volume below 10% free; an alarm at 10% of the first size says it is growing, or cannot. */
  freeStoragePercent: 10,
  cpuPercent: 80,
  /** A burstable instance throttles to its baseline at zero credits; this many hours of its earnings left is the warning. */
  cpuCreditHours: 2,
  connectionsPercent: 80,
  freeableMemoryPercent: 10,
  /** Every alarm looks at this many periods of five minutes. */
  evaluationPeriods: 3,
  periodMinutes: 5,
} as const;

/** CPU credits a burstable class earns per hour (AWS's table for t3 and t4g). */
const CREDITS_PER_HOUR: Record<string, number> = { micro: 12, small: 24, medium: 24, large: 36, xlarge: 96, '2xlarge': 192 };

export interface DatabaseAlarmsProps {
  readonly instance: rds.DatabaseInstance;
  /** The class, without `db.`, like `t4g.micro`. */
  readonly instanceType: string;
  /** The volume's first size, GiB. */
  readonly allocatedStorageGiB: number;
  readonly topic: sns.ITopic;
  /** Prefix of the alarm names. @default - the stack name */
  readonly namePrefix?: string;
  /** The runbook section the alarms point to. @default 'docs/operations.md#database-alarm' */
  readonly runbook?: string;
}

export class DatabaseAlarms extends Construct {
  /** By metric name: FreeStorageSpace, CPUUtilization, CPUCreditBalance (burstable only), DatabaseConnections, FreeableMemory. */
  public readonly alarms: ReadonlyMap<string, cloudwatch.Alarm>;

  constructor(scope: Construct, id: string, props: DatabaseAlarmsProps) {
    super(scope, id);
    const d = DATABASE_ALARM_DEFAULTS;
    const prefix = props.namePrefix ?? Stack.of(this).stackName;
    const runbook = props.runbook ?? 'docs/operations.md#database-alarm';
    const gib = 2 ** 30;
    const memoryGiB = instanceMemoryGiB(props.instanceType);
    const maxConnections = rdsMaxConnections(props.instanceType);
    const size = props.instanceType.split('.')[1] ?? '';
    const credits = /^t\d/.test(props.instanceType) ? CREDITS_PER_HOUR[size] : undefined;

    const alarms = new Map<string, cloudwatch.Alarm>();
    const alarm = (metricName: string, name: string, what: string, threshold: number, below: boolean) => {
      const a = new cloudwatch.Alarm(this, metricName, {
        alarmName: `${prefix}-database-${name}`,
        alarmDescription: `${what}. Runbook: ${runbook}`,
        metric: props.instance.metric(metricName, { statistic: below ? cloudwatch.Stats.MINIMUM : cloudwatch.Stats.MAXIMUM, period: Duration.minutes(d.periodMinutes) }),
        threshold,
        comparisonOperator: below ? cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD : cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: d.evaluationPeriods,
        // RDS reports every minute while the instance runs; a stopped instance is not this alarm's news.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
      alarms.set(metricName, a);
    };

    const storage = (props.allocatedStorageGiB * d.freeStoragePercent) / 100;
    alarm('FreeStorageSpace', 'free-storage', `The database has less than ${storage} GiB free (${d.freeStoragePercent}% of its ${props.allocatedStorageGiB} GiB)`, storage * gib, true);
    alarm('CPUUtilization', 'cpu', `The database's CPU is above ${d.cpuPercent}% for ${d.evaluationPeriods * d.periodMinutes} minutes`, d.cpuPercent, false);
    if (credits !== undefined) {
      const left = credits * d.cpuCreditHours;
      alarm('CPUCreditBalance', 'cpu-credits', `The database (${props.instanceType}, burstable) has fewer than ${left} CPU credits, ${d.cpuCreditHours} hours of its earnings; at zero it throttles to its baseline`, left, true);
    }
    if (maxConnections !== undefined) {
      const limit = Math.floor((maxConnections * d.connectionsPercent) / 100);
      alarm('DatabaseConnections', 'connections', `The database has more than ${limit} connections, ${d.connectionsPercent}% of its max_connections ${maxConnections}`, limit, false);
    }
    if (memoryGiB !== undefined) {
      const free = (memoryGiB * d.freeableMemoryPercent) / 100;
      alarm('FreeableMemory', 'memory', `The database has less than ${free} GiB of freeable memory (${d.freeableMemoryPercent}% of its ${memoryGiB} GiB)`, free * gib, true);
    }
    const action = new actions.SnsAction(props.topic);
    for (const a of alarms.values()) a.addAlarmAction(action);
    this.alarms = alarms;
  }
}
