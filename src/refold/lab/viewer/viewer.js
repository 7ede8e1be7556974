/* refold view: scrub through a run's model calls. Plain JS, no dependencies, no network. */
"use strict";

// filled by loadData(), after the loading banner has been painted
let D, S, P, SHOWN, PART, ROLE, N, VARIANTS;
function loadData() {
  D = JSON.parse(document.getElementById("refold-data").textContent);
  S = D.strings;
  P = D.pieces; // [role, textRef, step, part, shown, covers, tokens, preview string id or -1]
  SHOWN = D.codes.shown;
  PART = D.codes.part;
  ROLE = D.codes.role;
  N = D.calls;
  VARIANTS = new Map(D.variants.map((v) => [v.id, v]));
}
const $ = (id) => document.getElementById(id);
const NUMBER = new Intl.NumberFormat("en-US"); // toLocaleString built one per call: a third of a long run's scrub step
const fmt = (n) => NUMBER.format(Number(n));
const usd = (x) => "$" + (x >= 0.01 ? x.toFixed(4) : x.toPrecision(2));

const state = { call: 1, variant: null, compare: "", sel: null, timer: null, query: "", filter: "all", detail: null };

/* ---- data access ---------------------------------------------------------------------------- */

function resolve(id) {
  let v = VARIANTS.get(id);
  const seen = new Set();
  while (v && v.same_as && !seen.has(v.id)) { seen.add(v.id); v = VARIANTS.get(v.same_as); }
  return v;
}

const decoded = new Map(); // variant id -> {at, cur, marks, last}: a cursor over the deltas
const MARK_EVERY = 256; // a copy of every 256th call's list: stepping back replays < 256 deltas
function promptOf(v, c) { // call c's piece list (1-based), rebuilt in place from the deltas, not kept per call
  let d = decoded.get(v.id);
  if (!d) { d = { at: 0, cur: [], marks: new Map(), last: new Map() }; decoded.set(v.id, d); }
  const hit = d.last.get(c);
  if (hit) return hit;
  if (d.at > c) { // back to the newest copy at or before c
    let k = Math.floor(c / MARK_EVERY) * MARK_EVERY;
    while (k > 0 && !d.marks.has(k)) k -= MARK_EVERY;
    d.cur = k ? d.marks.get(k).slice() : [];
    d.at = k;
  }
  while (d.at < c) {
    const [keep, add] = v.calls[d.at];
    d.cur.length = keep;
    for (const pid of add) d.cur.push(pid);
    d.at++;
    if (d.at % MARK_EVERY === 0 && !d.marks.has(d.at)) d.marks.set(d.at, d.cur.slice());
  }
  const out = d.cur.slice();
  if (d.last.size >= 4) d.last.delete(d.last.keys().next().value);
  d.last.set(c, out);
  return out;
}

const lineCache = new Map();
function linesOf(sid) { // lines keep their "\n"; only "\n" ends a line (as encode.split_lines)
  let lines = lineCache.get(sid);
  if (!lines) {
    const parts = S[sid].split("\n");
    lines = parts.slice(0, -1).map((p) => p + "\n");
    if (parts[parts.length - 1]) lines.push(parts[parts.length - 1]);
    lineCache.set(sid, lines);
  }
  return lines;
}

function decodeRef(ref) { // a string id, or segments: id | ["L", id, a, b] | ["R", id, n]
  if (typeof ref === "number") return S[ref];
  return ref.map((seg) => {
    if (typeof seg === "number") return S[seg];
    if (seg[0] === "L") return linesOf(seg[1]).slice(seg[2], seg[3]).join("");
    if (seg[0] === "R") return S[seg[1]].repeat(seg[2]);
    throw new Error("unknown text segment " + JSON.stringify(seg));
  }).join("");
}

const texts = new Map();
function pieceText(pid) {
  let t = texts.get(pid);
  if (t === undefined) {
    t = decodeRef(P[pid][1]);
    texts.set(pid, t);
  }
  return t;
}

