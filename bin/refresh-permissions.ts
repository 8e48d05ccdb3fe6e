#!/usr/bin/env node
/**
 * Regenerates deploy/resource-permissions.json from AWS's CloudFormation resource provider
 * schemas, for exactly the resource types of the synthesized templates:
 *
 *   npm run permissions:refresh -- <schemas>
 *
 * <schemas> is a checkout or a bare git directory of a repository that holds the schemas in
 * aws-cloudformation-schema/ (github.com/pulumi/pulumi-aws-native vendors them, as CloudFormation's
 * `describe-type` returns them). Hand-written entries and `notNeeded` reasons are kept.
 * Exit 0: written. Exit 1: written, but some types have neither a schema nor a hand-written entry
 * (named on stderr; add them by hand). Exit 2: bad arguments.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { HANDLERS, PERMISSIONS_FILE, readPermissions, schemaFileName, type PermissionsData, type TypePermissions } from '../lib/deploy-permissions/data.js';
import { deployedTemplates, resourceTypes } from '../lib/deploy-permissions/templates.js';

const SCHEMA_DIR = 'aws-cloudformation-schema';
const REPOSITORY = 'https://github.com/pulumi/pulumi-aws-native';

const root = process.argv[2];
if (!root || !existsSync(root)) {
  console.error(`usage: npm run permissions:refresh -- <checkout or git dir holding ${SCHEMA_DIR}/>${root ? `; ${root} does not exist` : ''}`);
  process.exit(2);
}
const checkout = existsSync(path.join(root, SCHEMA_DIR));
const git = (...args: string[]) => execFileSync('git', [checkout ? '-C' : '--git-dir', root, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
try {
  git('cat-file', '-e', `HEAD:${SCHEMA_DIR}`);
} catch {
  if (!checkout) {
    console.error(`${root} holds no ${SCHEMA_DIR}/ (neither a checkout nor a git directory of one)`);
    process.exit(2);
  }
}
const readSchema = (file: string): string | undefined => {
  try {
    return checkout ? readFileSync(path.join(root, SCHEMA_DIR, file), 'utf8') : git('show', `HEAD:${SCHEMA_DIR}/${file}`);
  } catch {
    return undefined;
  }
};

const previous: PermissionsData | undefined = existsSync(PERMISSIONS_FILE) ? readPermissions() : undefined;
const types: Record<string, TypePermissions> = {};
const missing: string[] = [];
for (const type of resourceTypes(deployedTemplates())) {
  const old = previous?.types[type];
  const text = readSchema(schemaFileName(type));
  const handlers = text === undefined ? undefined : (JSON.parse(text).handlers as Record<string, { permissions?: string[] }> | undefined);
  if (handlers) {
    const lists = Object.fromEntries(HANDLERS.map((h) => [h, [...(handlers[h]?.permissions ?? [])].sort()]));
    types[type] = { source: `${SCHEMA_DIR}/${schemaFileName(type)}`, ...lists, ...(old?.notNeeded ? { notNeeded: old.notNeeded } : {}) } as TypePermissions;
  } else if (old?.source.startsWith('hand-written')) {
    types[type] = old;
  } else {
    missing.push(type);
  }
}

const data: PermissionsData = {
  schemas: {
    repository: REPOSITORY,
    path: `${SCHEMA_DIR}/`,
    commit: git('rev-parse', 'HEAD'),
    commitDate: git('log', '-1', '--format=%cI', 'HEAD', '--', SCHEMA_DIR),
    taken: new Date().toISOString().slice(0, 10),
  },
  types,
};
writeFileSync(PERMISSIONS_FILE, `${JSON.stringify(data, null, 2)}\n`);
console.log(`wrote ${path.relative(process.cwd(), PERMISSIONS_FILE.pathname)}: ${Object.keys(types).length} types`);
if (missing.length > 0) {
  console.error(`no schema and no hand-written entry for: ${missing.join(', ')}; write their lists by hand (source "hand-written from <doc>")`);
  process.exit(1);
}
