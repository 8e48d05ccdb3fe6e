/**
 * npm run openapi: writes docs/openapi.json from the routes' zod schemas. test/openapi.test.ts
 * fails while the committed copy differs from what this writes.
 */
import { writeFileSync } from 'node:fs';
import { openApiDocument } from './openapi.js';

export const OPENAPI_FILE = 'docs/openapi.json';
export const openApiText = () => `${JSON.stringify(openApiDocument(), null, 2)}\n`;

if (import.meta.url === `file://${process.argv[1]}`) {
  writeFileSync(OPENAPI_FILE, openApiText());
  console.log(`wrote ${OPENAPI_FILE}`);
}
