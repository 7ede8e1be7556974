/* refold view: the page (panes, side panel, diff, search, reply, figures). Uses viewer.js (data) and charts.js. */
"use strict";

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "dataset") Object.assign(e.dataset, v); else e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  return e;
}

const view = { prompt: [], prompt2: [], hist: [], place: null, keep: 0, markSize: null, markTotal: null, chartsFor: null, quiet: false, matchAt: -1 };
const PANES = { history: "history", prompt: "prompt", compare: "compare-rows" };

function variant() { return resolve(state.variant) || resolve(D.default); }
function selected() { return VARIANTS.get(state.variant) || variant(); }
const baseV = () => resolve(D.base);
const compareV = () => (state.compare ? resolve(state.compare) : null);
const plural = (n, one, many) => `${fmt(n)} ${n === 1 ? one : many || one + "s"}`;
const sum = (a) => a.reduce((x, y) => x + y, 0);

/* ---- search --------------------------------------------------------------------------------- */

const lowered = new Map();
function matches(pid) {
  if (!state.query) return false;
  let t = lowered.get(pid);
  if (t === undefined) { t = pieceText(pid).toLowerCase(); lowered.set(pid, t); }
  return t.includes(state.query);
}

/* Steps whose reply or outputs contain the query (0 = the system prompt or task). */
function matchingSteps() {
  if (!state.query) return [];
  const out = [];
  if (D.history.prefix.some(matches)) out.push(0);
  D.history.steps.forEach((st, i) => { if (matches(st.reply) || st.outputs.some(matches)) out.push(i + 1); });
  return out;
}

/* ---- panes ---------------------------------------------------------------------------------- */

function anchorOf(pid) { // the step a row is about: rows of every pane are ordered by it
  const cov = coversOf(pid);
  return stepOf(pid) || (cov.length ? cov[0] : 0);
}

function rowVisible(pane, pid, shown, isNew) {
  const f = state.filter;
  if (f === "reply") return partOf(pid) === "reply";
  if (f === "output") return partOf(pid) === "output";
  if (f === "condensed") return !(shown === "received" || shown === "prefix");
  if (f === "new") return isNew;
  if (f === "match") return matches(pid);
  return true;
}

let rowProto = null; // one row's elements, cloned per row (a long run draws ~20,000 rows per call)
function makeRow(pane, idx, pid, shown, classes, width, anchor) {
  if (!rowProto) {
    rowProto = el("button", { type: "button" });
    for (const c of ["lbl", "pre", "n"]) rowProto.appendChild(el("span", { class: c }));
    rowProto.lastChild.title = "tokens (this message alone)";
    rowProto.appendChild(el("i", { class: "bar" }));
  }
  const b = rowProto.cloneNode(true);
  b.className = classes;
  b.dataset.pane = pane; // clicks: one listener per pane (rowClick)
  b.dataset.idx = String(idx);
  b.dataset.shown = shown;
  b.dataset.step = String(stepOf(pid));
  b.dataset.part = partOf(pid);
  b.dataset.anchor = String(anchor);
  const [lbl, pre, n, bar] = b.children;
  lbl.textContent = label(pid, pane !== "history");
  pre.textContent = shown === "hidden" && pane === "history" ? "not sent · " + preview(pid) : preview(pid);
  n.textContent = fmt(tokensOf(pid));
  bar.style.width = width;
  return b;
}

/* The panes are redrawn at every call, row by row in place: a row that would be drawn exactly as
   it is (same message, classes, bar) is kept, so a step to the next call touches what changed. */
function putRow(at, pane, idx, pid, shown, maxTok, anchor, isNew, cache) {
  let c = `row ${cls(shown)}`;
  if (isNew) c += " new";
  if (matches(pid)) c += " hit";
  if (!rowVisible(pane, pid, shown, isNew)) c += " filtered";
  c += cache;
  const width = `${Math.max(0.5, (100 * tokensOf(pid)) / maxTok).toFixed(2)}%`;
  const sig = `${c}|${shown}|${pid}|${anchor}|${width}`;
  if (at && at.rowSig === sig) return at.nextElementSibling;
  const b = makeRow(pane, idx, pid, shown, c, width, anchor);
  b.rowSig = sig;
  if (at) { at.replaceWith(b); return b.nextElementSibling; }
  tailRows.appendChild(b); // rows past the pane's last one: added at once by endRows
  return null;
}
const tailRows = document.createDocumentFragment();

