// The loopactors dashboard: one page speaking the node's websocket protocol (docs/protocol.md).
// No build step and no library. The token comes from the #token= fragment or the sign-in
// form and is kept in sessionStorage only; it travels in the protocol's hello, never in a URL.
"use strict";

const PAGE_SIZE = 100;
// The node sends the latest state of each loop that changed, at most once per this many
// seconds (a "coalesce" subscription): the table's cost follows loops changed, not events.
const COALESCE_SECONDS = 0.5;
const LIVE = new Set(["activating", "dispatching", "awaiting_worker", "summarizing", "finalizing", "paused"]);
const TOKEN_KEY = "loopactors.token";
const $ = (sel) => document.querySelector(sel);

// -- the protocol -------------------------------------------------------------------------

class NodeConnection {
  constructor(url, token, handlers) {
    this.url = url;
    this.token = token;
    this.handlers = handlers;
    this.nextId = 1;
    this.pending = new Map();
    this.ws = null;
    this.info = null;
    this.closedByUs = false;
    this.backoff = 250;
  }

  open() {
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = async () => {
      try {
        const info = await this.request("hello", { protocol: 1, token: this.token, client: "dashboard" });
        this.backoff = 250;
        const previous = this.info;
        this.info = info;
        this.handlers.connected(info, previous);
      } catch (err) {
        if (err.code === "unauthorized") {
          this.closedByUs = true;
          this.handlers.unauthorized(err.message);
        }
      }
    };
    ws.onmessage = (message) => this.receive(JSON.parse(message.data));
    ws.onclose = () => {
      for (const { reject } of this.pending.values()) reject({ code: "closed", message: "connection closed" });
      this.pending.clear();
      if (this.closedByUs) return;
      this.handlers.disconnected(this.backoff);
      setTimeout(() => this.open(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 5000);
    };
  }

  close() {
    this.closedByUs = true;
    if (this.ws) this.ws.close();
  }

  request(type, fields = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
        reject({ code: "closed", message: "not connected to the node" });
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ type, id, ...fields }));
    });
  }

  receive(frame) {
    if (frame.type === "ok" || frame.type === "error") {
      const waiting = this.pending.get(frame.id);
      if (!waiting) return;
      this.pending.delete(frame.id);
      if (frame.type === "ok") waiting.resolve(frame.data);
      else waiting.reject(frame);
    } else if (frame.type === "event") {
      this.handlers.event(frame.subscription, frame.event);
    } else if (frame.type === "states") {
      this.handlers.states(frame.subscription, frame.loops);
    } else if (frame.type === "gap") {
      this.handlers.gap(frame.subscription, frame.missed);
    } else if (frame.type === "closing") {
      this.handlers.closing(frame.reason);
    }
  }
}

// -- state --------------------------------------------------------------------------------

const model = {
  loops: new Map(),      // loop_id -> row data
  order: [],             // loop ids, newest first
  orderDirty: false,
  changed: new Set(),    // loop ids changed since the last render
  queue: [],             // states not applied yet (applied once per animation frame)
  page: 0,
  filterPhase: "",
  search: "",
  loading: false,        // the pages of loops are being read
  answered: false,       // the node's first page of loops has come (until then: "loading")
};
// Read by the benchmark (bench/dashboard.py): `events` counts the loop states applied.
const stats = { batches: 0, events: 0, frames: 0, lastBatchMs: 0, maxBatchMs: 0, totalBatchMs: 0, recent: [], lags: [] };
window.__dashboard = stats; // read by the benchmark (bench/dashboard.py)
// How old the page's view of the live loops is: now minus each one's last update.
stats.staleness = () => {
  const now = Date.now() / 1000;
  let sum = 0, max = 0, n = 0;
  for (const row of model.loops.values()) {
    if (!LIVE.has(row.phase)) continue;
    const age = Math.max(0, now - row.updated);
    sum += age; max = Math.max(max, age); n++;
  }
  return { mean: n ? Math.round((100 * sum) / n) / 100 : 0, max: Math.round(100 * max) / 100, live: n };
};

let node = null;
let allSubscription = null;
let view = "loops";
let openLoop = null; // { id, subscription, events: [], history: null }
let rateSamples = []; // [seconds, rounds finished]
let statsTimer = null;
let frameRequested = false;

