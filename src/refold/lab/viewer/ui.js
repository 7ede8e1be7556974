/* refold view: the page (panes, detail, reply, controls). Uses viewer.js (data) and charts.js. */
"use strict";

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "dataset") Object.assign(e.dataset, v); else e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  return e;
}

const view = { prompt: [], hist: [], place: null, markSize: null, markTotal: null, chartsFor: null };

function variant() { return resolve(state.variant) || resolve(D.default); }
function selected() { return VARIANTS.get(state.variant) || variant(); }
const baseV = () => resolve(D.base);

/* ---- panes ---------------------------------------------------------------------------------- */

function makeRow(pane, idx, pid, shown, maxTok) {
  const tokens = tokensOf(pid);
  const b = el("button", { type: "button", class: `row ${cls(shown)}`, dataset: { pane, idx: String(idx), shown, step: String(stepOf(pid)), part: partOf(pid) } });
  b.appendChild(el("span", { class: "lbl" }, label(pid, pane === "prompt")));
  b.appendChild(el("span", { class: "pre" }, shown === "hidden" && pane === "history" ? "not sent · " + preview(pid) : preview(pid)));
  b.appendChild(el("span", { class: "n", title: "tokens (this message alone)" }, fmt(tokens)));
  const bar = el("i", { class: "bar" });
  bar.style.width = `${Math.max(0.5, (100 * tokens) / maxTok).toFixed(2)}%`;
  b.appendChild(bar);
  b.addEventListener("click", () => select(pane, idx));
  return b;
}

function renderPanes() {
  const v = variant();
  const c = state.call;
  const prompt = promptsOf(v)[c - 1];
  const hist = historyRows(c);
  const place = placement(prompt);
  view.prompt = prompt; view.hist = hist; view.place = place;
  const maxTok = Math.max(1, ...hist.map((r) => tokensOf(r.pid)), ...prompt.map(tokensOf));
  const cached = v.cached[c - 1];
  const fp = document.createDocumentFragment();
  let pos = 0;
  prompt.forEach((pid, i) => {
    const row = makeRow("prompt", i, pid, shownOf(pid), maxTok);
    if (pos + tokensOf(pid) > cached) row.classList.add("rc");
    pos += tokensOf(pid);
    fp.appendChild(row);
  });
  const fh = document.createDocumentFragment();
  let histTokens = 0;
  hist.forEach((r, i) => { histTokens += tokensOf(r.pid); fh.appendChild(makeRow("history", i, r.pid, place(r).shown, maxTok)); });
  $("prompt").replaceChildren(fp);
  $("history").replaceChildren(fh);
  follow();
  $("prompt-tokens").textContent = `${fmt(v.tokens[c - 1])} tokens · ${fmt(cached)} cached (simulated)`;
  $("history-tokens").textContent = `≈ ${fmt(histTokens)} tokens · ${c - 1} steps`;
}

/* Keep the newest step in view on the left and the first recomputed row on the right, scrolling
   only the panes (never the page). */
function reveal(pane, idx, where) {
  const box = $(pane), row = box.children[idx];
  if (!row) return;
  const top = row.offsetTop, bottom = top + row.offsetHeight;
  if (where === "nearest") {
    if (top < box.scrollTop) box.scrollTop = top - 8;
    else if (bottom > box.scrollTop + box.clientHeight) box.scrollTop = bottom - box.clientHeight + 8;
  } else box.scrollTop = Math.max(0, top - box.clientHeight / 3);
}

function follow() {
  $("history").scrollTop = $("history").scrollHeight;
  const rows = $("prompt").children;
  let first = rows.length - 1;
  for (let i = 0; i < rows.length; i++) if (rows[i].classList.contains("rc")) { first = i; break; }
  reveal("prompt", first, "third");
}

function linkedRows(pane, idx) {
  if (pane === "history") {
    const p = view.place(view.hist[idx]);
    return p.row >= 0 ? [["prompt", p.row]] : [];
  }
  const out = [];
  view.hist.forEach((r, i) => { if (view.place(r).row === idx) out.push(["history", i]); });
  return out;
}

function rowAt(pane, idx) { return $(pane).children[idx]; }

function select(pane, idx) {
  document.querySelectorAll(".row.sel, .row.linked").forEach((r) => r.classList.remove("sel", "linked"));
  state.sel = { pane, idx };
  const r = rowAt(pane, idx);
  if (r) r.classList.add("sel");
  const links = linkedRows(pane, idx);
  links.forEach(([p, i], n) => {
    const lr = rowAt(p, i);
    if (!lr) return;
    lr.classList.add("linked");
    if (n === 0) reveal(p, i, "nearest");
  });
  showDetail(pane, idx);
}

/* ---- detail --------------------------------------------------------------------------------- */