function endRows(box, at) { // drop the rows after the last one drawn, add the new ones
  while (at) { const next = at.nextElementSibling; at.remove(); at = next; }
  box.appendChild(tailRows);
}

function rowClick(ev) { // a pane's rows: select the one clicked
  const b = ev.target instanceof Element ? ev.target.closest(".row") : null;
  if (b && b.parentNode === ev.currentTarget && b.dataset.pane) select(b.dataset.pane, Number(b.dataset.idx));
}

function promptRows(box, pane, v, prompt, maxTok) {
  const c = state.call;
  const cached = v.cached[c - 1];
  const keep = v.calls[c - 1][0];
  // new = not in the previous call's prompt; a message after a change is recomputed but not new
  const before = c > 1 ? new Set(promptOf(v, c - 1).slice(keep)) : null;
  let pos = 0, cut = false, at = box.firstElementChild;
  prompt.forEach((pid, i) => {
    let cache = "";
    if (pos + tokensOf(pid) > cached) {
      cache = cut ? " rc" : " rc cut";
      cut = true;
    }
    pos += tokensOf(pid);
    at = putRow(at, pane, i, pid, shownOf(pid), maxTok, anchorOf(pid), before !== null && i >= keep && !before.has(pid), cache);
  });
  endRows(box, at);
}

function paneTokens(v) {
  const c = state.call;
  return `${fmt(v.tokens[c - 1])} tokens · ${fmt(v.cached[c - 1])} cached · ${fmt(v.tokens[c - 1] - v.cached[c - 1])} recomputed (simulated)`;
}

function renderPanes() {
  const v = variant(), w = compareV();
  const c = state.call;
  const prompt = promptOf(v, c);
  const hist = historyRows(c);
  const place = placement(prompt);
  const prompt2 = w ? promptOf(w, c) : [];
  Object.assign(view, { prompt, hist, place, prompt2, keep: v.calls[c - 1][0] });
  let maxTok = 1; // a loop: Math.max(...rows) throws past ~120k arguments (a very long run)
  for (const r of hist) maxTok = Math.max(maxTok, tokensOf(r.pid));
  for (const pid of prompt) maxTok = Math.max(maxTok, tokensOf(pid));
  for (const pid of prompt2) maxTok = Math.max(maxTok, tokensOf(pid));
  document.querySelectorAll(".row.sel, .row.linked").forEach((r) => r.classList.remove("sel", "linked"));
  promptRows($("prompt"), "prompt", v, prompt, maxTok);
  $("pane-history").hidden = !!w;
  $("pane-compare").hidden = !w;
  if (w) {
    promptRows($("compare-rows"), "compare", w, prompt2, maxTok);
    $("compare-name").textContent = VARIANTS.get(state.compare).label;
    $("compare-tokens").textContent = paneTokens(w);
    $("history").replaceChildren();
  } else {
    const box = $("history");
    let histTokens = 0, at = box.firstElementChild;
    hist.forEach((r, i) => { histTokens += tokensOf(r.pid); at = putRow(at, "history", i, r.pid, place(r).shown, maxTok, r.step, c > 1 && r.step === c - 1, ""); });
    endRows(box, at);
    $("compare-rows").replaceChildren();
    $("history-tokens").textContent = `≈ ${fmt(histTokens)} tokens · ${c - 1} steps`;
  }
  $("prompt-tokens").textContent = paneTokens(v);
  $("prompt-name").textContent = selected().label;
  follow();
}

/* Keep the newest step in view on the left and the first recomputed row on the right, scrolling
   only the panes (never the page). */
