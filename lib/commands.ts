/**
 * The container's own commands (`node dist/app/main.js <command>`): a job cannot take one
 * of these names, or the command would shadow it. Plain data with no imports, so the entry's
 * start-up guard can read it before anything else loads.
 */
export const CONTAINER_COMMANDS = ['migrate', 'jobs', 'runs', 'seed'] as const;
