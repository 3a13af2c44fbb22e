// A line diff (Myers' O(ND) algorithm) and its hunks, for comparing two
// versions of an item's body.

// MAX_EDITS bounds the edit distance computed; beyond it two texts are
// shown as one replacement (its memory grows with the square of it).
const MAX_EDITS = 2000;

// diffLines returns the edit script from a to b (arrays of lines) as
// [{op: " " | "-" | "+", line}], or null when they differ by more than
// MAX_EDITS lines.
export function diffLines(a, b) {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, MAX_EDITS);
  const off = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace = []; // trace[d][k + d] is v[k] before step d
  let found = false;
  for (let d = 0; d <= max && !found; d++) {
    trace.push(v.slice(off - d, off + d + 1));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[off + k - 1] < v[off + k + 1]) ? v[off + k + 1] : v[off + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[off + k] = x;
      if (x >= n && y >= m) {
        found = true;
        break;
      }
    }
  }
  if (!found) return null;
  const out = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const t = trace[d];
    const at = (k) => t[k + d];
    const k = x - y;
    const prevK = k === -d || (k !== d && at(k - 1) < at(k + 1)) ? k + 1 : k - 1;
    const prevX = d === 0 ? 0 : at(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      out.push({ op: " ", line: a[--x] });
      y--;
    }
    if (d > 0) {
      if (x === prevX) out.push({ op: "+", line: b[--y] });
      else out.push({ op: "-", line: a[--x] });
    }
  }
  return out.reverse();
}

// hunks groups an edit script into runs of changes with up to context
// unchanged lines around them: [{aStart, bStart, lines}], where aStart and
// bStart are the 1-based line numbers of the hunk's first line in a and b.
export function hunks(script, context = 3) {
  // aLine[i], bLine[i]: the lines of a and b before script[i].
  const aLine = [];
  const bLine = [];
  let a = 0;
  let b = 0;
  const changes = [];
  script.forEach((e, i) => {
    aLine.push(a);
    bLine.push(b);
    if (e.op !== "+") a++;
    if (e.op !== "-") b++;
    if (e.op !== " ") changes.push(i);
  });
  const out = [];
  let i = 0;
  while (i < changes.length) {
    let j = i;
    while (j + 1 < changes.length && changes[j + 1] - changes[j] <= 2 * context + 1) j++;
    const start = Math.max(0, changes[i] - context);
    const end = Math.min(script.length, changes[j] + context + 1);
    out.push({ aStart: aLine[start] + 1, bStart: bLine[start] + 1, lines: script.slice(start, end) });
    i = j + 1;
  }
  return out;
}
