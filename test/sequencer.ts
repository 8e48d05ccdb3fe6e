/**
 * The order in which `npm test` hands files to its workers: the longest first, whatever their
 * project, so that the run does not end with one worker on a long file while the others idle.
 * vitest's own order takes the projects one after the other (so the slowest process tests used
 * to start only after every synth test), and sorts by duration only within each.
 *
 * Durations come from vitest's cache of the previous run (node_modules/.vite/vitest); files it
 * has not timed yet go first, the larger before the smaller, as vitest does.
 *
 * The synth tests (a project without isolation) stay together, in one block placed by its
 * longest file: a worker keeps its loaded aws-cdk-lib and its synthesized stack only while the
 * next file it takes is from the same block.
 */
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const cache = this.ctx.cache;
    const root = this.ctx.config.root;
    const weight = (spec: TestSpecification): [number, number] => {
      const key = `${spec.project.name}:${relative(root, spec.moduleId)}`;
      // A file not timed yet counts as the longest (vitest, too, runs those first).
      return [cache.getFileTestResults(key)?.duration ?? Number.MAX_SAFE_INTEGER, cache.getFileStats(key)?.size ?? 0];
    };
    const heavier = (a: [number, number], b: [number, number]) => b[0] - a[0] || b[1] - a[1];
    const blocks = new Map<string, TestSpecification[]>();
    for (const spec of files) {
      // Each file is its own block, except in a project that shares its workers between files.
      const key = spec.project.config.isolate ? spec.moduleId : `project:${spec.project.name}`;
      blocks.set(key, [...(blocks.get(key) ?? []), spec]);
    }
    const sorted = [...blocks.values()].map((block) => [...block].sort((a, b) => heavier(weight(a), weight(b))));
    sorted.sort((a, b) => heavier(weight(a[0]!), weight(b[0]!)));
    return sorted.flat();
  }
}
