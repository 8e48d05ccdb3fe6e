// Replaced by the job runner (issue #3).
import type { Config } from '../config.js';
export async function runJobCommand(name: string, _args: string[], _config: Config): Promise<void> {
  throw new Error(`job runner not built yet: ${name}`);
}
