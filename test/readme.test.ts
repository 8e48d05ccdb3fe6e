/**
 * The docs document what the code does (every variable, job and exit code), and every link in
 * them resolves: the README is the front door, the reference lives in docs/, one topic a file.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES } from '../app/config.js';
import { EXIT } from '../app/errors.js';
import { JOBS } from '../lib/jobs.js';

const DOCS = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const read = (file: string) => readFileSync(file, 'utf8');
const readme = read('README.md');

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

function anchors(markdown: string): Set<string> {
  const withoutCode = markdown.replace(/```[\s\S]*?```/g, '');
  return new Set([...withoutCode.matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => slug(m[1]!)));
}

/** Every relative link `[text](target)` outside code blocks, as [file, target]. */
function links(file: string): Array<[string, string]> {
  const text = read(file).replace(/```[\s\S]*?```/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((t) => !/^[a-z]+:/i.test(t)).map((t) => [file, t]);
}

describe('README', () => {
  it('starts with the two commands a newcomer needs', () => {
    const firstBlock = readme.slice(readme.indexOf('```sh'), readme.indexOf('```', readme.indexOf('```sh') + 5));
    expect(firstBlock).toContain('npm start');
    expect(firstBlock).toContain('npm test');
  });

  it('stays a front door of about 150 lines, linking every file in docs/', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(170);
    for (const file of DOCS.slice(1)) expect(readme).toContain(`](${file})`);
  });

  it('names every npm script in its commands table', () => {
    const { scripts } = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    const table = readme.slice(readme.indexOf('## Commands'), readme.indexOf('\n## ', readme.indexOf('## Commands') + 3));
    // `cdk`, `synth` and `typecheck` are spelled in the table as the commands they run.
    const missing = Object.keys(scripts).filter((name) => !['cdk', 'synth'].includes(name) && !table.includes(`\`${name}\``) && !table.includes(`npm run ${name}`) && !table.includes(`npm ${name}`));
    expect(missing).toEqual([]);
  });

  it.each(Object.entries(EXIT))('documents exit code %s (%i)', (_, code) => {
    expect(readme).toMatch(new RegExp(`^\\| ${code} \\|`, 'm'));
  });
});

describe('the rooms the front door names', () => {
  // A newcomer reads these three first: every file or folder they name must be there to open.
  it.each(['README.md', 'docs/api.md', 'docs/jobs.md'])('%s names only files and folders that exist', (file) => {
    const named = [...read(file).matchAll(/`((?:app|lib|bin|test|bench|docs|scripts|\.github|\.ci)\/[^`\s<>*]*)`/g)].map((m) => m[1]!.replace(/[:#].*$/, '').replace(/\/$/, ''));
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((p) => !existsSync(p))).toEqual([]);
  });
});

describe('docs/', () => {
  const configuration = read('docs/configuration.md');
  const jobs = read('docs/jobs.md');

  it.each(CONFIG_VARIABLES)('documents the variable %s', (name) => {
    expect(configuration).toMatch(new RegExp(`\\| [^\\n]*\`${name}\``));
  });

  it.each(JOBS.map((j) => j.name))('describes the job %s', (name) => {
    expect(jobs).toContain(name);
  });

  it.each(DOCS.flatMap(links))('%s: the link %s resolves', (file, target) => {
    const [pathPart, anchor] = target.split('#') as [string, string | undefined];
    const resolved = pathPart ? path.join(path.dirname(file), pathPart) : file;
    expect(existsSync(resolved), `${resolved} exists`).toBe(true);
    if (anchor) expect([...anchors(read(resolved))]).toContain(anchor);
  });

  it('finds broken links (the check itself)', () => {
    expect(anchors('# A `job_runs` table\n## Exit codes of a job')).toEqual(new Set(['a-job_runs-table', 'exit-codes-of-a-job']));
  });
});

describe('the first deploy', () => {
  it('lists every variable the deploy workflow reads, in operations.md\'s table', () => {
    const workflow = read('.github/workflows/deploy.yml');
    const variables = [...new Set([...workflow.matchAll(/\bvars\.([A-Z0-9_]+)/g)].map((m) => m[1]!))];
    expect(variables).toEqual(expect.arrayContaining(['AWS_ACCOUNT_ID', 'DOMAIN_NAME', 'PROD_HOSTED_ZONE_ID', 'PROD_STATEFUL_ACKNOWLEDGE']));
    const ops = read('docs/operations.md');
    const section = ops.slice(ops.indexOf('## The first deploy, step by step'), ops.indexOf('\n## ', ops.indexOf('## The first deploy, step by step') + 3));
    const table = section.split('\n').filter((line) => line.trimStart().startsWith('|')).join('\n');
    expect(variables.filter((v) => !table.includes(`\`${v}\``))).toEqual([]);
  });
});
