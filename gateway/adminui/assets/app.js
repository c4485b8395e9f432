// The gradiopool dashboard. It draws what GET /api/admin/history returns
// and computes nothing the API does not: every number is a field of it.
"use strict";

// window is the charts' span: seconds back from now (never before the
// gateway's start), or "life" for the since-start series.
const state = {
  points: [], events: [], counts: {}, interval: 5, resolution: 5, capacity: 720, last: 0, timer: 0,
  window: localStorage.getItem("gradiopool-window") || "3600", series: "", gen: 0, epoch: -1, started: 0,
};
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
function duration(secs) {
  if (secs > 0 && secs < 10) return num(secs, secs < 1 ? 2 : 0) + " s"; // short test intervals
  secs = Math.max(0, Math.floor(secs));
  const d = Math.floor(secs / 86400), h = Math.floor(secs % 86400 / 3600), m = Math.floor(secs % 3600 / 60);
  if (d) return d + " d " + h + " h";
  if (h) return h + " h " + m + " min";
  if (m) return m + " min " + (secs % 60) + " s";
  return secs + " s";
}
function label(kind) { return kind.replace(/_/g, " "); }

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
    card.querySelectorAll("button[data-action]").forEach((b) =>
      b.addEventListener("click", () => control(name, b.dataset.action, card)));
    $("#replicas").appendChild(card);
  }
  return card;
}

// control drains, disables or enables a replica (the admin API, with the
// login cookie), then polls at once so that the card and the events show it.
async function control(name, action, card) {
  card.querySelectorAll("button[data-action]").forEach((b) => { b.disabled = true; });
  let msg = "";
  try {
    const res = await fetch("/api/admin/replicas/" + encodeURIComponent(name) + "/" + action,
      { method: "POST", credentials: "same-origin", cache: "no-store" });
    if (res.status === 401) { window.location.reload(); return; }
    const doc = await res.json().catch(() => ({}));
    if (res.ok) {
      card.dataset.operator = doc.operator;
      setField(card, "operator", doc.operator);
    } else {
      msg = (doc.error && doc.error.message) || ("HTTP " + res.status);
    }
  } catch (err) {
    msg = err.message;
  }
  setField(card, "control_error", msg);
  clearTimeout(state.timer);
  poll();
}

// health says what the sessions are worth now: a replica that takes no
// calls (ejected, hung, probing, held by an operator) only holds them,
// whatever their own last checks said.
function money(v) { return v === null || v === undefined ? "–" : "$" + Number(v).toFixed(2); }

function health(r) {
  if (r.serving) return r.healthy + " healthy · " + r.unhealthy + " unhealthy";
  const open = r.in_use + r.idle;
  const why = r.operator && r.operator !== "enabled" ? r.operator : r.state;
  return open + " open, not serving (" + why + ")";
}

function renderReplica(r, names) {
  const card = replicaCard(r.name);
  card.style.setProperty("--accent", colorOf(r.name, names));
  card.dataset.state = r.state;
  setField(card, "name", r.name);
  let stateText = r.state;
  if (r.permanent_failure) stateText += " · permanent failure (retried every minute)";
  else if (r.ejected_seconds_left > 0) stateText += " · " + num(r.ejected_seconds_left, 0) + " s left";
  const op = r.operator || "enabled";
  if (op !== "enabled") stateText += " · " + op;
  setField(card, "state", stateText);
  card.dataset.operator = op;
  card.dataset.serving = r.serving ? "true" : "false";
  setField(card, "operator", op);
  const already = { drain: op === "draining" || op === "drained", disable: op === "disabled", enable: op === "enabled" };
  for (const b of card.querySelectorAll("button[data-action]")) b.disabled = already[b.dataset.action];
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
  setField(card, "error_rate", pct(r.error_rate) + " · " + num(r.errors_total, 0) + " total");
  setField(card, "app_errors", pct(r.app_error_rate) + " · " + num(r.app_errors_total, 0) + " total");
  setField(card, "failovers_total", num(r.failovers_total, 0));
  setField(card, "ejections_total", num(r.ejections_total, 0));
  const c = state.counts[r.name] || {};
  setField(card, "sessions_created", num(c.session_created || 0, 0));
  setField(card, "sessions_destroyed", num(c.session_destroyed || 0, 0));
  setField(card, "wait", ms(r.wait_p50_ms) + " / " + ms(r.wait_p95_ms));
  setField(card, "call", ms(r.call_p50_ms) + " / " + ms(r.call_p95_ms));
  setField(card, "health", health(r));
  // autoscale (absent while it is off): the Space's stage, the policy's
  // state of the replica and why, its cost now.
  const auto = $("[data-autoscale]", card);
  auto.hidden = !r.stage;
  card.dataset.autoscale = r.autoscale_state || "";
  if (r.stage) {
    setField(card, "stage", r.stage + " · " + r.autoscale_state + (r.autoscale_why ? " (" + r.autoscale_why + ")" : "") +
      " · " + money(r.cost_per_hour) + "/h");
  }
  setField(card, "last_error", r.last_error
    ? (r.last_error_unix_ms ? "since " + clock(r.last_error_unix_ms) + ": " : "") + r.last_error
    : "");
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

// span is the charts' time axis: from x0 to x1 (Unix ms). A window never
// reaches before the gateway's start, so a young gateway's data fills the
// chart instead of a sliver at its right edge.
function span() {
  const pts = state.points;
  const x1 = pts.length ? pts[pts.length - 1].unix_ms : Date.now();
  let x0 = state.started || x1;
  if (state.window !== "life") x0 = Math.max(x0, x1 - Number(state.window) * 1000);
  return { x0: Math.min(x0, x1 - 1000), x1: x1 };
}

// drawChart draws one field of every replica over the points in span.
function drawChart(box, field, names, scale, sp) {
  const W = 600, H = 170, L = 44, R = 8, T = 8, B = 22;
  const pts = state.points.filter((p) => p.unix_ms >= sp.x0);
  const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": field,
    "data-x0": sp.x0, "data-x1": sp.x1, "data-window": state.window, "data-resolution": state.resolution,
    "data-first": pts.length ? pts[0].unix_ms : "" });
  let ymax = 0;
  for (const p of pts) for (const r of p.replicas || []) {
    const v = r[field];
    if (v !== null && v !== undefined) ymax = Math.max(ymax, v * scale);
  }
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const x = (t) => L + (W - L - R) * (t - sp.x0) / (sp.x1 - sp.x0);
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
  lab(L, H - 6, clock(sp.x0) + (sp.x0 <= state.started ? " (start)" : ""), "start");
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
    if (d) svg.appendChild(svgEl("path", { d: d, class: "series", stroke: colorOf(name, names), "data-replica": name }));
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