function reveal(pane, idx, where) {
  const box = $(PANES[pane]), row = box.children[idx];
  if (!row) return;
  const top = row.offsetTop, bottom = top + row.offsetHeight;
  if (where === "nearest") {
    if (top < box.scrollTop) box.scrollTop = top - 24;
    else if (bottom > box.scrollTop + box.clientHeight) box.scrollTop = bottom - box.clientHeight + 8;
  } else box.scrollTop = Math.max(0, top - box.clientHeight / 3);
}

function quiet() { // programmatic scrolls: the linked-scroll handler ignores them until the next frames
  view.quiet = true;
  requestAnimationFrame(() => requestAnimationFrame(() => { view.quiet = false; }));
}

function follow() {
  quiet();
  const left = state.compare ? "compare" : "history";
  for (const pane of state.compare ? ["prompt", "compare"] : ["prompt"]) {
    const rows = $(PANES[pane]).children;
    let first = rows.length - 1;
    for (let i = 0; i < rows.length; i++) if (rows[i].classList.contains("rc")) { first = i; break; }
    reveal(pane, first, "third");
  }
  if (left === "history") $("history").scrollTop = $("history").scrollHeight;
}

/* ---- linked scrolling: the top row of one pane decides the other's, by the step rows are about */

function topRow(box) {
  for (const row of box.children) if (row.offsetParent !== null && row.offsetTop + row.offsetHeight > box.scrollTop) return row;
  return null;
}

function syncScroll(fromPane) {
  if (view.quiet || !$("link-scroll").checked) return;
  const from = $(PANES[fromPane]);
  const other = fromPane === "prompt" ? (state.compare ? "compare" : "history") : "prompt";
  const to = $(PANES[other]);
  const row = topRow(from);
  if (!row) return;
  const a = Number(row.dataset.anchor);
  let target = null;
  for (const r of to.children) if (r.offsetParent !== null && Number(r.dataset.anchor) >= a) { target = r; break; }
  if (!target) target = to.lastElementChild;
  if (!target) return;
  const want = Math.max(0, target.offsetTop - (row.offsetTop - from.scrollTop));
  if (Math.abs(to.scrollTop - want) < 1) return;
  quiet();
  to.scrollTop = want;
}

/* ---- selection and the side panel ----------------------------------------------------------- */

function listOf(pane) { return pane === "prompt" ? view.prompt : pane === "compare" ? view.prompt2 : null; }
function pidAt(pane, idx) { return pane === "history" ? view.hist[idx].pid : listOf(pane)[idx]; }

function linkedRows(pane, idx) {
  if (pane === "history") {
    const p = view.place(view.hist[idx]);
    return p.row >= 0 ? [["prompt", p.row]] : [];
  }
  const pid = pidAt(pane, idx);
  if (state.compare) { // the same piece, or the same step and part, in the other policy's prompt
    const other = pane === "prompt" ? "compare" : "prompt";
    const list = listOf(other);
    let j = list.indexOf(pid);
    if (j < 0) j = list.findIndex((q) => stepOf(q) === stepOf(pid) && stepOf(q) && partOf(q) === partOf(pid));
    return j >= 0 ? [[other, j]] : [];
  }
  const out = [];
  view.hist.forEach((r, i) => { if (view.place(r).row === idx) out.push(["history", i]); });
  return out;
}

function rowAt(pane, idx) { return $(PANES[pane]).children[idx]; }

function openPanel(title) {
  $("detail-title").textContent = title;
  $("detail-panel").hidden = false;
  document.body.classList.add("side-open");
  $("detail").scrollTop = 0;
}

function closePanel() {
  $("detail-panel").hidden = true;
  document.body.classList.remove("side-open");
  document.querySelectorAll(".row.sel, .row.linked").forEach((r) => r.classList.remove("sel", "linked"));
  state.sel = null; state.detail = null;
}

function select(pane, idx) {
  document.querySelectorAll(".row.sel, .row.linked").forEach((r) => r.classList.remove("sel", "linked"));
  state.sel = { pane, idx };
  state.detail = "row";
  const r = rowAt(pane, idx);
  if (r) r.classList.add("sel");
  showDetail(pane, idx);
  if (state.query) showFirstMark();
  quiet();
  if (r) reveal(pane, idx, "nearest");
  linkedRows(pane, idx).forEach(([p, i], n) => {
    const lr = rowAt(p, i);
    if (!lr) return;
    lr.classList.add("linked");
    if (n === 0) reveal(p, i, "nearest");
  });
}

