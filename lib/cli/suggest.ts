/**
 * "Did you mean": the known name closest to a mistyped one (a command, an option, an option's value), when
 * it is close enough to be what was meant: one edit away for names of 3 or 4 characters, two beyond, none
 * for shorter ones (an edit: a character added, dropped or changed, or two neighbours swapped: `trian` is
 * `train`).
 */

/** The optimal string alignment distance between `a` and `b` (Levenshtein with adjacent swaps). */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) => Array.from({ length: cols }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/** The candidate closest to `input` (the first of equals), if close enough; case is ignored. */
export function closest(input: string, candidates: readonly string[]): string | undefined {
  const typed = input.toLowerCase();
  const allowed = typed.length <= 2 ? 0 : typed.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestDistance = allowed + 1;
  for (const candidate of candidates) {
    const distance = editDistance(typed, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** ": did you mean X?" for a mistyped `input`, or '' when no candidate is close. */
export function didYouMean(input: string, candidates: readonly string[]): string {
  const match = closest(input, candidates);
  return match === undefined ? '' : `: did you mean ${match}?`;
}
