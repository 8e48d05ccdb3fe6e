/** Types of run-migrations.mjs, for the tests that call its handlers. */
export interface MigrationProperties {
  readonly Cluster: string;
  readonly TaskDefinition: string;
  readonly ContainerName: string;
  readonly Subnets: string[];
  readonly SecurityGroups: string[];
}
export interface MigrationEvent {
  readonly RequestType: 'Create' | 'Update' | 'Delete';
  readonly StackId: string;
  readonly RequestId: string;
  readonly PhysicalResourceId?: string;
  readonly ResourceProperties: MigrationProperties;
  readonly TaskArn?: string;
  /** When onEvent's handler gives up on the task (ISO 8601). */
  readonly Deadline?: string;
}
export declare const STARTED_BY: string;
export declare const DEADLINE_ENV: string;
export declare function onEvent(event: MigrationEvent): Promise<{ PhysicalResourceId: string; TaskArn?: string; Deadline?: string; Data?: { TaskArn: string } }>;
export declare function isComplete(event: MigrationEvent): Promise<{ IsComplete: boolean }>;
