/* refold view: controls (policy, switches, slider, keyboard, jump, play) and start-up. */
"use strict";

function sameSettings(a, b) { return JSON.stringify(a.settings) === JSON.stringify(b.settings); }

function renderNotice() {
  const sel = selected(), v = variant();
  const msgs = [];
  if (sel.switches && sel.switches.fold && D.marks === 0)
    msgs.push("No reply in this run marks a step STALE, so fold has nothing to fold here (switching it off changes nothing); `refold view --stale hindsight` simulates marks.");
  if (D.stale_source !== "recorded" && sel.uses_stale)
    msgs.push(`STALE marks are SIMULATED (${D.stale_source}): the recorded replies did not carry them.`);
  if (v.id !== sel.id) msgs.push(`In this run these prompts are identical to those of “${VARIANTS.get(v.id).label}”.`);
  if (v.events) msgs.push("Compaction summaries are SIMULATED (no LLM runs in a replay).");
  if (!sel.switches) msgs.push("The mechanism switches apply to refold's renderer; this policy is not one of its configurations.");
  $("notice").textContent = msgs.join(" ");
}

function syncControls() {
  $("compare").value = state.compare;
  const sel = selected();
  const named = D.variants.find((x) => x.kind === "policy" && sameSettings(x, sel) && x.switches);
  const select = $("policy");
  select.value = sel.kind === "policy" ? sel.id : named ? named.id : "custom";
  $("custom-opt").hidden = select.value !== "custom";
  for (const input of document.querySelectorAll("#switches input")) {
    input.disabled = !sel.switches;
    input.checked = !!(sel.switches && sel.switches[input.dataset.switch]);
  }
  $("total-label").textContent = sel.label;
}

function renderCharts() {
  const v = variant();
  const w = compareV();
  const key = v.id + "|" + (w ? w.id : "");
  if (view.chartsFor === key) return;
  view.chartsFor = key;
  const base = baseV().tokens;
  view.markSize = drawSizeChart($("chart-size"), { tokens: v.tokens, cached: v.cached, base }, (c) => setCall(c));
  view.markTotal = drawTotalChart($("chart-total"), { tokens: v.tokens, base, other: w && w !== baseV() ? w.tokens : null }, (c) => setCall(c));
  $("compare-legend").hidden = !(w && w !== baseV());
  $("compare-label").textContent = w ? VARIANTS.get(state.compare).label : "";
}

function writeHash() {
  const cmp = state.compare ? `&compare=${encodeURIComponent(state.compare)}` : "";
  try { history.replaceState(null, "", `#call=${state.call}&policy=${encodeURIComponent(state.variant)}${cmp}`); } catch (e) { /* file:// may refuse */ }
}

function refresh() {
  const c = state.call;
  $("slider").value = String(c);
  $("call-label").textContent = `call ${c} / ${N}`;
  $("jump").value = String(c);
  const was = state.sel && rowAt(state.sel.pane, state.sel.idx);
  const keep = was ? { pane: state.sel.pane, step: was.dataset.step, part: was.dataset.part, anchor: was.dataset.anchor } : null;
  renderPanes();
  renderReply();
  renderBoundary();
  renderFigures();
  renderCharts();
  renderSearchInfo();
  view.markSize(c);
  view.markTotal(c);
  if (state.detail === "diff") showDiff();
  else if (keep) { // the same message at the new call, if it is there; else the panel closes
    const rows = [...$(PANES[keep.pane]).children];
    const i = rows.findIndex((r) => r.dataset.step === keep.step && r.dataset.part === keep.part && r.dataset.anchor === keep.anchor);
    if (i >= 0) select(keep.pane, i); else closePanel();
  }
  writeHash();
}

/* ---- search and filter ---------------------------------------------------------------------- */

function renderSearchInfo() {
  const info = $("search-info");
  if (!state.query) { info.textContent = ""; return; }
  const steps = matchingSteps();
  view.matches = steps;
  if (!steps.length) { info.textContent = "no match in the run"; return; }
  const here = $("prompt").querySelectorAll(".row.hit").length + $(PANES[state.compare ? "compare" : "history"]).querySelectorAll(".row.hit").length;
  const named = steps.map((s) => (s ? s : "task")).slice(0, 12).join(", ") + (steps.length > 12 ? ", …" : "");
  info.textContent = `in ${plural(steps.length, "step")} (${named}); ${plural(here, "row")} at this call`;
}

function setQuery(q) {
  state.query = q.trim().toLowerCase();
  view.matchAt = -1;
  refresh();
}

/* Enter: the next step that contains the query, at the first call that has it in its history. */
function nextMatch(dir) {
  const steps = matchingSteps();
  if (!steps.length) return;
  view.matchAt = (view.matchAt + dir + steps.length) % steps.length;
  const s = steps[view.matchAt];
  setCall(Math.min(N, s + 1));
  if (state.compare) return;
  const i = view.hist.findIndex((r) => r.step === s && matches(r.pid));
  if (i >= 0) select("history", i);
}

function setCall(c) {
  const n = Math.min(N, Math.max(1, Math.round(Number(c)) || 1));
  if (n === state.call && view.prompt.length) return;
  state.call = n;
  refresh();
}

function setCompare(id) {
  state.compare = VARIANTS.has(id) ? id : "";
  view.chartsFor = null;
  syncControls();
  renderSummary();
  refresh();
}

function setVariant(id) {
  if (!VARIANTS.has(id)) return;
  state.variant = id;
  syncControls();
  renderNotice();
  renderSummary();
  refresh();
}

function onSwitch() {
  const sw = {};
  for (const input of document.querySelectorAll("#switches input")) sw[input.dataset.switch] = input.checked;
  const id = "m" + D.switch_names.map((s) => (sw[s] ? "1" : "0")).join("");
  if (VARIANTS.has(id)) setVariant(id);
}

