/** Names close to a misspelt one: for "did you mean …?" in the errors of configs, kind modules and scenarios. */

export function levenshtein(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

/** The closest candidate within edit distance 2 (case, `_` and `-` ignored), if any. */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  const norm = (s: string) => s.toLowerCase().replace(/[_-]/g, '');
  let best: string | undefined;
  let bestD = 3;
  for (const c of candidates) {
    const d = norm(c) === norm(word) ? 0 : levenshtein(word, c);
    if (d < bestD) [best, bestD] = [c, d];
  }
  return best;
}
