/**
 * npm run openapi: writes docs/openapi.json from the routes' zod schemas. test/openapi.test.ts
 * fails while the committed copy differs from what this writes.
 */
import { writeFileSync } from 'node:fs';
import { openApiText } from './openapi.js';

export const OPENAPI_FILE = 'docs/openapi.json';
export { openApiText };

if (import.meta.url === `file://${process.argv[1]}`) {
  writeFileSync(OPENAPI_FILE, openApiText());
  console.log(`wrote ${OPENAPI_FILE}`);
}