function rowFromState(state) {
  const old = model.loops.get(state.loop_id);
  return {
    id: state.loop_id,
    task: state.spec.task,
    worker: state.spec.worker,
    phase: state.phase,
    round: state.round,
    rounds: state.spec.rounds,
    completed: state.completed_rounds,
    running: state.phase === "awaiting_worker",
    tokens: state.tokens_used,
    cost: state.cost_usd ?? (old ? old.cost : null),
    created: state.created_at,
    updated: state.updated_at,
    state,
  };
}

function putState(state) {
  const old = model.loops.get(state.loop_id);
  // A status page read before a newer pushed state must not take the row back in time.
  if (old && old.state.updated_at > state.updated_at) return;
  const isNew = !old;
  model.loops.set(state.loop_id, rowFromState(state));
  if (isNew) model.orderDirty = true;
  model.changed.add(state.loop_id);
  if (openLoop && openLoop.id === state.loop_id) renderLoopSummary();
}

// Every loop in the store, page by page (the live ones first): none is out of reach, however
// many there are. The pushed states keep the rows current meanwhile.
async function loadLoops() {
  model.loading = true;
  const limit = (node.info.limits && node.info.limits.max_status_loops) || 1000;
  try {
    for (const liveOnly of [true, false]) {
      let after = null;
      do {
        const fields = { live_only: liveOnly, limit };
        if (after) fields.after = after;
        const page = await node.request("status", fields);
        model.answered = true;
        for (const state of page.loops) putState(state);
        after = page.next;
        scheduleRender();
      } while (after);
    }
  } finally {
    model.loading = false;
    scheduleRender();
  }
}

// -- rendering ----------------------------------------------------------------------------

function scheduleRender() {
  if (frameRequested) return;
  frameRequested = true;
  requestAnimationFrame(flush);
}

function flush() {
  frameRequested = false;
  const started = performance.now();
  const batch = model.queue;
  model.queue = [];
  for (const state of batch) putState(state);
  renderTable();
  const took = performance.now() - started;
  if (batch.length) {
    // How long after the node changed a loop the page showed it (same clock on one machine).
    const now = Date.now() / 1000;
    for (const state of batch) stats.lags.push(now - state.updated_at);
    if (stats.lags.length > 20000) stats.lags.splice(0, stats.lags.length - 20000);
    stats.batches++;
    stats.events += batch.length;
    stats.lastBatchMs = took;
    stats.maxBatchMs = Math.max(stats.maxBatchMs, took);
    stats.totalBatchMs += took;
    stats.recent.push(took);
    if (stats.recent.length > 2000) stats.recent.shift();
  }
}

function visibleIds() {
  if (model.orderDirty) {
    model.order = [...model.loops.keys()];
    model.order.sort((a, b) => model.loops.get(b).created - model.loops.get(a).created);
    model.orderDirty = false;
  }
  const phase = model.filterPhase;
  const search = model.search.toLowerCase();
  if (!phase && !search) return model.order;
  return model.order.filter((id) => {
    const row = model.loops.get(id);
    if (phase === "live" ? !LIVE.has(row.phase) : phase && row.phase !== phase) return false;
    return !search || id.toLowerCase().includes(search) || row.task.toLowerCase().includes(search);
  });
}

const rowElements = new Map(); // loop_id -> <tr>, reused across renders
let shownIds = [];

