/** The README documents what the code does: every variable, job and exit code. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES } from '../app/config.js';
import { EXIT } from '../app/errors.js';
import { JOBS } from '../lib/jobs.js';

const readme = readFileSync('README.md', 'utf8');

describe('README', () => {
  it('starts with the two commands a newcomer needs', () => {
    const firstBlock = readme.slice(readme.indexOf('```sh'), readme.indexOf('```', readme.indexOf('```sh') + 5));
    expect(firstBlock).toContain('npm start');
    expect(firstBlock).toContain('npm test');
  });

  it.each(CONFIG_VARIABLES)('documents the variable %s', (name) => {
    expect(readme).toMatch(new RegExp(`\\| [^\\n]*\`${name}\``));
  });

  it.each(Object.entries(EXIT))('documents exit code %s (%i)', (_, code) => {
    expect(readme).toMatch(new RegExp(`^\\| ${code} \\|`, 'm'));
  });

  it.each(JOBS.map((j) => j.name))('mentions the job %s', (name) => {
    expect(readme).toContain(name);
  });
});
