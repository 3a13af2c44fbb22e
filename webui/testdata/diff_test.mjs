// Checks assets/diff.js: run by diff_node_test.go with node. Prints "ok"
// or throws.
import { diffLines, hunks } from "../assets/diff.js";

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// A seeded generator: the same cases on every run.
let seed = 12345;
function rand(n) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
}

function lcs(a, b) {
  const L = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    }
  }
  return L[0][0];
}

// The script rebuilds both texts and keeps as many lines as can be kept.
for (let t = 0; t < 3000; t++) {
  const gen = () => Array.from({ length: rand(14) }, () => "abcd"[rand(4)]);
  const a = gen();
  const b = gen();
  const s = diffLines(a, b);
  const ra = s.filter((e) => e.op !== "+").map((e) => e.line);
  const rb = s.filter((e) => e.op !== "-").map((e) => e.line);
  assert(JSON.stringify(ra) === JSON.stringify(a) && JSON.stringify(rb) === JSON.stringify(b),
    `script does not rebuild ${JSON.stringify({ a, b, s })}`);
  assert(s.filter((e) => e.op === " ").length === lcs(a, b), `script not minimal for ${JSON.stringify({ a, b })}`);
}

// Beyond the edit limit: null, for the caller to show both whole.
const many = (p) => Array.from({ length: 2500 }, (_, i) => p + i);
assert(diffLines(many("x"), many("y")) === null, "2500 lines against 2500 others were diffed");
assert(diffLines(many("x"), many("x")).length === 2500, "equal texts");

// Hunks: two changes far apart are two hunks with their context and line
// numbers; close ones share one.
const a = "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15".split(" ");
const b = "1 2 3 x 5 6 7 8 9 10 11 12 13 y 15".split(" ");
const hs = hunks(diffLines(a, b), 2);
assert(hs.length === 2, `${hs.length} hunks, want 2`);
assert(hs[0].aStart === 2 && hs[0].bStart === 2 && hs[0].lines.map((l) => l.op + l.line).join(",") === " 2, 3,-4,+x, 5, 6",
  `first hunk ${JSON.stringify(hs[0])}`);
assert(hs[1].aStart === 12 && hs[1].lines.map((l) => l.op + l.line).join(",") === " 12, 13,-14,+y, 15",
  `second hunk ${JSON.stringify(hs[1])}`);
assert(hunks(diffLines(a, b), 5).length === 1, "changes 10 lines apart with 5 of context are one hunk");
// 8 unchanged lines between two changes: the contexts of 4 meet, of 3 do not.
const b2 = "1 2 3 x 5 6 7 8 9 10 11 12 y 14 15".split(" ");
assert(hunks(diffLines(a, b2), 4).length === 1, "8 unchanged lines between changes, 4 of context: one hunk");
assert(hunks(diffLines(a, b2), 3).length === 2, "8 unchanged lines between changes, 3 of context: two hunks");
assert(hunks(diffLines(["p"], ["q", "p"]))[0].bStart === 1, "an insertion at the top");
assert(hunks(diffLines(a, a)).length === 0, "no change, no hunk");

console.log("ok");