function renderTable() {
  const ids = visibleIds();
  const pages = Math.max(1, Math.ceil(ids.length / PAGE_SIZE));
  model.page = Math.min(model.page, pages - 1);
  const pageIds = ids.slice(model.page * PAGE_SIZE, (model.page + 1) * PAGE_SIZE);
  const sameRows = pageIds.length === shownIds.length && pageIds.every((id, i) => id === shownIds[i]);
  if (sameRows) {
    for (const id of pageIds) if (model.changed.has(id)) fillRow(rowElements.get(id), model.loops.get(id));
  } else {
    const body = $("#loop-rows");
    const fragment = document.createDocumentFragment();
    for (const id of pageIds) {
      let tr = rowElements.get(id);
      if (!tr) {
        tr = makeRow(id);
        rowElements.set(id, tr);
        fillRow(tr, model.loops.get(id));
      } else if (model.changed.has(id)) {
        fillRow(tr, model.loops.get(id));
      }
      fragment.appendChild(tr);
    }
    body.replaceChildren(fragment);
    shownIds = pageIds;
    if (rowElements.size > 4 * PAGE_SIZE) { // keep the cache to about what can be shown
      const keep = new Set(pageIds);
      for (const id of rowElements.keys()) if (!keep.has(id)) rowElements.delete(id);
    }
  }
  model.changed.clear();
  let live = 0;
  for (const row of model.loops.values()) if (LIVE.has(row.phase)) live++;
  $("#counts").textContent = `${model.loops.size} loops, ${live} live` +
    (ids.length !== model.loops.size ? `, ${ids.length} shown` : "") +
    (model.loading ? " (reading…)" : "");
  $("#page-info").textContent = `${model.page + 1} / ${pages}`;
  $("#prev-page").disabled = model.page === 0;
  $("#next-page").disabled = model.page >= pages - 1;
  $("#loading-rows").hidden = model.answered;
  $("#empty").hidden = !model.answered || model.loops.size > 0;
}

function cell(className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  return td;
}

function button(action, label) {
  const b = document.createElement("button");
  b.type = "button";
  b.dataset.action = action;
  b.textContent = label;
  return b;
}

function makeRow(id) {
  const tr = document.createElement("tr");
  tr.dataset.loopId = id;
  const idCell = cell("id");
  const link = document.createElement("a");
  link.href = "#";
  link.className = "open";
  link.dataset.open = id;
  link.textContent = id;
  link.title = "open this loop";
  idCell.appendChild(link);
  const actions = cell("actions");
  actions.append(button("pause", "pause"), button("resume", "resume"), button("stop", "stop"));
  tr.append(idCell, cell("task"), cell("worker"), cell("phase-cell"), cell("round num"),
    cell("tokens num"), cell("cost num"), cell("updated"), actions);
  return tr;
}

function fillRow(tr, row) {
  const cells = tr.children;
  cells[1].textContent = row.task;
  cells[1].title = row.task;
  cells[2].textContent = row.worker;
  cells[2].title = row.worker;
  const phase = document.createElement("span");
  phase.className = "phase";
  phase.dataset.phase = row.phase;
  phase.textContent = row.phase;
  // Why it ended (or waits), as `loopactors status` says it: on the row, not only when opened.
  const why = row.state.deferred_until != null && LIVE.has(row.phase)
    ? `waiting: ${row.state.defer_reason || "a usage limit"}`
    : row.state.reason || row.state.trigger || "";
  if (why) {
    const reason = document.createElement("span");
    reason.className = "reason";
    reason.textContent = why;
    reason.title = why;
    cells[3].replaceChildren(phase, reason);
  } else {
    cells[3].replaceChildren(phase);
  }
  tr.dataset.phase = row.phase;
  // Rounds completed, as the command line counts them (`7/20`), and the one running.
  cells[4].textContent = `${row.completed}/${row.rounds}` + (row.running ? ` · r${row.round} ▶` : "") +
    (row.state.tasks_total != null ? ` · tasks ${row.state.tasks_done}/${row.state.tasks_total}` : "");
  cells[4].title = `${row.completed} of ${row.rounds} rounds completed` +
    (row.running ? `, round ${row.round} running` : "");
  cells[5].textContent = row.tokens.toLocaleString();
  cells[6].textContent = money(row.cost);
  cells[7].textContent = ago(row.updated);
  const live = LIVE.has(row.phase);
  const [pause, resume, stop] = cells[8].children;
  pause.disabled = !live || row.phase === "paused" || row.state.pause_requested;
  resume.disabled = row.phase !== "paused" && !row.state.pause_requested;
  stop.disabled = !live;
}

// Workers that know no price report nothing (or 0): shown as a dash, not as $0.
function money(usd) {
  return usd ? `$${usd.toFixed(4)}` : "–";
}

function ago(seconds) {
  if (!seconds) return "–";
  const delta = Math.max(0, Date.now() / 1000 - seconds);
  if (delta < 60) return `${delta.toFixed(0)}s ago`;
  if (delta < 3600) return `${(delta / 60).toFixed(0)}m ago`;
  return new Date(seconds * 1000).toLocaleString();
}

