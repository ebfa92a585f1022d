/** Names close to a misspelt one: for "did you mean …?" in the errors of configs, kind modules and scenarios. */

/**
 * Edits from `a` to `b`: letters inserted, deleted or replaced, and two neighbours swapped (the
 * optimal string alignment distance) — `memroy` is one edit from `memory`, not two.
 */
export function editDistance(a: string, b: string): number {
  // Rows i − 2, i − 1 and i of the table.
  let before: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      let d = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, (before[j - 2] ?? 0) + 1);
      cur[j] = d;
    }
    before = prev;
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

/**
 * The closest candidate within edit distance 2 (case, `_` and `-` ignored), if any; else the one
 * that begins as the word does for 4 letters or more, each differing only in a short ending
 * (`retry` for `retries`, `timeoutSec` for `timeoutS`: 3 edits, but plainly meant).
 */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  const norm = (s: string) => s.toLowerCase().replace(/[_-]/g, '');
  let best: string | undefined;
  let bestD = 3;
  for (const c of candidates) {
    const d = norm(c) === norm(word) ? 0 : editDistance(word, c);
    if (d < bestD) [best, bestD] = [c, d];
  }
  if (best !== undefined) return best;
  const w = norm(word);
  let longest = 0;
  for (const c of candidates) {
    const n = norm(c);
    let k = 0;
    while (k < n.length && k < w.length && n[k] === w[k]) k++;
    if (k >= 4 && w.length - k <= 2 && n.length - k <= 3 && k > longest) [best, longest] = [c, k];
  }
  return best;
}
