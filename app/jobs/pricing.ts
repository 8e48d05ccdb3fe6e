/**
 * Fargate's price of a job run: vCPU-hours and GB-hours, billed per second from the image
 * pull to the task's stop, with a one-minute minimum.
 *
 * On-demand prices are AWS's list prices for Linux tasks in us-east-1 (US East, N. Virginia),
 * from https://aws.amazon.com/fargate/pricing/. Fargate Spot has no list price: it moves with
 * spare capacity, and AWS advertises "up to 70%" off; the Spot figures here are on-demand
 * less 70%, an estimate. Other regions cost more (typically 10-30%).
 */

export interface UnitPrices {
  /** US dollars per vCPU-hour. */
  readonly vcpuHour: number;
  /** US dollars per GB-hour of memory. */
  readonly gbHour: number;
}

export type Architecture = 'x86' | 'arm';
export type Capacity = 'onDemand' | 'spot';

/** The discount assumed for Fargate Spot. */
export const SPOT_DISCOUNT = 0.7;

const onDemand = {
  x86: { vcpuHour: 0.04048, gbHour: 0.004445 },
  arm: { vcpuHour: 0.03238, gbHour: 0.00356 },
} as const satisfies Record<Architecture, UnitPrices>;

const spot = (p: UnitPrices): UnitPrices => ({ vcpuHour: p.vcpuHour * (1 - SPOT_DISCOUNT), gbHour: p.gbHour * (1 - SPOT_DISCOUNT) });

export const FARGATE_PRICING = {
  region: 'us-east-1',
  regionName: 'US East (N. Virginia)',
  source: 'https://aws.amazon.com/fargate/pricing/',
  prices: {
    x86: { onDemand: onDemand.x86, spot: spot(onDemand.x86) },
    arm: { onDemand: onDemand.arm, spot: spot(onDemand.arm) },
  } satisfies Record<Architecture, Record<Capacity, UnitPrices>>,
  /** Fargate bills per second with this minimum. */
  minimumBilledSeconds: 60,
  /** Image pull and container start, billed before the job's own run begins: an assumption. */
  taskStartSeconds: 30,
  /** A job's run length when job_runs has no succeeded run to take a median of: an assumption. */
  assumedRunSeconds: 300,
} as const;

export const COST_VARIANTS = [
  { key: 'x86OnDemand', architecture: 'x86', capacity: 'onDemand', label: 'x86' },
  { key: 'x86Spot', architecture: 'x86', capacity: 'spot', label: 'x86 Spot' },
  { key: 'armOnDemand', architecture: 'arm', capacity: 'onDemand', label: 'ARM' },
  { key: 'armSpot', architecture: 'arm', capacity: 'spot', label: 'ARM Spot' },
] as const;

export type CostVariant = (typeof COST_VARIANTS)[number]['key'];

/** The billed seconds of one task that runs the job for `runSeconds`. */
export function billedSeconds(runSeconds: number): number {
  return Math.max(FARGATE_PRICING.minimumBilledSeconds, Math.ceil(runSeconds + FARGATE_PRICING.taskStartSeconds));
}

/** US dollars for one run of a task of `cpu` units and `memoryMiB`, running the job for `runSeconds`. */
export function runCost(cpu: number, memoryMiB: number, runSeconds: number, prices: UnitPrices): number {
  const hours = billedSeconds(runSeconds) / 3_600;
  return hours * ((cpu / 1_024) * prices.vcpuHour + (memoryMiB / 1_024) * prices.gbHour);
}

export function costs(cpu: number, memoryMiB: number, runSeconds: number, runsPerMonth: number) {
  const perRun = {} as Record<CostVariant, number>;
  const perMonth = {} as Record<CostVariant, number>;
  for (const v of COST_VARIANTS) {
    perRun[v.key] = runCost(cpu, memoryMiB, runSeconds, FARGATE_PRICING.prices[v.architecture][v.capacity]);
    perMonth[v.key] = perRun[v.key] * runsPerMonth;
  }
  return { perRun, perMonth };
}

/**
 * Step Functions standard workflows bill per state transition: $0.025 per 1,000 in us-east-1
 * (https://aws.amazon.com/step-functions/pricing/), after 4,000 free a month per account.
 */
export const STEP_FUNCTIONS_PRICING = {
  source: 'https://aws.amazon.com/step-functions/pricing/',
  perStateTransition: 0.025 / 1_000,
  freeTransitionsPerMonth: 4_000,
} as const;