// -- controls -----------------------------------------------------------------------------

async function control(action, loopId, source) {
  if (source) source.disabled = true;
  try {
    const state = await node.request(action, { loop_id: loopId });
    putState(state);
    if (action === "pause" && state.pause_requested) {
      // Takes effect after the round in flight: the buttons follow the request at once.
      const row = model.loops.get(loopId);
      row.state = state;
    }
    scheduleRender();
  } catch (err) {
    showBanner(`${action} ${loopId}: ${err.message}`);
    if (source) source.disabled = false;
  }
}

async function startLoop(form) {
  const text = form.elements.text.value.trim();
  const worker = form.elements.worker.value.trim();
  $("#start-error").textContent = "";
  $("#start-ok").textContent = "";
  try {
    const fields = { text };
    if (worker) fields.worker = worker;
    const state = await node.request("start", fields);
    putState(state);
    scheduleRender();
    $("#start-ok").textContent = `started ${state.loop_id}`;
    form.elements.text.value = "";
  } catch (err) {
    $("#start-error").textContent = err.message || String(err);
  }
}

// -- loop view ----------------------------------------------------------------------------

async function showLoop(loopId) {
  await closeLoop();
  openLoop = { id: loopId, subscription: null, events: [], rounds: [], historyTimer: null };
  setView("loop");
  $("#events").replaceChildren();
  $("#round-rows").replaceChildren();
  $("#loop-title").textContent = loopId;
  renderLoopSummary();
  try {
    const sub = await node.request("subscribe", { loop_id: loopId, replay: true });
    if (openLoop && openLoop.id === loopId) openLoop.subscription = sub.subscription;
  } catch (err) {
    showBanner(`events of ${loopId}: ${err.message}`);
  }
  await loadHistory();
}

async function closeLoop() {
  if (!openLoop) return;
  const { subscription } = openLoop;
  clearTimeout(openLoop.historyTimer);
  openLoop = null;
  if (subscription) await node.request("unsubscribe", { subscription }).catch(() => {});
}

async function loadHistory() {
  if (!openLoop) return;
  const loopId = openLoop.id;
  const data = await node.request("history", { loop_id: loopId, output_head: 300 });
  if (!openLoop || openLoop.id !== loopId) return;
  openLoop.breaker = data.breaker;
  putState(data.loop);
  openLoop.rounds = data.rounds;
  renderRounds();
  renderLoopSummary();
  scheduleRender();
}

function loopEvent(event) {
  // Events of the open loop arrive on its own subscription (with replay) too; those are shown.
  if (!openLoop || openLoop.historyTimer) return;
  if (event.type === "round_finished" || event.type === "loop_finished" || event.type === "round_started") {
    openLoop.historyTimer = setTimeout(() => {
      if (openLoop) openLoop.historyTimer = null;
      loadHistory().catch(() => {});
    }, 300);
  }
}

function showLoopEvent(event) {
  const list = $("#events");
  const item = document.createElement("li");
  const when = new Date(event.at * 1000).toLocaleTimeString();
  item.textContent = `${when} ${event.type}` + describe(event);
  list.prepend(item);
  while (list.children.length > 200) list.lastChild.remove();
}

function describe(event) {
  switch (event.type) {
    case "round_started": return ` round ${event.round}/${event.rounds}`;
    case "round_finished":
      return ` round ${event.round} ${event.status} in ${(event.duration ?? 0).toFixed(2)}s` +
        (event.error ? `: ${event.error}` : "");
    case "loop_finished":
      return ` ${event.phase} after ${event.completed_rounds}/${event.rounds}` +
        (event.reason ? ` (${event.trigger || event.reason})` : "");
    case "loop_started": return ` ${event.rounds} rounds, ${event.mode}, ${event.worker}`;
    case "round_waiting": return ` round ${event.round}: ${event.reason}`;
    case "loop_waiting": return ` round ${event.round}: ${event.reason}`;
    default: return event.round ? ` round ${event.round}` : "";
  }
}

function figure(label, value) {
  const div = document.createElement("div");
  div.className = "figure";
  const b = document.createElement("b");
  b.textContent = value;
  const span = document.createElement("span");
  span.textContent = label;
  div.append(b, span);
  return div;
}