function tag(shown, text) { return el("span", { class: `tag ${cls(shown)}` }, text); }

function highlighted(text) { // the text with the search query marked (at most 500 marks)
  const pre = el("pre", { class: "text" });
  const q = state.query;
  if (!q) { pre.textContent = text; return pre; }
  const low = text.toLowerCase();
  let at = 0, n = 0;
  for (let i = low.indexOf(q); i >= 0 && n < 500; i = low.indexOf(q, i + q.length), n++) {
    pre.appendChild(document.createTextNode(text.slice(at, i)));
    pre.appendChild(el("mark", {}, text.slice(i, i + q.length)));
    at = i + q.length;
  }
  pre.appendChild(document.createTextNode(text.slice(at)));
  return pre;
}

function block(title, text) {
  const f = document.createDocumentFragment();
  f.appendChild(el("h3", {}, title));
  f.appendChild(highlighted(text));
  return f;
}

function kv(pairs) {
  const d = el("dl", { class: "kv" });
  for (const [k, v] of pairs) { d.appendChild(el("dt", {}, k)); d.appendChild(el("dd", {}, v)); }
  return d;
}

function stepFacts(s) { // what the run recorded about the call that produced step s
  const st = D.history.steps[s - 1];
  if (!st) return [];
  const out = [];
  if (st.commands.length) out.push(["command", st.commands.map((c) => c.split("\n")[0]).join(" ; ")]);
  if (st.recorded_prompt_tokens !== null && st.recorded_prompt_tokens !== undefined)
    out.push(["recorded prompt", `${fmt(st.recorded_prompt_tokens)} tokens` + (st.recorded_cached_tokens !== null && st.recorded_cached_tokens !== undefined ? `, ${fmt(st.recorded_cached_tokens)} cached` : "")]);
  if (st.recorded_cost !== null && st.recorded_cost !== undefined) out.push(["recorded cost", usd(st.recorded_cost)]);
  out.push(["latency", st.latency !== null && st.latency !== undefined ? `${st.latency_approx ? "≈ " : ""}${st.latency.toFixed(1)} s (recorded)` : "not recorded in this run"]);
  return out;
}

function stepDetails(s, open) {
  const st = D.history.steps[s - 1];
  const d = el("details", { class: "step", dataset: { step: String(s) } });
  if (open) d.open = true;
  d.appendChild(el("summary", {}, `step ${s}` + (st.progress ? ` · PROGRESS: ${st.progress}` : ` · ${preview(st.reply)}`)));
  const fill = () => {
    if (d.dataset.filled) return;
    d.dataset.filled = "1";
    d.appendChild(block(`Reply of step ${s}`, pieceText(st.reply)));
    st.outputs.forEach((pid, j) => d.appendChild(block(`Output of step ${s}${st.outputs.length > 1 ? ` (${j + 1})` : ""}`, pieceText(pid))));
  };
  if (open) fill(); else d.addEventListener("toggle", fill);
  return d;
}

function outputIndex(list, idx) { // which output of its step the prompt row idx is
  const step = stepOf(list[idx]);
  let j = 0;
  for (let i = 0; i < idx; i++) if (stepOf(list[i]) === step && partOf(list[i]) === "output") j++;
  return j;
}

