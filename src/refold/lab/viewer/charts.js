/* refold view: the two SVG charts (prompt size per call, cumulative prompt tokens). No dependencies. */
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

function fmtTokens(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + "M";
  if (n >= 1e3) return (n / 1e3).toFixed(n >= 1e4 ? 0 : 1) + "k";
  return String(Math.round(n));
}

const CHART = { w: 640, h: 250, l: 44, r: 10, t: 10, b: 24 };

function chartFrame(container, n, maxY) {
  container.textContent = "";
  const svg = svgEl("svg", { viewBox: `0 0 ${CHART.w} ${CHART.h}`, role: "img" }, container);
  const pw = CHART.w - CHART.l - CHART.r;
  const ph = CHART.h - CHART.t - CHART.b;
  const top = maxY > 0 ? maxY * 1.05 : 1;
  const x = (i) => CHART.l + (i * pw) / n; // left edge of call i (0-based)
  const y = (v) => CHART.t + ph - (v / top) * ph;
  for (const f of [0, 0.5, 1]) {
    const v = maxY * f;
    svgEl("line", { class: "axis", x1: CHART.l, x2: CHART.w - CHART.r, y1: y(v), y2: y(v) }, svg);
    svgEl("text", { x: CHART.l - 4, y: y(v) + 3, "text-anchor": "end" }, svg).textContent = fmtTokens(v);
  }
  for (const c of [1, Math.ceil(n / 2), n]) {
    if (c < 1) continue;
    const t = svgEl("text", { x: x(c - 0.5), y: CHART.h - 8, "text-anchor": "middle" }, svg);
    t.textContent = c === 1 ? "call 1" : String(c);
  }
  return { svg, x, y, pw, ph };
}

/* Bars: cached + recomputed prompt tokens per call; line: base. Returns a function that marks a call. */
function drawSizeChart(container, series, onPick) {
  const { tokens, cached, base } = series;
  const n = tokens.length;
  const maxY = [...tokens, ...base].reduce((a, b) => Math.max(a, b), 1); // no spread into Math.max: a long run's calls
  const { svg, x, y } = chartFrame(container, n, maxY);
  const bw = (CHART.w - CHART.l - CHART.r) / n;
  const gap = bw > 4 ? Math.min(1, bw * 0.15) : 0;
  const y0 = y(0);
  for (let i = 0; i < n; i++) {
    const g = svgEl("g", { class: "bar", "data-call": i + 1 }, svg);
    const yc = y(cached[i]);
    const yt = y(tokens[i]);
    svgEl("rect", { x: x(i) + gap / 2, y: yc, width: Math.max(0.5, bw - gap), height: Math.max(0, y0 - yc), fill: "var(--cached)" }, g);
    svgEl("rect", { x: x(i) + gap / 2, y: yt, width: Math.max(0.5, bw - gap), height: Math.max(0, yc - yt), fill: "var(--recomputed)" }, g);
    const hit = svgEl("rect", { class: "hit", "data-call": i + 1, x: x(i), y: CHART.t, width: bw, height: y0 - CHART.t, fill: "transparent" }, g);
    svgEl("title", {}, hit).textContent =
      `call ${i + 1}: ${tokens[i].toLocaleString()} prompt tokens, ${cached[i].toLocaleString()} cached (simulated), ` +
      `${(tokens[i] - cached[i]).toLocaleString()} recomputed; base ${base[i].toLocaleString()}`;
    g.addEventListener("click", () => onPick(i + 1));
  }
  const pts = base.map((v, i) => `${(x(i) + bw / 2).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  svgEl("polyline", { points: pts, fill: "none", stroke: "var(--base)", "stroke-width": 1.8, "pointer-events": "none" }, svg);
  const cur = svgEl("rect", { class: "cur", y: CHART.t - 2, height: y0 - CHART.t + 4, width: Math.max(2, bw), "pointer-events": "none" }, svg);
  return (call) => cur.setAttribute("x", String(x(call - 1)));
}

/* Two running totals; click anywhere to jump to the nearest call. Returns a function that marks a call. */
function drawTotalChart(container, series, onPick) {
  const { tokens, base, other } = series;
  const n = tokens.length;
  const sum = (a) => { let s = 0; return a.map((v) => (s += v)); };
  const ct = sum(tokens);
  const cb = sum(base);
  const co = other ? sum(other) : null; // the policy shown side by side
  const maxY = Math.max(1, ct[n - 1] || 0, cb[n - 1] || 0, co ? co[n - 1] || 0 : 0);
  const { svg, x, y } = chartFrame(container, n, maxY);
  const mid = (i) => x(i + 0.5);
  const line = (a, color) => svgEl("polyline", {
    points: a.map((v, i) => `${mid(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
    fill: "none", stroke: color, "stroke-width": 2, "pointer-events": "none",
  }, svg);
  line(cb, "var(--base)");
  if (co) line(co, "var(--other)").setAttribute("stroke-dasharray", "5 3");
  line(ct, "var(--policy)");
  const hit = svgEl("rect", { class: "hit", x: CHART.l, y: CHART.t, width: CHART.w - CHART.l - CHART.r, height: y(0) - CHART.t, fill: "transparent" }, svg);
  hit.style.cursor = "pointer";
  hit.addEventListener("click", (ev) => {
    const m = svg.getScreenCTM();
    if (!m) return;
    const px = (ev.clientX - m.e) / m.a;
    const i = Math.floor(((px - CHART.l) / (CHART.w - CHART.l - CHART.r)) * n);
    onPick(Math.min(n, Math.max(1, i + 1)));
  });
  const cur = svgEl("line", { class: "cur", y1: CHART.t, y2: y(0), "pointer-events": "none" }, svg);
  const dotT = svgEl("circle", { r: 3.5, fill: "var(--policy)", "pointer-events": "none" }, svg);
  const dotB = svgEl("circle", { r: 3.5, fill: "var(--base)", "pointer-events": "none" }, svg);
  const tip = svgEl("title", {}, hit);
  return (call) => {
    const i = call - 1;
    cur.setAttribute("x1", String(mid(i)));
    cur.setAttribute("x2", String(mid(i)));
    dotT.setAttribute("cx", String(mid(i)));
    dotT.setAttribute("cy", String(y(ct[i])));
    dotB.setAttribute("cx", String(mid(i)));
    dotB.setAttribute("cy", String(y(cb[i])));
    tip.textContent = `after call ${call}: ${ct[i].toLocaleString()} prompt tokens vs base ${cb[i].toLocaleString()}`;
  };
}