function renderLoopSummary() {
  if (!openLoop) return;
  const row = model.loops.get(openLoop.id);
  if (!row) return;
  const s = row.state;
  $("#loop-title").textContent = `${row.id}: ${row.task}`;
  $("#loop-summary").replaceChildren(
    figure("phase", row.phase),
    figure("rounds done", `${row.completed}/${row.rounds}`),
    ...(s.tasks_total != null ? [figure("tasks", `${s.tasks_done}/${s.tasks_total}`)] : []),
    figure("worker", row.worker),
    figure("mode", s.spec.mode),
    figure("tokens", row.tokens.toLocaleString()),
    figure("cost", s.spec.max_cost_usd != null
      ? `${money(row.cost)} of $${s.spec.max_cost_usd.toFixed(2)}` : money(row.cost)),
    ...(s.spec.until ? [figure("until", s.last_check
      ? `${s.spec.until}: ${s.last_check.exit_code === 0 ? "passed" : `failed ${s.failing_checks}× in a row`}`
      : s.spec.until)] : []),
  );
  if (s.reason) $("#loop-summary").append(figure(s.trigger || "reason", s.reason));
  renderBreaker(s);
}

// The breaker as the node computes it (the history answer's `breaker`): every trigger the
// loop has, the runtime's own and the run ledger's stagnation and frustration counts, each
// as how far the loop is towards it, the closest one marked (docs/loops.md, "The breaker").
// Each trigger's label comes from the node's trigger table (loops/_triggers.py).
function renderBreaker(s) {
  const standing = openLoop && openLoop.breaker;
  const bars = standing ? standing.triggers.map(({ trigger, label, value, limit }) => {
    const closest = trigger === standing.closest;
    const bar = document.createElement("div");
    bar.className = "bar" + (closest ? " closest" : "");
    bar.dataset.trigger = trigger;
    const name = document.createElement("span");
    name.textContent = (label || trigger) + (closest ? " (closest)" : "");
    const track = document.createElement("div");
    track.className = "track";
    const fill = document.createElement("div");
    fill.className = "fill";
    fill.style.width = `${Math.min(100, (100 * value) / limit)}%`;
    track.appendChild(fill);
    const figureText = document.createElement("span");
    figureText.className = "count";
    figureText.textContent = `${value} / ${limit}`;
    bar.append(name, track, figureText);
    return bar;
  }) : [];
  if (s.trigger) {
    const tripped = document.createElement("p");
    tripped.className = "error";
    tripped.textContent = `tripped: ${s.trigger}: ${s.reason || ""}`;
    bars.unshift(tripped);
  }
  $("#breaker").replaceChildren(...bars);
}

function renderRounds() {
  const rows = openLoop.rounds.map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.round = r.round;
    const out = cell("output");
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = r.output ? r.output.slice(0, 60).replace(/\s+/g, " ") : "(no output)";
    const pre = document.createElement("pre");
    pre.textContent = r.error ? `${r.error}\n\n${r.output}` : r.output;
    details.append(summary, pre);
    details.addEventListener("toggle", () => expandRound(details, r), { once: true });
    out.appendChild(details);
    const cost = money(r.cost_usd);
    tr.append(td(r.round), td(r.status), td(r.duration == null ? "–" : `${r.duration.toFixed(2)}s`),
      td(r.tokens.toLocaleString()), td(cost), checkCell(r), out);
    return tr;
  });
  $("#round-rows").replaceChildren(...rows);
  drawTimeline(openLoop.rounds);
}

// The loop's until check after the round: passed, or its exit code (the output's end on hover).
function checkCell(r) {
  const c = cell();
  const check = r.check;
  if (!check) {
    c.textContent = "–";
    return c;
  }
  const how = check.exit_code == null ? (check.error || "no exit code") : `exit ${check.exit_code}`;
  c.textContent = check.exit_code === 0 ? "passed" : `failed (${how})`;
  if (r.unverified_claim) c.textContent += ", claim unverified";
  c.className = check.exit_code === 0 ? "ok" : "error";
  c.title = `${check.command} · ${check.duration.toFixed(1)}s\n${(check.output || "").slice(-600)}`;
  return c;
}