function showDetail(pane, idx) {
  const box = $("detail");
  box.replaceChildren();
  const pid = pidAt(pane, idx);
  const shown = pane === "history" ? view.place(view.hist[idx]).shown : shownOf(pid);
  const who = pane === "compare" ? VARIANTS.get(state.compare).label : selected().label;
  openPanel(label(pid, pane !== "history"));
  const head = el("p");
  head.appendChild(tag(shown, shown === "hidden" ? "in the history only" : shown));
  head.appendChild(el("b", {}, label(pid, pane !== "history")));
  head.appendChild(document.createTextNode(` · ${fmt(tokensOf(pid))} tokens · ${pane === "history" ? "history at" : `sent by ${who} at`} call ${state.call}`));
  box.appendChild(head);
  const step = stepOf(pid);
  if (P[pid][7] >= 0) box.appendChild(kv([[partOf(pid) === "reply" ? "runs" : "summary", preview(pid)]]));
  if (step && partOf(pid) === "reply") box.appendChild(kv(stepFacts(step)));
  if (pane === "history") {
    box.appendChild(block("In the history, as recorded", pieceText(pid)));
    const p = view.place(view.hist[idx]);
    if (p.row < 0) box.appendChild(el("p", { class: "hint" }, "Not sent to the model at this call: in the history only."));
    else if (p.shown !== "received") box.appendChild(block(`In the prompt as ${p.shown === "note" ? "a note" : "a " + p.shown}`, pieceText(view.prompt[p.row])));
    else box.appendChild(el("p", { class: "hint" }, "Sent to the model as received."));
    return;
  }
  const list = listOf(pane);
  box.appendChild(block("Sent to the model", pieceText(pid)));
  const cov = coversOf(pid), part = partOf(pid);
  if (shown === "stub" || shown === "trimmed" || (shown === "note" && part === "output")) {
    const st = D.history.steps[step - 1];
    const orig = st && st.outputs[Math.min(outputIndex(list, idx), st.outputs.length - 1)];
    if (orig !== undefined) box.appendChild(block(`Original output of step ${step}, in the history`, pieceText(orig)));
    const others = cov.filter((s) => s !== step);
    if (others.length) {
      const p = el("p", { class: "hint" }, `The repeated content is still shown at step ${span(others)}: `);
      for (const s of others) {
        const b = el("button", { type: "button" }, `step ${s}`);
        b.addEventListener("click", () => { const i = list.findIndex((q) => stepOf(q) === s && partOf(q) === "output"); if (i >= 0) select(pane, i); });
        p.appendChild(b);
      }
      box.appendChild(p);
    }
  } else if (shown === "note" || shown === "restored") {
    const steps = shown === "note" ? cov : cov.filter((s) => s !== step);
    box.appendChild(el("h3", {}, shown === "note" ? `The ${steps.length} folded step${steps.length > 1 ? "s" : ""}, as recorded` : `Restores step ${span(steps)}, as recorded`));
    steps.slice(0, 400).forEach((s, i) => box.appendChild(stepDetails(s, i < 1)));
    if (steps.length > 400) box.appendChild(el("p", { class: "hint" }, `… and ${steps.length - 400} more steps.`));
  }
}

function showFirstMark() { // scroll the side panel (only it) to the first search match
  const box = $("detail"), mark = box.querySelector("mark");
  if (!mark) return;
  const pre = mark.closest("pre");
  const at = mark.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop;
  box.scrollTop = Math.max(0, at - box.clientHeight / 3);
  if (pre) pre.scrollTop = 0;
}

/* ---- diff of call N against call N-1 -------------------------------------------------------- */

function lineDiff(a, b) { // [["same"|"del"|"add", line]], common head and tail kept, LCS in between
  const x = a.split("\n"), y = b.split("\n");
  let h = 0;
  while (h < x.length && h < y.length && x[h] === y[h]) h++;
  let t = 0;
  while (t < x.length - h && t < y.length - h && x[x.length - 1 - t] === y[y.length - 1 - t]) t++;
  const xm = x.slice(h, x.length - t), ym = y.slice(h, y.length - t);
  const out = x.slice(0, h).map((l) => ["same", l]);
  if (xm.length * ym.length > 250000) {
    xm.forEach((l) => out.push(["del", l]));
    ym.forEach((l) => out.push(["add", l]));
  } else {
    const n = xm.length, m = ym.length;
    const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = xm[i] === ym[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && xm[i] === ym[j]) { out.push(["same", xm[i]]); i++; j++; }
      else if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) out.push(["add", ym[j++]]);
      else out.push(["del", xm[i++]]);
    }
  }
  x.slice(x.length - t).forEach((l) => out.push(["same", l]));
  return out;
}