function togglePlay(force) {
  const on = force === undefined ? !state.timer : force;
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  if (on) {
    if (state.call >= N) setCall(1);
    state.timer = setInterval(() => { if (state.call >= N) togglePlay(false); else setCall(state.call + 1); }, 600);
  }
  $("play").textContent = state.timer ? "Pause" : "Play";
}

function init() {
  state.variant = D.default;
  document.title = `${D.title} · refold view`;
  $("title").textContent = D.title;
  const lost = (baseV().totals || {}).unreplied_calls || 0; // e.g. mini 2.x format errors: no reply to show
  const calls = lost ? `${N} model calls shown (${lost} more whose reply was not stored, e.g. format errors, are not in any figure here; refold replay counts them)` : `${N} model calls`;
  const meta = [D.source, calls, `tokenizer ${D.tokenizer}`, D.cache];
  if (D.meta.exit_status) meta.push(`exit: ${D.meta.exit_status}`);
  if (D.notice) meta.push(D.notice); // a Claude Code / Codex log: its counts miss the system prompt and tools
  $("subtitle").textContent = meta.filter(Boolean).join(" · ");
  $("foot").textContent = `${D.format} · generated by refold · works offline: everything is in this file.`;
  const select = $("policy");
  for (const v of D.variants) if (v.kind === "policy") select.appendChild(el("option", { value: v.id }, v.label));
  select.appendChild(el("option", { value: "custom", id: "custom-opt" }, "custom (switches)"));
  select.addEventListener("change", () => { if (select.value !== "custom") setVariant(select.value); });
  const cmp = $("compare");
  for (const v of D.variants) if (v.kind === "policy") cmp.appendChild(el("option", { value: v.id }, v.label));
  cmp.addEventListener("change", () => setCompare(cmp.value));
  let typing = null;
  $("search").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => setQuery($("search").value), 150); });
  $("search").addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    clearTimeout(typing);
    if ($("search").value.trim().toLowerCase() !== state.query) setQuery($("search").value);
    nextMatch(ev.shiftKey ? -1 : 1);
  });
  $("search-next").addEventListener("click", () => nextMatch(1));
  $("search-prev").addEventListener("click", () => nextMatch(-1));
  $("filter").addEventListener("change", () => { state.filter = $("filter").value; refresh(); });
  for (const pane of ["history", "prompt", "compare"]) $(PANES[pane]).addEventListener("scroll", () => syncScroll(pane), { passive: true });
  for (const pane of ["history", "prompt", "compare"]) $(PANES[pane]).addEventListener("click", rowClick);
  $("diff").addEventListener("click", () => showDiff());
  $("detail-close").addEventListener("click", () => closePanel());
  const box = $("switches");
  for (const s of D.switch_names) {
    const l = el("label", { title: `refold with ${s} on or off` });
    const input = el("input", { type: "checkbox", dataset: { switch: s }, "data-testid": `switch-${s}` });
    input.addEventListener("change", onSwitch);
    l.appendChild(input);
    l.appendChild(document.createTextNode(s));
    box.appendChild(l);
  }
  const slider = $("slider");
  slider.max = String(N);
  slider.addEventListener("input", () => setCall(slider.value));
  $("prev").addEventListener("click", () => setCall(state.call - 1));
  $("next").addEventListener("click", () => setCall(state.call + 1));
  $("play").addEventListener("click", () => togglePlay());
  $("jump").max = String(N);
  $("jump-form").addEventListener("submit", (ev) => { ev.preventDefault(); setCall($("jump").value); });
  document.addEventListener("keydown", (ev) => {
    const t = ev.target;
    if (ev.key === "Escape") { closePanel(); return; }
    const typing = t instanceof HTMLInputElement ? !["checkbox", "radio", "button", "submit"].includes(t.type)
      : t instanceof HTMLElement && (t.tagName === "SELECT" || t.tagName === "TEXTAREA");
    if (typing) return; // a text field, the slider or a list keeps its keys; a ticked checkbox does not
    const moves = { ArrowLeft: -1, ArrowRight: 1, PageUp: -10, PageDown: 10 };
    if (ev.key in moves) setCall(state.call + moves[ev.key]);
    else if (ev.key === "Home") setCall(1);
    else if (ev.key === "End") setCall(N);
    else if (ev.key === " " && !(t instanceof HTMLButtonElement || t instanceof HTMLInputElement)) togglePlay();
    else if (ev.key === "g") { $("jump").focus(); $("jump").select(); }
    else if (ev.key === "/") { $("search").focus(); }
    else if (ev.key === "d") showDiff();
    else return;
    ev.preventDefault();
  });
  const hash = new URLSearchParams(location.hash.slice(1));
  state.variant = VARIANTS.has(hash.get("policy") || "") ? hash.get("policy") : D.default;
  state.call = Math.min(N, Math.max(1, Number(hash.get("call")) || 1));
  state.compare = VARIANTS.has(hash.get("compare") || "") ? hash.get("compare") : "";
  setVariant(state.variant);
}

/* A large report takes a moment to parse and draw: say so (the banner is in the HTML, so it shows
   before any script runs), then let the browser paint it before each slow phase. */
function start() {
  const say = (t) => { $("loading-text").textContent = t; };
  const raw = document.getElementById("refold-data").textContent.length;
  say(`Building the view… reading ${(raw / 1048576).toFixed(1)} MB of embedded data`);
  setTimeout(() => {
    loadData();
    say(`Building the view… drawing ${fmt(N)} calls, ${fmt(D.variants.length)} renderings`);
    setTimeout(() => {
      init();
      $("loading").hidden = true;
      document.body.dataset.ready = "1";
    }, 0);
  }, 0);
}

start();