function td(text) {
  const c = cell();
  c.textContent = String(text);
  return c;
}

// The whole output (history sends the head only), and an agent round's transcript.
async function expandRound(details, record) {
  if (!openLoop) return;
  try {
    const full = await node.request("output", { loop_id: openLoop.id, round: record.round });
    const pre = details.querySelector("pre");
    pre.textContent = full.error ? `${full.error}\n\n${full.output}` : full.output;
    if (full.transcript && full.transcript.length) {
      const transcript = document.createElement("pre");
      transcript.className = "transcript";
      transcript.textContent = full.transcript
        .map((m) => `${m.role || m.type || "?"}: ${typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? m)}`)
        .join("\n\n");
      const label = document.createElement("h4");
      label.textContent = "transcript";
      details.append(label, transcript);
    }
  } catch (err) {
    showBanner(`output of round ${record.round}: ${err.message}`);
  }
}

const SVG = "http://www.w3.org/2000/svg";
function svgEl(name, attrs) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function drawTimeline(rounds) {
  const svg = $("#timeline");
  const width = 600, height = 140, pad = 18;
  const done = rounds.filter((r) => r.duration != null);
  const max = Math.max(0.001, ...done.map((r) => r.duration));
  const step = (width - 2 * pad) / Math.max(1, rounds.length);
  const colors = { completed: "#2f6fdd", failed: "#c53030", timed_out: "#b7791f", cancelled: "#8a94a3", running: "#9cc0f5" };
  const items = rounds.map((r, i) => {
    const h = r.duration == null ? 4 : Math.max(2, ((height - 2 * pad) * r.duration) / max);
    const rect = svgEl("rect", {
      x: pad + i * step + step * 0.1, y: height - pad - h, width: Math.max(1, step * 0.8), height: h,
      fill: colors[r.status] || "#8a94a3",
    });
    const title = svgEl("title", {});
    title.textContent = `round ${r.round}: ${r.status}, ${r.duration == null ? "running" : r.duration.toFixed(2) + "s"}`;
    rect.appendChild(title);
    return rect;
  });
  const label = svgEl("text", { x: pad, y: 13, "font-size": 11, fill: "#6b7686" });
  label.textContent = done.length ? `longest ${max.toFixed(2)}s` : "no finished round yet";
  svg.replaceChildren(label, svgEl("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#ccd3dc" }), ...items);
}

// -- node view ----------------------------------------------------------------------------

// Today's spend per account and in all, against the daily budgets ([budget], docs/loops.md).
function dailyFigures(s) {
  const spent = s.daily_cost_usd || {};
  const budgets = s.daily_budget_usd || {};
  const of = (scope) => (budgets[scope] != null ? ` of $${budgets[scope].toFixed(2)}` : "");
  const accounts = Object.entries(spent).filter(([name]) => name !== "total");
  return [
    figure("spent today", `$${(spent.total || 0).toFixed(4)}${of("total")}`),
    ...accounts.map(([name, dollars]) => figure(`today: ${name}`, `$${dollars.toFixed(4)}${of("account")}`)),
  ];
}