function diffLines(a, b) {
  const box = el("div", { class: "text" });
  const rows = lineDiff(a, b);
  let skipped = 0;
  rows.forEach(([k, l], i) => {
    const near = rows.slice(Math.max(0, i - 2), i + 3).some((r) => r[0] !== "same");
    if (k === "same" && !near) { skipped++; return; }
    if (skipped) { box.appendChild(el("p", { class: "diff-line same" }, `  … ${skipped} unchanged line${skipped > 1 ? "s" : ""}`)); skipped = 0; }
    box.appendChild(el("p", { class: `diff-line ${k}` }, (k === "add" ? "+ " : k === "del" ? "− " : "  ") + l));
  });
  if (skipped) box.appendChild(el("p", { class: "diff-line same" }, `  … ${skipped} unchanged line${skipped > 1 ? "s" : ""}`));
  return box;
}

function diffRow(kind, pid) {
  const r = el("div", { class: `diff-row ${kind}` });
  r.appendChild(el("b", {}, kind === "add" ? "+" : "−"));
  const sh = shownOf(pid);
  const how = sh === "received" || sh === "prefix" ? " · as received" : label(pid, true).endsWith(sh) ? "" : ` · ${sh}`;
  r.appendChild(el("span", { class: "pre" }, `${label(pid, true)}${how} · ${fmt(tokensOf(pid))} tok · ${preview(pid)}`));
  return r;
}

function showDiff() {
  const v = variant(), c = state.call;
  const cur = promptOf(v, c), prev = c > 1 ? promptOf(v, c - 1) : [];
  const keep = v.calls[c - 1][0];
  state.detail = "diff";
  const box = $("detail");
  box.replaceChildren();
  openPanel(`Call ${c} against call ${c - 1 || "–"}`);
  if (c === 1) {
    box.appendChild(el("p", { class: "diff-summary" }, "Call 1 is the first: nothing was cached, every token is computed."));
    return;
  }
  const tok = (list, a, b) => sum(list.slice(a, b).map(tokensOf));
  const cached = v.cached[c - 1];
  let pos = 0, cutRow = cur.length;
  for (let i = 0; i < cur.length; i++) { if (pos + tokensOf(cur[i]) > cached) { cutRow = i; break; } pos += tokensOf(cur[i]); }
  const st = v.stats[c - 1], sp = v.stats[c - 2];
  const lines = [
    `${selected().label}: messages 1–${keep} are identical to call ${c - 1}'s (≈ ${fmt(tok(cur, 0, keep))} tokens); ` +
      `${plural(prev.length - keep, "message")} of call ${c - 1} changed or left, ${plural(cur.length - keep, "message")} are new or changed.`,
    `The cached prefix (simulated) holds ${fmt(cached)} of ${fmt(v.tokens[c - 1])} tokens: it ends ` +
      (cutRow >= cur.length ? "after the last message" : `in message ${cutRow + 1} (${label(cur[cutRow], true)})`) +
      `; ${fmt(v.tokens[c - 1] - cached)} tokens are recomputed.`,
  ];
  if (st && sp && st[0] !== sp[0]) lines.push(`The boundary moved from b = ${sp[0]} to b = ${st[0]}: steps up to ${st[0]} may now be condensed, which changes the prompt from their position on.`);
  else if (keep < prev.length) lines.push("Something before the end of the previous prompt changed (a restore, a span, a fold note or a ledger fold), so the cache stops there.");
  else lines.push(`Nothing of call ${c - 1}'s prompt changed: call ${c} appends step ${c - 1}'s reply and outputs.`);
  for (const l of lines) box.appendChild(el("p", { class: "diff-summary" }, l));
  const list = el("div", { class: "diff-list", "data-testid": "diff-list" });
  if (keep) list.appendChild(el("p", { class: "hint" }, `= messages 1–${keep} unchanged`));
  const removed = prev.slice(keep), added = cur.slice(keep);
  removed.forEach((pid) => list.appendChild(diffRow("del", pid)));
  added.forEach((pid) => list.appendChild(diffRow("add", pid)));
  box.appendChild(list);
  // the same message shown differently now (an output became a stub, a note grew): its text diff
  let pairs = 0;
  for (const pid of removed) {
    const twin = added.find((q) => stepOf(q) === stepOf(pid) && partOf(q) === partOf(pid) && anchorOf(q) === anchorOf(pid));
    if (twin === undefined || pairs >= 40) continue;
    pairs++;
    const d = el("details", { class: "pair" });
    d.appendChild(el("summary", {}, `${label(pid, true)}: ${shownOf(pid)} → ${shownOf(twin)} (${fmt(tokensOf(pid))} → ${fmt(tokensOf(twin))} tokens)`));
    d.appendChild(diffLines(pieceText(pid), pieceText(twin)));
    if (pairs === 1) d.open = true;
    box.appendChild(d);
  }
}

