/**
 * An EventBridge schedule in words, for `npm run jobs`: "At 00:15, every day (UTC)".
 *
 * Its own module because cronstrue is only needed there: every job process loads
 * lib/schedule.ts (through the jobs table), and cronstrue would add about 12 ms of CPU to each
 * start (docs/performance.md#process-start).
 */
import cronstrue from 'cronstrue';
import { UTC, type Schedule } from './schedule.js';

/** The schedule in words, e.g. "At 00:15, every day (UTC)" or "At 06:00, only on Monday (Europe/Berlin)". */
export function describeSchedule(schedule: Schedule): string {
  if (schedule.kind === 'rate') {
    return `Every ${schedule.expression.slice('rate('.length, -1)}`;
  }
  const [minutes, hours, dom, month, dow, year] = schedule.fields.split(' ');
  const text = cronstrue.toString(`${minutes} ${hours} ${dom} ${month} ${dow} ${year}`, {
    dayOfWeekStartIndexZero: false,
    use24HourTimeFormat: true,
    verbose: false,
  });
  return `${text} (${schedule.timeZone ?? UTC})`;
}