async function refreshNode() {
  if (!node || !node.info) return;
  let s;
  try {
    s = await node.request("statistics");
  } catch {
    return;
  }
  const finished = Object.values(s.rounds).reduce((a, b) => a + b, 0);
  // The node samples rounds finished every 5 s whether or not this page was open; now's
  // figure ends the line.
  rateSamples = [...(s.rate_samples || []), [s.time, finished]];
  rateSamples = rateSamples.filter(([t]) => t >= s.time - 300);
  const latency = s.commit_seconds;
  const commits = latency.counts.reduce((a, b) => a + b, 0);
  $("#node-figures").replaceChildren(
    figure("live loops", s.live_loops.toLocaleString()),
    figure("rounds finished (since start)", finished.toLocaleString()),
    figure("tokens", s.tokens.toLocaleString()),
    figure("cost", `$${s.cost_usd.toFixed(4)}`),
    ...dailyFigures(s),
    figure("connections", s.connections),
    figure("subscriptions", s.subscriptions),
    figure("store commits", s.store_commits.toLocaleString()),
    figure("commit latency (mean)", commits ? `${((1000 * latency.sum) / commits).toFixed(2)} ms` : "–"),
    figure("commit latency (p95 ≤)", percentile(latency, 0.95)),
    figure("events dropped", s.events_dropped),
    figure("uptime", `${Math.round(s.uptime)} s`),
  );
  $("#phases").replaceChildren(
    ...Object.entries(s.loops).map(([phase, n]) => {
      const span = document.createElement("span");
      span.className = "phase";
      span.dataset.phase = phase;
      span.textContent = `${phase} ${n}`;
      return span;
    }),
  );
  $("#actors").replaceChildren(
    ...s.actors.map((a) => {
      const li = document.createElement("li");
      li.dataset.actor = a.path;
      const depth = a.path.split("/").length - 1;
      const name = a.path.split("/").pop();
      li.textContent = `${"  ".repeat(depth)}${a.supervisor ? "▾ " : "• "}${name === "*" ? `${a.children} children` : name}` +
        `${a.supervisor ? ` (${a.children} children)` : ""}${a.running ? "" : " (stopped)"}`;
      li.style.paddingLeft = `${depth * 18}px`;
      const restarts = document.createElement("span");
      restarts.className = a.restarts ? "restarts" : "muted";
      restarts.textContent = `  restarts ${a.restarts}`;
      li.appendChild(restarts);
      return li;
    }),
  );
  renderCluster(s.cluster || [], s.cluster_self);
  drawRate();
}

// The nodes that share the store (PostgreSQL): each one's lease and the live loops it owns.
function renderCluster(nodes, self) {
  $("#cluster-view").hidden = nodes.length === 0;
  $("#cluster-rows").replaceChildren(
    ...nodes.map((n) => {
      const tr = document.createElement("tr");
      tr.dataset.node = n.node_id;
      tr.dataset.state = n.state;
      const left = n.lease_left == null ? "–" : `${Math.max(n.lease_left, 0).toFixed(1)} s`;
      const name = n.node_id === self ? `${n.node_id} (this node)` : n.node_id;
      const state = n.dead_by ? `${n.state} (declared by ${n.dead_by})` : n.state;
      const gateway = n.gateway || "–";
      const cells = [name, n.host, String(n.pid), gateway, state, left, n.loops.toLocaleString()];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      return tr;
    }),
  );
}

function percentile(latency, q) {
  const total = latency.counts.reduce((a, b) => a + b, 0);
  if (!total) return "–";
  let seen = 0;
  for (let i = 0; i < latency.counts.length; i++) {
    seen += latency.counts[i];
    if (seen >= q * total) return i < latency.bounds.length ? `${latency.bounds[i] * 1000} ms` : "> 2.5 s";
  }
  return "–";
}

function drawRate() {
  const svg = $("#rate-chart");
  const width = 600, height = 160, pad = 20;
  const points = [];
  for (let i = 1; i < rateSamples.length; i++) {
    const [t0, r0] = rateSamples[i - 1];
    const [t1, r1] = rateSamples[i];
    if (t1 > t0) points.push([t1, Math.max(0, (r1 - r0) / (t1 - t0))]);
  }
  const now = rateSamples.length ? rateSamples[rateSamples.length - 1][0] : 0;
  const max = Math.max(1, ...points.map((p) => p[1]));
  const xy = points.map(([t, v]) => [
    pad + ((width - 2 * pad) * (300 - (now - t))) / 300,
    height - pad - ((height - 2 * pad) * v) / max,
  ]);
  const label = svgEl("text", { x: pad, y: 14, "font-size": 11, fill: "#6b7686" });
  const last = points.length ? points[points.length - 1][1] : 0;
  label.textContent = `${last.toFixed(1)} rounds/s now, peak ${max.toFixed(1)}`;
  svg.replaceChildren(
    label,
    svgEl("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#ccd3dc" }),
    svgEl("polyline", { points: xy.map((p) => p.join(",")).join(" "), fill: "none", stroke: "#2f6fdd", "stroke-width": 2 }),
  );
}

// -- page ---------------------------------------------------------------------------------