function tag(shown, text) { return el("span", { class: `tag ${cls(shown)}` }, text); }
function block(title, text) {
  const f = document.createDocumentFragment();
  f.appendChild(el("h3", {}, title));
  f.appendChild(el("pre", { class: "text" }, text));
  return f;
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

function outputIndex(idx) { // which output of its step the prompt row idx is
  const step = stepOf(view.prompt[idx]);
  let j = 0;
  for (let i = 0; i < idx; i++) if (stepOf(view.prompt[i]) === step && partOf(view.prompt[i]) === "output") j++;
  return j;
}

function showDetail(pane, idx) {
  const box = $("detail");
  box.replaceChildren();
  const pid = pane === "prompt" ? view.prompt[idx] : view.hist[idx].pid;
  const shown = pane === "prompt" ? shownOf(pid) : view.place(view.hist[idx]).shown;
  const head = el("p");
  head.appendChild(tag(shown, shown === "hidden" ? "in the history only" : shown));
  head.appendChild(el("b", {}, label(pid, pane === "prompt")));
  head.appendChild(document.createTextNode(` · ${fmt(tokensOf(pid))} tokens · ${pane === "prompt" ? "sent at" : "history at"} call ${state.call}`));
  box.appendChild(head);
  if (pane === "history") {
    box.appendChild(block("In the history, as recorded", pieceText(pid)));
    const p = view.place(view.hist[idx]);
    if (p.row < 0) box.appendChild(el("p", { class: "hint" }, "Not sent to the model at this call: in the history only."));
    else if (p.shown !== "received") box.appendChild(block(`In the prompt as ${p.shown === "note" ? "a note" : "a " + p.shown}`, pieceText(view.prompt[p.row])));
    else box.appendChild(el("p", { class: "hint" }, "Sent to the model as received."));
    return;
  }
  box.appendChild(block("Sent to the model", pieceText(pid)));
  const step = stepOf(pid), cov = coversOf(pid), part = partOf(pid);
  if (shown === "stub" || shown === "trimmed" || (shown === "note" && part === "output")) {
    const st = D.history.steps[step - 1];
    const orig = st && st.outputs[Math.min(outputIndex(idx), st.outputs.length - 1)];
    if (orig !== undefined) box.appendChild(block(`Original output of step ${step}, in the history`, pieceText(orig)));
    const others = cov.filter((s) => s !== step);
    if (others.length) {
      const p = el("p", { class: "hint" }, `The repeated content is still shown at step ${span(others)}: `);
      for (const s of others) {
        const b = el("button", { type: "button" }, `step ${s}`);
        b.addEventListener("click", () => { const i = view.prompt.findIndex((q) => stepOf(q) === s && partOf(q) === "output"); if (i >= 0) select("prompt", i); });
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

/* ---- reply, boundary, summary --------------------------------------------------------------- */

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

function renderBoundary() {
  const v = variant();
  const c = state.call;
  const st = v.stats[c - 1];
  const parts = [];
  if (st) {
    const [b, stubs, trimmed, folded, notes, restores] = st;
    const t = c - 1;
    const k = selected().settings.k;
    parts.push(b >= t ? `boundary b = ${b}: every step so far may be condensed` :
      `boundary b = ${b}${k ? ` (k = ${k})` : ""}: ${b ? `steps 1–${b} may be condensed, ` : ""}steps ${b + 1}–${t} are sent as received`);
    parts.push(`${stubs} stub${stubs === 1 ? "" : "s"}, ${trimmed} trimmed`, `${folded} folded step${folded === 1 ? "" : "s"} in ${notes} note${notes === 1 ? "" : "s"}`, `${restores} restore${restores === 1 ? "" : "s"}`);
  } else {
    const notes = view.prompt.filter((p) => shownOf(p) === "note").length;
    parts.push(`${notes} piece${notes === 1 ? "" : "s"} replaced by notes`);
  }
  const ev = v.events && v.events[c - 1];
  if (ev) parts.push(`a SIMULATED compaction summarized steps ${ev[1]}–${ev[2]} before this call (~${fmt(ev[0])} tokens)`);
  $("boundary").textContent = parts.join(" · ");
}

function chip(title, value, sub) {
  const c = el("div", { class: "chip" });
  c.appendChild(el("b", {}, value));
  c.appendChild(document.createTextNode(title + (sub ? ` ${sub}` : "")));
  return c;
}

function renderSummary() {
  const v = variant(), b = baseV();
  const sum = (a) => a.reduce((x, y) => x + y, 0);
  const tv = sum(v.tokens), tb = sum(b.tokens), cv = sum(v.cached), cb = sum(b.cached);
  const pct = tb ? Math.round((100 * (tb - tv)) / tb) : 0;
  $("summary").replaceChildren(
    chip("prompt tokens", fmt(tv), `(base ${fmt(tb)})`),
    chip("vs base", `${pct >= 0 ? "−" : "+"}${Math.abs(pct)}%`),
    chip("cached, simulated", tv ? `${Math.round((100 * cv) / tv)}%` : "–"),
    chip("recomputed", fmt(tv - cv), `(base ${fmt(tb - cb)})`),
  );
}