// fillSelect keeps a filter's options to values, keeping its choice.
function fillSelect(sel, values, text) {
  const chosen = sel.value;
  const want = [""].concat(values);
  const have = Array.from(sel.options).map((o) => o.value);
  if (want.join("\u0000") !== have.join("\u0000")) {
    sel.replaceChildren(...want.map((v) => {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = v ? text(v) : "all";
      return o;
    }));
  }
  sel.value = want.includes(chosen) ? chosen : "";
}

// renderEvents lists the latest events that pass the kind and replica
// filters, and the counts since the start (routine events, such as
// sessions created, are only counted by the gateway, never listed).
function renderEvents(names) {
  const kindSel = $("#filter-kind"), replicaSel = $("#filter-replica");
  const kinds = new Set(state.events.map((e) => e.kind));
  for (const r in state.counts) for (const k in state.counts[r]) kinds.add(k);
  const replicas = new Set(names);
  for (const r in state.counts) if (r) replicas.add(r);
  fillSelect(kindSel, Array.from(kinds).sort(), label);
  fillSelect(replicaSel, Array.from(replicas).sort(), (v) => v);
  const kind = kindSel.value, replica = replicaSel.value;

  const totals = {};
  for (const r in state.counts) {
    if (replica && r !== replica) continue;
    for (const k in state.counts[r]) {
      if (kind && k !== kind) continue;
      totals[k] = totals[k] || { n: 0, by: [] };
      totals[k].n += state.counts[r][k];
      if (r) totals[k].by.push(r + " " + state.counts[r][k]);
    }
  }
  $("#event-counts").replaceChildren(...Object.keys(totals).sort().map((k) => {
    const li = document.createElement("li");
    li.dataset.kind = k;
    li.dataset.count = totals[k].n;
    const b = document.createElement("b");
    b.textContent = num(totals[k].n, 0);
    const by = document.createElement("span");
    by.className = "muted";
    by.textContent = totals[k].by.length > 1 ? " (" + totals[k].by.join(" · ") + ")" : "";
    li.append(document.createTextNode(label(k) + " "), b, by);
    return li;
  }));

  const rows = state.events
    .filter((e) => (!kind || e.kind === kind) && (!replica || e.replica === replica))
    .slice(-50).reverse().map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.kind = e.kind;
      tr.dataset.replica = e.replica || "";
      for (const text of [clock(e.unix_ms), label(e.kind), e.replica || "", [e.reason, e.error].filter(Boolean).join(": ")]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      return tr;
    });
  $("#events").replaceChildren(...rows);
}

function renderEndpoints(rows) {
  $("#endpoints").replaceChildren(...rows.map((e) => {
    const tr = document.createElement("tr");
    tr.dataset.endpoint = e.endpoint;
    const cells = [["endpoint", e.endpoint], ["calls", num(e.calls, 0)], ["errors", num(e.errors, 0)],
      ["app_errors", num(e.app_errors, 0)], ["error_rate", pct(e.error_rate)], ["p50", ms(e.p50_ms)], ["p95", ms(e.p95_ms)]];
    for (const [field, text] of cells) {
      const td = document.createElement("td");
      td.dataset.field = field;
      td.textContent = text;
      tr.appendChild(td);
    }
    return tr;
  }));
}

