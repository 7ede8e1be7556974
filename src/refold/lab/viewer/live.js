/* refold view served by the proxy (D.live): expand any step or span byte-exact from the session's
   history, and pin or unpin it so the agent's next prompt shows it as first shown. Requests are
   same-origin JSON POSTs (a cross-site page can send neither that content type nor this Origin). */

function liveRequest(method, path, body) {
  const opts = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  return fetch(D.live.base + path, opts).then((r) => r.json().catch(() => ({})).then((data) => {
    if (!r.ok) throw new Error((data.error && data.error.message) || `HTTP ${r.status}`);
    return data;
  }));
}

function livePins(pins) {
  const box = $("live-pins");
  box.replaceChildren();
  if (!pins.length) { box.textContent = "nothing pinned"; return; }
  box.appendChild(document.createTextNode("pinned: "));
  for (const p of pins) {
    const b = el("button", { type: "button", class: "pin-chip", title: `Unpin ${p}`, dataset: { item: p } }, `${p} ✕`);
    b.addEventListener("click", () => livePin(p, false));
    box.appendChild(b);
  }
}

function liveSay(text, bad) {
  const s = $("live-status");
  s.textContent = text;
  s.classList.toggle("bad", !!bad);
}

function liveExpand(item) {
  item = (item || $("live-item").value).trim();
  if (!item) { liveSay("name a step (7), an output (7.2), a reply (r7), steps 3-5 or a span S1", true); return; }
  $("live-item").value = item;
  liveRequest("GET", `/expand?item=${encodeURIComponent(item)}`).then((data) => {
    $("live-text").hidden = false;
    $("live-text").textContent = data.text;
    liveSay(`${data.item}: as first shown to the model, read from the history (nothing ran)`);
  }).catch((e) => liveSay(e.message, true));
}

function livePin(item, on) {
  item = (item || $("live-item").value).trim();
  if (!item) { liveSay("name a step (7), an output (7.2), a reply (r7), steps 3-5 or a span S1", true); return; }
  liveRequest("POST", "/pins", { item, pin: on }).then((data) => {
    livePins(data.pins);
    liveSay(on ? `${data.item} pinned: the agent's next prompt shows it as first shown (reload to see that prompt here)`
               : `${data.item} unpinned: it may be shown shorter again from the agent's next prompt`);
  }).catch((e) => liveSay(e.message, true));
}

function initLive() {
  const bar = el("section", { class: "live", id: "live", "aria-label": "Session" });
  bar.appendChild(el("b", {}, `session ${D.live.session}`));
  const input = el("input", { id: "live-item", type: "text", placeholder: "7, 7.2, r7, 3-5 or S1", "aria-label": "Step or span", "data-testid": "live-item" });
  input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); liveExpand(); } });
  bar.appendChild(input);
  for (const [label, fn] of [["Expand", () => liveExpand()], ["Pin", () => livePin(null, true)], ["Unpin", () => livePin(null, false)]]) {
    const b = el("button", { type: "button", id: `live-${label.toLowerCase()}` }, label);
    b.addEventListener("click", fn);
    bar.appendChild(b);
  }
  bar.appendChild(el("span", { id: "live-pins", class: "live-pins", "data-testid": "live-pins" }));
  bar.appendChild(el("p", { id: "live-status", class: "live-status", role: "status", "data-testid": "live-status" }));
  const pre = el("pre", { id: "live-text", class: "text live-text", "data-testid": "live-text" });
  pre.hidden = true;
  bar.appendChild(pre);
  document.querySelector("header.top").after(bar);
  livePins(D.live.pins);
}

// This file is only in pages the proxy serves. The page calls init() once its data is read.
const initPage = init;
init = function () { initPage(); initLive(); }; // eslint-disable-line no-func-assign
const showPanel = showDetail;
// the side panel of a row offers the same, for that row's step
showDetail = function (pane, idx) { // eslint-disable-line no-func-assign
  showPanel(pane, idx);
  const step = stepOf(pidAt(pane, idx));
  if (!step) return;
  const p = el("p", { class: "live-actions", "data-testid": "live-actions" });
  for (const [label, fn] of [[`Expand step ${step}`, () => liveExpand(String(step))], [`Pin step ${step}`, () => livePin(String(step), true)], [`Unpin step ${step}`, () => livePin(String(step), false)]]) {
    const b = el("button", { type: "button" }, label);
    b.addEventListener("click", fn);
    p.appendChild(b);
  }
  $("detail").appendChild(p);
};
