/**
 * "Did you mean …": the known name a misspelt one most likely stands for, by
 * edit distance (a swap of two neighbours counts as one edit, case is
 * ignored), offered only when it is close enough to be a typo.
 */

/** Edits allowed for a name of this length: none up to 2 characters (only case), 1 up to 5, 2 up to 8, then 3. */
function allowedEdits(length: number): number {
  return length <= 2 ? 0 : length <= 5 ? 1 : length <= 8 ? 2 : 3;
}

/**
 * The name in `known` nearest to `name`, or undefined when none is within
 * the allowed edits (the first of equally near names wins).
 */
export function nearestName(name: string, known: Iterable<string>): string | undefined {
  const wanted = name.toLowerCase();
  let best: string | undefined;
  let bestDistance = allowedEdits(name.length) + 1;
  for (const candidate of known) {
    if (candidate === name) continue;
    const distance = editDistance(wanted, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** `; did you mean "x"?` when a near name exists, else ''. */
export function didYouMean(name: string, known: Iterable<string>): string {
  const near = nearestName(name, known);
  return near === undefined ? '' : `; did you mean "${near}"?`;
}

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps. */
export function editDistance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row: number[] = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(rows[i - 1]![j]! + 1, row[j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      row.push(d);
    }
    rows.push(row);
  }
  return rows[a.length]![b.length]!;
}