function setView(name) {
  view = name;
  $("#loops-view").hidden = name !== "loops";
  $("#loop-view").hidden = name !== "loop";
  $("#node-view").hidden = name !== "node";
  for (const tab of document.querySelectorAll(".tab")) {
    tab.classList.toggle("active", tab.dataset.view === name || (name === "loop" && tab.dataset.view === "loops"));
  }
  clearInterval(statsTimer);
  if (name === "node") {
    refreshNode();
    statsTimer = setInterval(refreshNode, 2000);
  }
}

function showBanner(text) {
  const banner = $("#banner");
  banner.textContent = text;
  banner.hidden = !text;
}

function setStatus(state, text) {
  const status = $("#conn-status");
  status.dataset.state = state;
  status.textContent = text;
}

function takeToken() {
  // A token in the fragment is moved to sessionStorage and the fragment dropped at once, so
  // it is neither bookmarked, nor sent anywhere, nor left in the history.
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function askToken(message) {
  $("#app").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
}

function connect(token) {
  $("#login").hidden = true;
  $("#app").hidden = false;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  node = new NodeConnection(`${scheme}://${location.host}/`, token, {
    async connected(info, previous) {
      setStatus("connected", "connected");
      $("#node-id").textContent = `node ${info.node_id} · v${info.version}`;
      if (previous) {
        showBanner(previous.node_id !== info.node_id
          ? `Reconnected: the node restarted (was ${previous.node_id}, now ${info.node_id}).`
          : "Reconnected to the node.");
        setTimeout(() => showBanner(""), 8000);
      }
      const sub = await node.request("subscribe", { coalesce: COALESCE_SECONDS });
      allSubscription = sub.subscription;
      await loadLoops();
      if (openLoop) showLoop(openLoop.id);
      if (view === "node") refreshNode();
    },
    disconnected(delay) {
      setStatus("reconnecting", "disconnected: reconnecting…");
      showBanner(`Lost the connection to the node; trying again in ${(delay / 1000).toFixed(1)} s.`);
    },
    unauthorized(message) {
      sessionStorage.removeItem(TOKEN_KEY);
      setStatus("unauthorized", "not signed in");
      askToken(`The node refused the token: ${message}`);
    },
    closing(reason) {
      showBanner(`The node is closing this connection: ${reason}`);
    },
    event(subscription, event) {
      // Only the open loop's subscription sends events; the table's sends states.
      if (openLoop && subscription === openLoop.subscription) {
        showLoopEvent(event);
        loopEvent(event);
      }
    },
    states(subscription, loops) {
      if (subscription !== allSubscription) return;
      stats.frames++;
      for (const state of loops) model.queue.push(state);
      scheduleRender();
    },
    gap(subscription, missed) {
      if (openLoop && subscription === openLoop.subscription) {
        showLoopEvent({ type: `(${missed} events missed)`, at: Date.now() / 1000 });
      }
    },
  });
  node.open();
}

function init() {
  $("#login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = e.target.elements.token.value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    e.target.elements.token.value = "";
    if (node) node.close();
    connect(token);
  });
  $("#start-form").addEventListener("submit", (e) => {
    e.preventDefault();
    startLoop(e.target);
  });
  $("#loop-rows").addEventListener("click", (e) => {
    const open = e.target.closest("[data-open]");
    if (open) {
      e.preventDefault();
      showLoop(open.dataset.open);
      return;
    }
    const action = e.target.closest("button[data-action]");
    if (action) control(action.dataset.action, action.closest("tr").dataset.loopId, action);
  });
  $("#phase-filter").addEventListener("change", (e) => {
    model.filterPhase = e.target.value;
    model.page = 0;
    renderTable();
  });
  $("#search").addEventListener("input", (e) => {
    model.search = e.target.value.trim();
    model.page = 0;
    renderTable();
  });
  $("#prev-page").addEventListener("click", () => { model.page--; renderTable(); });
  $("#next-page").addEventListener("click", () => { model.page++; renderTable(); });
  $("#close-loop").addEventListener("click", () => { closeLoop(); setView("loops"); });
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => { if (tab.dataset.view !== "loop") closeLoop(); setView(tab.dataset.view); });
  }
  setInterval(() => { // "updated … ago" moves on without events
    for (const id of shownIds) model.changed.add(id);
    scheduleRender();
  }, 5000);
  const token = takeToken();
  if (token) connect(token);
  else askToken("");
}

init();