/* ---- reply, stats, figures, summary --------------------------------------------------------- */

function renderReply() {
  const c = state.call;
  const st = D.history.steps[c - 1];
  $("reply-sub").textContent = `at call ${c} (step ${c})`;
  const marks = $("marks");
  marks.replaceChildren();
  const sim = D.stale_source !== "recorded";
  if (!st.protocol) marks.appendChild(el("span", {}, "no PROGRESS/STALE lines in this reply"));
  if (st.progress !== null) marks.appendChild(el("span", {}, `PROGRESS: ${st.progress}`));
  if (st.protocol || st.stale.length) marks.appendChild(el("span", { class: "stale" }, `STALE: ${st.stale.length ? span(st.stale) : "–"}`));
  if (st.marks.length) marks.appendChild(el("span", {}, `counted (last ${D.k} steps): ${span(st.marks)}`));
  const ignored = st.stale.filter((s) => !st.marks.includes(s));
  if (ignored.length) marks.appendChild(el("span", { class: "bad" }, `ignored (outside the window): ${span(ignored)}`));
  if (sim && st.protocol) marks.appendChild(el("span", { class: "bad" }, `SIMULATED marks (${D.stale_source})`));
  const pre = $("reply");
  pre.replaceChildren();
  const text = pieceText(st.reply);
  for (const line of text.split("\n")) {
    if (/^[\s>#*_`\-+]*(PROGRESS|STALE)\s*[*_`]*\s*[:：\-–]/i.test(line)) pre.appendChild(el("mark", {}, line));
    else pre.appendChild(document.createTextNode(line));
    pre.appendChild(document.createTextNode("\n"));
  }
}

/* Every kind of omission in this prompt, counted from the prompt itself (so masking, spans and
   compaction count too, whatever the policy's own statistics cover). */
function omissions(prompt, hist, place) {
  const n = { stub: 0, trimmed: 0, masked: 0, replies: 0, notes: 0, folded: new Set(), spans: 0, spanSteps: new Set(), restored: 0, hidden: 0 };
  for (const pid of prompt) {
    const sh = shownOf(pid), part = partOf(pid);
    if (sh === "stub") n.stub++;
    else if (sh === "trimmed") n.trimmed++;
    else if (sh === "restored") n.restored++;
    else if (sh === "note" && part === "output") n.masked++;
    else if (sh === "note" && part === "reply") n.replies++;
    else if (part === "note") { n.notes++; coversOf(pid).forEach((s) => n.folded.add(s)); }
    else if (part === "span") { n.spans++; coversOf(pid).forEach((s) => n.spanSteps.add(s)); }
  }
  if (hist) for (const r of hist) if (place(r).row < 0) n.hidden++;
  return n;
}

function omissionText(n) {
  const parts = [
    plural(n.stub, "stub"), `${fmt(n.trimmed)} trimmed`, plural(n.masked, "masked output"),
    `${plural(n.folded.size, "folded step")} in ${plural(n.notes, "note")}`,
  ];
  if (n.replies) parts.push(plural(n.replies, "condensed reply", "condensed replies"));
  if (n.spans) parts.push(`${plural(n.spanSteps.size, "step")} in ${plural(n.spans, "folded span")}`);
  if (n.hidden) parts.push(`${plural(n.hidden, "history message")} not sent at all`);
  parts.push(plural(n.restored, "restore"));
  return parts.join(", ");
}

function renderBoundary() {
  const v = variant();
  const c = state.call;
  const st = v.stats[c - 1];
  const parts = [];
  if (st) {
    const b = st[0];
    const t = c - 1;
    const k = selected().settings.k;
    parts.push(b >= t ? `boundary b = ${b}: every step so far may be condensed` :
      `boundary b = ${b}${k ? ` (k = ${k})` : ""}: ${b ? `steps 1–${b} may be condensed, ` : ""}steps ${b + 1}–${t} are sent as received`);
  }
  parts.push("omitted: " + omissionText(omissions(view.prompt, view.hist, view.place)));
  const ev = v.events && v.events[c - 1];
  if (ev) parts.push(`a SIMULATED compaction summarized steps ${ev[1]}–${ev[2]} before this call (~${fmt(ev[0])} tokens)`);
  $("boundary").textContent = parts.join(" · ");
}

function figuresOf(v, c) {
  const n = v.tokens[c - 1], k = v.cached[c - 1];
  return `${fmt(n)} prompt tokens = ${fmt(k)} cached + ${fmt(n - k)} recomputed, ${usd(v.cost[c - 1])}`;
}

function renderFigures() {
  const v = variant(), b = baseV(), w = compareV(), c = state.call;
  const box = $("figures");
  box.replaceChildren();
  box.appendChild(el("b", {}, `Call ${c}: `));
  box.appendChild(el("span", { class: "sim", "data-testid": "figures-sim" }, `${selected().label}: ${figuresOf(v, c)} (simulated: vLLM prefix cache, ${D.price.name} prices)`));
  if (w) box.appendChild(document.createTextNode(` · ${VARIANTS.get(state.compare).label}: ${figuresOf(w, c)}`));
  if (v !== b && w !== b) box.appendChild(document.createTextNode(` · base: ${figuresOf(b, c)}`));
  const st = D.history.steps[c - 1];
  const rec = [];
  if (st.recorded_prompt_tokens !== null && st.recorded_prompt_tokens !== undefined) rec.push(`${fmt(st.recorded_prompt_tokens)} prompt tokens` + (st.recorded_cached_tokens !== null && st.recorded_cached_tokens !== undefined ? `, ${fmt(st.recorded_cached_tokens)} cached` : ""));
  if (st.recorded_cost !== null && st.recorded_cost !== undefined) rec.push(usd(st.recorded_cost));
  rec.push(st.latency !== null && st.latency !== undefined ? `latency ${st.latency_approx ? "≈ " : ""}${st.latency.toFixed(1)} s` : "latency not recorded");
  box.appendChild(document.createTextNode(" · "));
  box.appendChild(el("span", { class: "rec", "data-testid": "figures-recorded" }, `recorded in the run: ${rec.join(", ")}`));
}

function chip(title, value, sub) {
  const c = el("div", { class: "chip" });
  c.appendChild(el("b", {}, value));
  c.appendChild(document.createTextNode(title + (sub ? ` ${sub}` : "")));
  return c;
}

function renderSummary() {
  const v = variant(), b = baseV(), w = compareV();
  const tv = sum(v.tokens), tb = sum(b.tokens), cv = sum(v.cached), cb = sum(b.cached);
  const pct = (x, y) => { const p = y ? Math.round((100 * (y - x)) / y) : 0; return `${p >= 0 ? "−" : "+"}${Math.abs(p)}%`; };
  const chips = [
    chip("prompt tokens", fmt(tv), `(base ${fmt(tb)})`),
    chip("vs base", pct(tv, tb)),
    chip("cached, simulated", tv ? `${Math.round((100 * cv) / tv)}%` : "–"),
    chip("recomputed", fmt(tv - cv), `(base ${fmt(tb - cb)})`),
    chip("cost, simulated", usd(sum(v.cost)), `(base ${usd(sum(b.cost))})`),
  ];
  if (w && w !== b) chips.push(chip(`vs ${VARIANTS.get(state.compare).label}`, pct(tv, sum(w.tokens)), `(${fmt(sum(w.tokens))} tokens)`));
  $("summary").replaceChildren(...chips);
}
