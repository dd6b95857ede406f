// A line diff for showing file edits: the longest common subsequence of
// the two texts' lines, with long unchanged runs folded to a few lines of
// context. Past a size bound it gives up on alignment and shows the old
// lines removed and the new ones added (still correct, only less precise).

const MAX_CELLS = 1_000_000; // bound of the LCS table (lines × lines)
const CONTEXT = 3;

// diffLines returns [{op: '=' | '-' | '+' | '…', text}] turning a into b.
export function diffLines(a, b) {
  const x = lines(a);
  const y = lines(b);
  // Common head and tail need no table.
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail);
  const ys = y.slice(head, y.length - tail);
  const ops = x.slice(0, head).map((text) => ({op: '=', text}));
  ops.push(...middle(xs, ys));
  ops.push(...x.slice(x.length - tail).map((text) => ({op: '=', text})));
  return fold(ops);
}

// lines splits text into lines; a final newline ends the last line rather
// than starting an empty one.
function lines(s) {
  if (s === '') return [];
  const l = s.split('\n');
  if (l[l.length - 1] === '') l.pop();
  return l;
}

function middle(xs, ys) {
  const n = xs.length;
  const m = ys.length;
  if ((n + 1) * (m + 1) > MAX_CELLS) {
    return [...xs.map((text) => ({op: '-', text})), ...ys.map((text) => ({op: '+', text}))];
  }
  // lcs[i][j]: length of the LCS of xs[i:] and ys[j:], in one flat array.
  const w = m + 1;
  const lcs = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * w + j] = xs[i] === ys[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
    }
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (xs[i] === ys[j]) {
      ops.push({op: '=', text: xs[i]});
      i++;
      j++;
    } else if (lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
      ops.push({op: '-', text: xs[i++]});
    } else {
      ops.push({op: '+', text: ys[j++]});
    }
  }
  while (i < n) ops.push({op: '-', text: xs[i++]});
  while (j < m) ops.push({op: '+', text: ys[j++]});
  return ops;
}

// fold keeps CONTEXT unchanged lines around each change and replaces the
// rest of an unchanged run with one '…' line saying how many it hides.
function fold(ops) {
  const keep = new Uint8Array(ops.length);
  ops.forEach((o, k) => {
    if (o.op === '=') return;
    for (let d = Math.max(0, k - CONTEXT); d <= Math.min(ops.length - 1, k + CONTEXT); d++) keep[d] = 1;
  });
  const out = [];
  let hidden = 0;
  ops.forEach((o, k) => {
    if (o.op !== '=' || keep[k]) {
      if (hidden) out.push({op: '…', text: hidden + ' unchanged line' + (hidden === 1 ? '' : 's')});
      hidden = 0;
      out.push(o);
    } else {
      hidden++;
    }
  });
  if (hidden) out.push({op: '…', text: hidden + ' unchanged line' + (hidden === 1 ? '' : 's')});
  return out;
}
