/**
 * Where a run runs: the ECS task, from the task metadata endpoint (v4) that ECS points
 * ECS_CONTAINER_METADATA_URI_V4 at, else this machine's hostname.
 */
import { hostname } from 'node:os';

export interface RunLocation {
  /** The task ARN in ECS, else the hostname; recorded in job_runs.ran_on. */
  readonly ranOn: string;
  /** Set in ECS: what the alert needs to write an `aws ecs run-task` command. */
  readonly ecs?: {
    readonly cluster: string;
    readonly taskDefinition: string;
    readonly container: string;
    readonly launchType?: string;
  };
}

/** Asks the metadata endpoint, giving up after `timeoutMs`; never throws. */
export async function runLocation(env: NodeJS.ProcessEnv = process.env, timeoutMs = 1_000): Promise<RunLocation> {
  const base = env.ECS_CONTAINER_METADATA_URI_V4;
  if (!base) return { ranOn: hostname() };
  try {
    const get = async (url: string) => {
      const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      if (!res.ok) throw new Error(`${url} answered ${res.status}`);
      return (await res.json()) as Record<string, unknown>;
    };
    const [task, container] = await Promise.all([get(`${base}/task`), get(base)]);
    const arn = typeof task.TaskARN === 'string' ? task.TaskARN : undefined;
    if (!arn) return { ranOn: hostname() };
    const ecs =
      typeof task.Cluster === 'string' && typeof task.Family === 'string' && typeof container.Name === 'string'
        ? {
            cluster: task.Cluster,
            taskDefinition: task.Revision ? `${task.Family}:${String(task.Revision)}` : task.Family,
            container: container.Name,
            ...(typeof task.LaunchType === 'string' ? { launchType: task.LaunchType } : {}),
          }
        : undefined;
    return { ranOn: arn, ...(ecs ? { ecs } : {}) };
  } catch {
    return { ranOn: hostname() };
  }
}
