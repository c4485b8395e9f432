// The gradiopool dashboard. It draws what GET /api/admin/history returns
// and computes nothing the API does not: every number is a field of it.
"use strict";

const state = { points: [], events: [], interval: 5, capacity: 720, last: 0, timer: 0 };
const palette = ["#2f7ed8", "#e4572e", "#17a398", "#f3a712", "#8e5ea2", "#6b8f71", "#c1666b", "#4f6d7a"];

function $(sel, root) { return (root || document).querySelector(sel); }
function setField(root, name, text) {
  const el = root.querySelector('[data-field="' + name + '"]');
  if (el && el.textContent !== text) el.textContent = text;
}
function num(v, digits) {
  if (v === null || v === undefined) return "–";
  return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits === undefined ? 1 : digits });
}
function ms(v) { return v === null || v === undefined ? "–" : num(v, v < 10 ? 1 : 0) + " ms"; }
function pct(v) { return num(v * 100, 1) + " %"; }
function clock(unixMs) { return new Date(unixMs).toLocaleTimeString(); }

// Theme: the system's, unless the button chose one (kept in localStorage).
function applyTheme() {
  const t = localStorage.getItem("gradiopool-theme");
  if (t) document.documentElement.dataset.theme = t; else delete document.documentElement.dataset.theme;
}
function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : window.matchMedia("(prefers-color-scheme: dark)").matches;
  localStorage.setItem("gradiopool-theme", dark ? "light" : "dark");
  applyTheme();
}

function colorOf(name, names) { return palette[Math.max(0, names.indexOf(name)) % palette.length]; }

function replicaCard(name) {
  let card = document.querySelector('article.replica[data-replica="' + CSS.escape(name) + '"]');
  if (!card) {
    card = $("#replica-card").content.firstElementChild.cloneNode(true);
    card.dataset.replica = name;
    $("#replicas").appendChild(card);
  }
  return card;
}

function renderReplica(r, names) {
  const card = replicaCard(r.name);
  card.style.setProperty("--accent", colorOf(r.name, names));
  card.dataset.state = r.state;
  setField(card, "name", r.name);
  let stateText = r.state;
  if (r.permanent_failure) stateText += " · permanent failure (retried every minute)";
  else if (r.ejected_seconds_left > 0) stateText += " · " + num(r.ejected_seconds_left, 0) + " s left";
  setField(card, "state", stateText);
  setField(card, "in_use", String(r.in_use));
  setField(card, "idle", String(r.idle));
  setField(card, "connecting", String(r.connecting));
  setField(card, "max", String(r.max));
  setField(card, "waiting", String(r.waiting));
  setField(card, "space_queue", r.space_queue
    ? r.space_queue.size + " waiting · ETA " + num(r.space_queue.eta_seconds) + " s"
    : "not reported");
  setField(card, "calls_per_second", num(r.calls_per_second, 2));
  setField(card, "calls_total", num(r.calls_total, 0));
  setField(card, "error_rate", pct(r.error_rate));
  setField(card, "wait", ms(r.wait_p50_ms) + " / " + ms(r.wait_p95_ms));
  setField(card, "call", ms(r.call_p50_ms) + " / " + ms(r.call_p95_ms));
  setField(card, "health", r.healthy + " healthy · " + r.unhealthy + " unhealthy");
  setField(card, "last_error", r.last_error || "");
  const max = Math.max(r.max, r.in_use + r.idle + r.connecting, 1);
  const bar = card.querySelector(".bar");
  bar.querySelector(".in-use").style.width = (100 * r.in_use / max) + "%";
  bar.querySelector(".idle").style.width = (100 * r.idle / max) + "%";
  bar.querySelector(".connecting").style.width = (100 * r.connecting / max) + "%";
}

