/**
 * The database watched: five alarms (four on a non-burstable class), thresholds from the instance
 * class, all to the alert topic; none for an existing database.
 */
import { describe, expect, it } from 'vitest';
import { DATABASE_ALARM_DEFAULTS } from '../../lib/constructs/database-alarms.js';
import { instanceMemoryGiB, rdsMaxConnections } from '../../lib/pool-budget.js';
import { resources, synth } from './synth.js';

type Alarm = { Properties: { MetricName: string; Namespace: string; Threshold: number; ComparisonOperator: string; AlarmActions: unknown[]; Dimensions: { Name: string }[] } };
const GIB = 2 ** 30;

function alarmsOf(instanceType: string): Map<string, Alarm['Properties']> {
  const { template, stack } = synth({ database: { instanceType }, databaseMaxConnections: undefined });
  const topic = stack.getLogicalId(stack.alerts.topic.node.defaultChild as never);
  const rdsAlarms = Object.values(resources(template, 'AWS::CloudWatch::Alarm') as Record<string, Alarm>).filter((a) => a.Properties.Namespace === 'AWS/RDS');
  for (const a of rdsAlarms) {
    expect(a.Properties.AlarmActions).toEqual([{ Ref: topic }]);
    expect(a.Properties.Dimensions.map((d) => d.Name)).toEqual(['DBInstanceIdentifier']);
  }
  return new Map(rdsAlarms.map((a) => [a.Properties.MetricName, a.Properties]));
}

describe('the database alarms', () => {
  it('watch a burstable t4g.small with thresholds from its 2 GiB, its max_connections and its credit earnings', () => {
    const alarms = alarmsOf('t4g.small');
    expect([...alarms.keys()].sort()).toEqual(['CPUCreditBalance', 'CPUUtilization', 'DatabaseConnections', 'FreeStorageSpace', 'FreeableMemory']);
    expect(alarms.get('FreeStorageSpace')).toMatchObject({ Threshold: 2 * GIB, ComparisonOperator: 'LessThanThreshold' });
    expect(alarms.get('CPUUtilization')).toMatchObject({ Threshold: DATABASE_ALARM_DEFAULTS.cpuPercent, ComparisonOperator: 'GreaterThanThreshold' });
    // t4g.small earns 24 credits an hour.
    expect(alarms.get('CPUCreditBalance')).toMatchObject({ Threshold: 24 * DATABASE_ALARM_DEFAULTS.cpuCreditHours, ComparisonOperator: 'LessThanThreshold' });
    expect(rdsMaxConnections('t4g.small')).toBe(192);
    expect(alarms.get('DatabaseConnections')).toMatchObject({ Threshold: Math.floor(192 * 0.8), ComparisonOperator: 'GreaterThanThreshold' });
    expect(instanceMemoryGiB('t4g.small')).toBe(2);
    expect(alarms.get('FreeableMemory')!.Threshold).toBeCloseTo(0.2 * GIB);
  });

  it('have no credit alarm on a class that bursts not, and scale with the class', () => {
    const alarms = alarmsOf('m6g.large');
    expect(alarms.has('CPUCreditBalance')).toBe(false);
    expect(alarms.get('DatabaseConnections')!.Threshold).toBe(Math.floor(rdsMaxConnections('m6g.large')! * 0.8));
    expect(alarms.get('FreeableMemory')!.Threshold).toBeCloseTo(0.8 * GIB);
  });

  it('are not made for an existing database, which is watched where it lives', () => {
    const { template } = synth({ database: { secretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf' }, databaseMaxConnections: 100 });
    const rds = Object.values(resources(template, 'AWS::CloudWatch::Alarm') as Record<string, Alarm>).filter((a) => a.Properties.Namespace === 'AWS/RDS');
    expect(rds).toEqual([]);
  });
});
