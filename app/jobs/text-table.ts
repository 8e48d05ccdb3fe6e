/** A plain-text table for the operator commands (`npm run jobs`, `npm run runs`). */

export function textTable(headers: readonly string[], rows: readonly (readonly string[])[], alignRight: ReadonlySet<number> = new Set()): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (alignRight.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/**
 * The table if it fits in `width` columns; otherwise one block per row, its first cell as the
 * heading and every other cell on a line of its own under its header, values wrapped at
 * `width`. A terminal of any width then reads it without wrapped-over lines.
 */
export function fitTable(headers: readonly string[], rows: readonly (readonly string[])[], alignRight: ReadonlySet<number>, width: number): string {
  const table = textTable(headers, rows, alignRight);
  if (table.split('\n').every((l) => l.length <= width)) return table;
  const label = Math.max(...headers.slice(1).map((h) => h.length)) + 2;
  const room = Math.max(20, width - label - 2);
  const block = (row: readonly string[]) => [
    row[0] ?? '',
    ...headers.slice(1).flatMap((header, i) =>
      wrap(row[i + 1] ?? '', room).map((part, j) => `  ${(j === 0 ? header : '').padEnd(label)}${part}`.trimEnd())),
  ].join('\n');
  return rows.map(block).join('\n\n');
}

/** `text` in lines of at most `width` characters, broken at spaces where it can be. */
export function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let rest = text;
  while (rest.length > width) {
    const cut = rest.lastIndexOf(' ', width);
    const at = cut > 0 ? cut : width;
    lines.push(rest.slice(0, at));
    rest = rest.slice(at).trimStart();
  }
  lines.push(rest);
  return lines;
}
