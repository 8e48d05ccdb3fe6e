/**
 * deploy/resource-permissions.json: for each resource type the templates use, the IAM actions
 * CloudFormation's handlers call to create, update and delete it, from AWS's published resource
 * provider schemas (`handlers.<create|update|delete>.permissions`), or written by hand from the
 * type's documentation where AWS publishes no schema.
 */
import { readFileSync } from 'node:fs';

export const PERMISSIONS_FILE = new URL('../../deploy/resource-permissions.json', import.meta.url);

/** The handlers CloudFormation runs during a deploy (read and list are for drift and import). */
export const HANDLERS = ['create', 'update', 'delete'] as const;
export type Handler = (typeof HANDLERS)[number];

export interface TypePermissions extends Record<Handler, string[]> {
  /** The schema file the lists come from, or `hand-written from <doc>`. */
  readonly source: string;
  /**
   * Actions of the lists that no handler calls for this stack's resources, each with the
   * reason (a feature of the type the templates do not use). Kept across refreshes.
   */
  readonly notNeeded?: Record<string, string>;
}

export interface PermissionsData {
  /** Where and when the schemas were taken. */
  readonly schemas: { readonly repository: string; readonly path: string; readonly commit: string; readonly commitDate: string; readonly taken: string };
  readonly types: Record<string, TypePermissions>;
}

export function readPermissions(file: URL | string = PERMISSIONS_FILE): PermissionsData {
  return JSON.parse(readFileSync(file, 'utf8')) as PermissionsData;
}

/** Every action a deploy may call for `type`, create, update and delete together, minus the ones not needed. */
export function neededActions(entry: TypePermissions): string[] {
  const all = new Set(HANDLERS.flatMap((h) => entry[h]));
  return [...all].filter((a) => !(entry.notNeeded && a in entry.notNeeded)).sort();
}

/** The schema file name AWS gives `type`: AWS::ECS::Service is aws-ecs-service.json. */
export function schemaFileName(type: string): string {
  return `${type.toLowerCase().replaceAll('::', '-')}.json`;
}