const svgNS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs) {
  const el = document.createElementNS(svgNS, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  return el;
}

// drawChart draws one field of every replica over the kept points.
function drawChart(box, field, names, scale) {
  const W = 600, H = 170, L = 44, R = 8, T = 8, B = 22;
  const pts = state.points;
  const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": field });
  let ymax = 0;
  for (const p of pts) for (const r of p.replicas || []) {
    const v = r[field];
    if (v !== null && v !== undefined) ymax = Math.max(ymax, v * scale);
  }
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const now = pts.length ? pts[pts.length - 1].unix_ms : Date.now();
  const x0 = now - state.capacity * state.interval * 1000;
  const x = (t) => L + (W - L - R) * (t - x0) / (now - x0 || 1);
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  svg.appendChild(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  svg.appendChild(svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  const lab = (tx, ty, text, anchor) => {
    const t = svgEl("text", { x: tx, y: ty, "text-anchor": anchor, class: "label" });
    t.textContent = text;
    svg.appendChild(t);
  };
  lab(L - 4, T + 10, num(ymax, ymax < 10 ? 1 : 0), "end");
  lab(L - 4, H - B, "0", "end");
  const span = state.capacity * state.interval;
  lab(L, H - 6, "−" + (span < 120 ? Math.round(span) + " s" : Math.round(span / 60) + " min"), "start");
  lab(W - R, H - 6, "now", "end");
  names.forEach((name) => {
    let d = "", pen = false;
    for (const p of pts) {
      const r = (p.replicas || []).find((q) => q.name === name);
      const v = r ? r[field] : null;
      if (v === null || v === undefined) { pen = false; continue; }
      d += (pen ? "L" : "M") + x(p.unix_ms).toFixed(1) + " " + y(v * scale).toFixed(1);
      pen = true;
    }
    if (d) svg.appendChild(svgEl("path", { d: d, class: "series", stroke: colorOf(name, names) }));
  });
  box.replaceChildren(svg);
}

function legend(names) {
  const ul = document.createElement("ul");
  ul.className = "legend";
  for (const n of names) {
    const li = document.createElement("li");
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = colorOf(n, names);
    li.append(sw, document.createTextNode(n));
    ul.appendChild(li);
  }
  return ul;
}

function renderEvents() {
  const body = $("#events");
  const rows = state.events.slice(-25).reverse().map((e) => {
    const tr = document.createElement("tr");
    tr.dataset.kind = e.kind;
    for (const text of [clock(e.unix_ms), e.kind.replace(/_/g, " "), e.replica || "", [e.reason, e.error].filter(Boolean).join(": ")]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    return tr;
  });
  body.replaceChildren(...rows);
}

function render(doc) {
  const last = state.points[state.points.length - 1];
  const names = doc.replicas && doc.replicas.length ? doc.replicas : (last ? last.replicas.map((r) => r.name) : []);
  if (last) {
    setField(document, "calls_per_second", num(last.calls_per_second, 2));
    setField(document, "in_use", String(last.in_use));
    setField(document, "waiting", String(last.waiting));
    setField(document, "user_assignments", String(last.user_assignments));
    setField(document, "updated", clock(last.unix_ms));
    const ready = last.replicas.filter((r) => r.state === "ready").length;
    setField(document, "status", ready + " of " + last.replicas.length + " replicas ready");
    for (const r of last.replicas) renderReplica(r, names);
  }
  document.querySelectorAll("[data-chart]").forEach((box) => {
    const field = box.dataset.chart;
    drawChart(box, field, names, field === "error_rate" ? 100 : 1);
    box.appendChild(legend(names));
  });
  renderEvents();
}

async function poll() {
  try {
    const res = await fetch("/api/admin/history?since=" + state.last, { credentials: "same-origin", cache: "no-store" });
    if (res.status === 401 || res.status === 403) { window.location.reload(); return; }
    if (!res.ok) throw new Error("HTTP " + res.status);
    const doc = await res.json();
    state.interval = doc.interval_seconds;
    state.capacity = doc.capacity;
    state.points = state.points.concat(doc.points).slice(-doc.capacity);
    state.events = doc.events;
    if (state.points.length) state.last = state.points[state.points.length - 1].unix_ms;
    document.body.classList.remove("stale");
    render(doc);
  } catch (err) {
    document.body.classList.add("stale");
    setField(document, "status", "no answer from the gateway (" + err.message + ")");
  }
  state.timer = setTimeout(poll, Math.max(500, state.interval * 1000));
}

applyTheme();
document.addEventListener("DOMContentLoaded", () => {
  $("#theme").addEventListener("click", toggleTheme);
  poll();
});