const previews = new Map();
function preview(pid) {
  let p = previews.get(pid);
  if (p === undefined && P[pid][7] >= 0) { p = S[P[pid][7]]; previews.set(pid, p); } // command or summary
  if (p === undefined) {
    const t = pieceText(pid);
    p = "";
    let start = 0;
    while (start <= t.length && start < 200000) {
      let end = t.indexOf("\n", start);
      if (end < 0) end = t.length;
      const line = t.slice(start, end).trim();
      if (line && !/^\[step \d+\]$/.test(line) && !/^<\/?(returncode|output)>/.test(line)) { p = line; break; }
      start = end + 1;
    }
    p = p.replace(/^\[context-manager\]\s*/, ""); // the row's color already says it is a note or stub
    p = p.length > 220 ? p.slice(0, 220) + "…" : p;
    previews.set(pid, p);
  }
  return p;
}

const shownOf = (pid) => SHOWN[P[pid][4]];
const partOf = (pid) => PART[P[pid][3]];
const stepOf = (pid) => P[pid][2];
const coversOf = (pid) => P[pid][5];
const tokensOf = (pid) => P[pid][6];
const cls = (shown) => "s-" + (shown === "trimmed" ? "stub" : shown === "prefix" ? "received" : shown);

function span(list) {
  if (!list.length) return "";
  const runs = [];
  let a = list[0], b = list[0];
  for (const x of list.slice(1)) {
    if (x === b + 1) { b = x; continue; }
    runs.push(a === b ? `${a}` : `${a}–${b}`); a = b = x;
  }
  runs.push(a === b ? `${a}` : `${a}–${b}`);
  return runs.join(", ");
}

function label(pid, inPrompt) {
  const part = partOf(pid), step = stepOf(pid), shown = shownOf(pid), cov = coversOf(pid);
  if (part === "system") return "system prompt";
  if (part === "task") return "task";
  if (part === "note" || part === "span") {
    const kind = part === "span" ? "folded span" : "note";
    return cov.length ? `${cov.length > 1 ? "steps" : "step"} ${span(cov)} · ${kind}` : kind;
  }
  let s = `step ${step} · ${part}`;
  if (inPrompt && (shown === "stub" || shown === "trimmed" || shown === "note")) s += ` · ${shown}`;
  if (shown === "restored") s += ` · restores ${span(cov)}`;
  return s;
}

/* The history so far at a call: prefix, then reply and outputs of steps 1..call-1. */
function historyRows(call) {
  const h = D.history;
  const rows = h.prefix.map((pid, j) => ({ pid, step: 0, kind: "prefix", j }));
  for (let s = 1; s < call; s++) {
    const st = h.steps[s - 1];
    rows.push({ pid: st.reply, step: s, kind: "reply", j: 0 });
    st.outputs.forEach((pid, j) => rows.push({ pid, step: s, kind: "output", j }));
  }
  return rows;
}

/* Where each history piece went in the prompt: its prompt row and how it is shown there. */
function placement(prompt) {
  const reply = new Map(), out = new Map(), note = new Map(), counts = new Map();
  prompt.forEach((pid, row) => {
    const part = partOf(pid), step = stepOf(pid);
    if (part === "reply") reply.set(step, row);
    else if (part === "output") {
      const j = counts.get(step) || 0;
      counts.set(step, j + 1);
      out.set(`${step}:${j}`, row);
    } else if (part !== "system" && part !== "task") for (const s of coversOf(pid)) note.set(s, row); // note, span
  });
  const pre = [];
  prompt.forEach((pid, row) => { if (!stepOf(pid) && (partOf(pid) === "system" || partOf(pid) === "task")) pre.push(row); });
  const shift = Math.max(0, pre.length - D.history.prefix.length); // a system prompt the policy added
  return (r) => {
    if (r.kind === "prefix") {
      const row = pre[r.j + shift];
      return { row: row === undefined ? -1 : row, shown: row === undefined ? "hidden" : "received" };
    }
    const row = r.kind === "reply" ? reply.get(r.step) : out.get(`${r.step}:${r.j}`);
    if (row !== undefined) {
      const sh = shownOf(prompt[row]);
      return { row, shown: sh === "prefix" ? "received" : sh };
    }
    if (note.has(r.step)) return { row: note.get(r.step), shown: "note" };
    return { row: -1, shown: "hidden" };
  };
}