function render(doc) {
  const last = state.points[state.points.length - 1];
  const names = doc.replicas && doc.replicas.length ? doc.replicas : (last ? last.replicas.map((r) => r.name) : []);
  setField(document, "version", doc.version);
  setField(document, "uptime", duration(doc.uptime_seconds));
  $('[data-field="uptime"]').title = "since " + new Date(doc.started_unix_ms).toLocaleString();
  if (last) {
    setField(document, "calls_per_second", num(last.calls_per_second, 2));
    setField(document, "in_use", String(last.in_use));
    setField(document, "waiting", String(last.waiting));
    setField(document, "user_assignments", String(last.user_assignments));
    setField(document, "updated", clock(last.unix_ms));
    const costed = last.cost_per_hour !== undefined && last.cost_per_hour !== null;
    document.querySelectorAll("header [data-autoscale], .charts [data-autoscale]").forEach((el) => { el.hidden = !costed; });
    if (costed) setField(document, "cost_per_hour", money(last.cost_per_hour));
    // A replica an operator holds takes no calls: not counted as ready.
    const held = last.replicas.filter((r) => r.operator && r.operator !== "enabled").length;
    const ready = last.replicas.filter((r) => r.state === "ready" && !(r.operator && r.operator !== "enabled")).length;
    setField(document, "status", ready + " of " + last.replicas.length + " replicas ready" + (held ? " · " + held + " held by an operator" : ""));
    for (const r of last.replicas) renderReplica(r, names);
  }
  const sp = span();
  setField(document, "span", "from " + clock(sp.x0) + (sp.x0 <= state.started ? " (the gateway's start)" : "") +
    " · one point every " + duration(state.resolution));
  document.querySelectorAll("[data-chart]").forEach((box) => {
    const field = box.dataset.chart;
    drawChart(box, field, names, field.endsWith("error_rate") ? 100 : 1, sp);
    box.appendChild(legend(names));
  });
  renderEndpoints(doc.endpoints || []);
  renderEvents(names);
}

let lastDoc = null;
function setWindow(w) {
  state.window = w;
  localStorage.setItem("gradiopool-window", w);
  document.querySelectorAll("[data-window]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.window === w)));
  const series = w === "life" ? "life" : "recent";
  if (series !== state.series) { // another series: fetch it whole, now
    state.series = series;
    state.gen++;
    state.points = [];
    state.last = 0;
    clearTimeout(state.timer);
    poll();
  } else if (lastDoc) {
    render(lastDoc);
  }
}

async function poll() {
  const series = state.series, gen = state.gen;
  try {
    const res = await fetch("/api/admin/history?window=" + series + "&since=" + state.last, { credentials: "same-origin", cache: "no-store" });
    if (res.status === 401 || res.status === 403) { window.location.reload(); return; }
    if (!res.ok) throw new Error("HTTP " + res.status);
    const doc = await res.json();
    if (gen !== state.gen) return; // the series changed meanwhile: its own poll runs
    if (series === "life" && doc.epoch !== state.epoch && state.last !== 0) {
      // The life series merged its points: fetch it again, whole.
      state.epoch = doc.epoch;
      state.points = [];
      state.last = 0;
      clearTimeout(state.timer);
      return poll();
    }
    state.epoch = doc.epoch;
    state.interval = doc.interval_seconds;
    state.resolution = doc.resolution_seconds;
    state.capacity = doc.capacity;
    state.started = doc.started_unix_ms;
    // A partial point (the since-start series' newest intervals) is
    // replaced by the next answer; since stays at the last whole point.
    state.points = state.points.filter((p) => !p.partial).concat(doc.points).slice(-doc.capacity - 1);
    state.events = doc.events;
    state.counts = doc.event_counts || {};
    const whole = state.points.filter((p) => !p.partial);
    if (whole.length) state.last = whole[whole.length - 1].unix_ms;
    document.body.classList.remove("stale");
    lastDoc = doc;
    render(doc);
  } catch (err) {
    document.body.classList.add("stale");
    setField(document, "status", "no answer from the gateway (" + err.message + ")");
  }
  clearTimeout(state.timer);
  state.timer = setTimeout(poll, Math.max(500, state.interval * 1000));
}

applyTheme();
document.addEventListener("DOMContentLoaded", () => {
  $("#theme").addEventListener("click", toggleTheme);
  document.querySelectorAll("[data-window]").forEach((b) => b.addEventListener("click", () => setWindow(b.dataset.window)));
  for (const sel of ["#filter-kind", "#filter-replica"]) $(sel).addEventListener("change", () => renderEvents(lastDoc ? lastDoc.replicas || [] : []));
  if (!["300", "3600", "life"].includes(state.window)) state.window = "3600";
  setWindow(state.window);
});
