/* gpudock dashboard: plain JavaScript, no framework, no build step.
 *
 * Reads the /v1 API (and /ui/api/cluster) with the HttpOnly cookie set by
 * POST /ui/login; every request carries X-Gpudock-UI, which the server
 * demands of cookie-authenticated changes (CSRF guard). Each page polls once a
 * second, so a state change shows within about a second. All text goes in
 * through textContent: nothing from the server is parsed as HTML.
 */
"use strict";

const POLL_MS = 1000;
const JOB_ROWS = 300;   // newest jobs the table holds (filtered and sorted in the page)
const ACTIVE = ["PENDING", "ALLOCATED", "STARTING", "RUNNING"];
const STATES = [...ACTIVE, "SUCCEEDED", "FAILED", "CANCELLED", "LOST"];
let me = null;          // {user, admin}
let page = null;        // the current page: {refresh, stop}
let timer = null;
let session = null;     // EventSource of /ui/api/session
let heatMode = "allocation";
const jobView = { sort: "id", desc: true, text: "", state: "active", queue: "", user: "" };

/* ---------- small helpers ---------- */

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "style") el.style.cssText = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/* replaceChildren, skipping null/false (which the DOM would print as text) */
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, opts = {}) {
  const res = await fetch(path, {
    credentials: "same-origin",
    ...opts,
    headers: { "X-Gpudock-UI": "1", Accept: "application/json", ...(opts.headers || {}) },
  });
  if (res.status === 401) {
    let message = "";
    try { message = (await res.json()).error.message; } catch (_) { /* no reason given */ }
    if (me) {  // the session's token died: drop the cookie, ask for a token
      fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "X-Gpudock-UI": "1" } });
      showLogin(message ? `Your session ended: ${message}.` : "");
    }
    throw new ApiError(401, message || "please log in");
  }
  if (!res.ok) {
    let message = res.statusText;
    try { message = (await res.json()).error.message; } catch (_) { /* keep statusText */ }
    throw new ApiError(res.status, message);
  }
  if (res.status === 204) return null;
  return opts.raw ? res.text() : res.json();
}

/* the JSON at ``path``, or null when its text is what ``seen.text`` already holds */
async function changed(path, seen) {
  const text = await api(path, { raw: true });
  if (text === seen.text) return null;
  seen.text = text;
  return JSON.parse(text);
}

const GIB = 1024 ** 3;
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v >= 100 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}
function pct(v) { return v === null || v === undefined ? "n/a" : `${Math.round(v * 100)}%`; }
function num(v) { return v === null || v === undefined ? "∞" : (Math.round(v * 100) / 100).toString(); }
function clock(t) {
  if (!t) return "–";
  const d = new Date(t * 1000);
  return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
}
function ago(t) {
  if (!t) return "–";
  const s = Math.max(0, Date.now() / 1000 - t);
  if (s < 60) return `${Math.floor(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}
function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
}
function stateBadge(state) { return h("span", { class: `state s-${state}`, text: state }); }
function status(text) { document.getElementById("status-line").textContent = text; }

/* heat colour: 0 -> pale slate, 0.35 -> amber, 0.7 -> orange, 1 -> red */
const STOPS = [[0, [238, 242, 247]], [0.35, [253, 230, 138]], [0.7, [249, 115, 22]], [1, [198, 40, 40]]];
function heat(v) {
  v = Math.min(1, Math.max(0, v));
  for (let i = 1; i < STOPS.length; i++) {
    const [x1, c1] = STOPS[i];
    const [x0, c0] = STOPS[i - 1];
    if (v <= x1) {
      const f = (v - x0) / (x1 - x0);
      return `rgb(${c0.map((c, j) => Math.round(c + (c1[j] - c) * f)).join(",")})`;
    }
  }
  return "rgb(198,40,40)";
}

/* ---------- login, routing, polling ---------- */

function showLogin(message = "") {
  stopPage();
  closeSession();
  me = null;
  document.getElementById("login-error").textContent = message;
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  fill(document.getElementById("view"));
  document.getElementById("login").hidden = false;
  status("");
  document.getElementById("token").focus();
}

async function login(event) {
  event.preventDefault();
  const error = document.getElementById("login-error");
  error.textContent = "";
  try {
    me = await api("/ui/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: document.getElementById("token").value }),
    });
  } catch (err) {
    error.textContent = err.status === 401 ? "That token is invalid, expired or revoked." : err.message;
    document.getElementById("login").hidden = false;
    return;
  }
  document.getElementById("token").value = "";
  start();
}

async function logout() {
  await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "X-Gpudock-UI": "1" } });
  showLogin();
}

/* The server ends this stream, with the reason, within a second of the token being
 * revoked or expiring; the page then drops the cookie and asks for a token. */
function openSession() {
  closeSession();
  session = new EventSource("/ui/api/session");
  session.addEventListener("ended", async (event) => {
    let reason = "the token is no longer valid";
    try { reason = JSON.parse(event.data).reason || reason; } catch (_) { /* keep the default */ }
    closeSession();
    await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "X-Gpudock-UI": "1" } });
    showLogin(`Your session ended: ${reason}.`);
  });
}

function closeSession() {
  if (session) session.close();
  session = null;
}

function start() {
  openSession();
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = false;
  const name = document.getElementById("who-name");
  fill(name, me.user, me.admin ? h("span", { class: "role", text: "admin" }) : "");
  route();
}

function stopPage() {
  if (timer) clearTimeout(timer);
  timer = null;
  if (page && page.stop) page.stop();
  page = null;
}

function route() {
  if (!me) return;
  stopPage();
  const hash = location.hash || "#/cluster";
  const [, name, arg] = hash.split("/");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.route === name || (name === "job" && a.dataset.route === "jobs"));
  }
  const view = document.getElementById("view");
  fill(view);
  const make = { cluster: clusterPage, queues: queuesPage, jobs: jobsPage, job: jobPage }[name] || clusterPage;
  page = make(view, arg);
  const current = page;
  const tick = async () => {
    try {
      await current.refresh();
      status(`updated ${new Date().toLocaleTimeString()}`);
      if (!performance.getEntriesByName("gpudock-drawn").length) performance.mark("gpudock-drawn");
    } catch (err) {
      if (err.status === 401) return;
      status(`cannot refresh: ${err.message}`);
    }
    if (page === current) timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

/* ---------- cluster: heat map of every node and GPU ---------- */

function gpuValue(gpu) {
  if (heatMode === "allocation") return { v: gpu.allocation, label: pct(gpu.allocation) };
  if (heatMode === "memory") {
    if (gpu.memory_used !== null && gpu.memory_used !== undefined) {
      const v = gpu.memory_total ? gpu.memory_used / gpu.memory_total : 0;
      return { v, label: `${bytes(gpu.memory_used)}` };
    }
    const v = gpu.memory_total ? gpu.booked_memory / gpu.memory_total : 0;
    return { v, label: `${bytes(gpu.booked_memory)} booked` };
  }
  if (gpu.utilization === null || gpu.utilization === undefined) return { v: null, label: "no reading" };
  return { v: gpu.utilization, label: pct(gpu.utilization) };
}

function holderText(holders) {
  if (!holders.length) return "idle";
  if (holders.length === 1) {
    const x = holders[0];
    return x.job ? `${x.user} · job ${x.job}` : `${x.user} · ${x.queue}`;
  }
  const users = [...new Set(holders.map((x) => x.user))];
  return `${holders.length}× ${users[0]}${users.length > 1 ? ` +${users.length - 1}` : ""}`;
}

function gpuTip(gpu) {
  return [
    `${gpu.node} GPU ${gpu.index} · ${gpu.name}`, gpu.uuid,
    `allocation ${pct(gpu.allocation)} (${bytes(gpu.booked_memory)} of ${bytes(gpu.memory_total)} booked)`,
    `utilisation ${gpu.utilization === null ? "no reading" : pct(gpu.utilization)}`,
    `health ${gpu.health}${gpu.emulated ? " · emulated GPU: no real telemetry" : ""}`,
    ...gpu.holders.map((x) => `${x.job ? `job ${x.job}` : "a job"} of ${x.user} (${x.queue})${x.memory ? `: ${bytes(x.memory)}` : ": whole GPU"}`),
  ].join("\n");
}

function gpuCell(gpu) {
  const { v, label } = gpuValue(gpu);
  const style = v === null ? "" : `background:${heat(v)};color:${v > 0.62 ? "#fff" : "#1b2430"}`;
  const cls = `gpu${v === null ? " na" : ""}${gpu.health !== "ok" ? " sick" : ""}`;
  const holders = gpu.holders;
  const who = holders.length === 1 && holders[0].job
    ? h("a", { href: `#/job/${holders[0].job}`, text: holderText(holders) })
    : holderText(holders);
  const cell = h("div", { class: cls, style, "data-uuid": gpu.uuid, "data-gpu": `${gpu.node}/${gpu.index}` },
    h("span", { class: "l1", text: `GPU ${gpu.index}` }),
    gpu.emulated ? h("span", { class: "tag emu", text: "EMU", title: "emulated GPU" })
      : gpu.health !== "ok" ? h("span", { class: "tag bad", text: gpu.health.toUpperCase() }) : null,
    h("span", { class: "l2", text: label }),
    h("span", { class: "l3" }, who));
  cell.gpu = gpu;  // its tooltip is written on first hover (1,000 cells draw faster without)
  return cell;
}

function clusterPage(view) {
  const tiles = h("div", { class: "tiles" });
  const seg = h("div", { class: "seg", role: "group", "aria-label": "colour by" });
  const nodes = h("div", { class: "nodes" });
  nodes.addEventListener("mouseover", (event) => {
    const cell = event.target.closest(".gpu");
    if (cell && cell.gpu && !cell.title) cell.title = gpuTip(cell.gpu);
  });
  let last = null;
  for (const [mode, text] of [["allocation", "Allocation"], ["memory", "Memory"], ["utilization", "Utilisation"]]) {
    seg.append(h("button", {
      type: "button", class: mode === heatMode ? "on" : "", "data-mode": mode, text,
      onclick: () => {
        heatMode = mode;
        for (const b of seg.children) b.classList.toggle("on", b.dataset.mode === mode);
        if (last) draw(last);
      },
    }));
  }
  const legend = h("div", { class: "legend" }, "0%", h("span", { class: "scale" }), "100%",
    h("span", { class: "swatch", style: "background:repeating-linear-gradient(45deg,#eef1f5,#eef1f5 3px,#e1e6ed 3px,#e1e6ed 6px)" }),
    "no reading", h("span", { class: "tag emu", text: "EMU" }), "emulated GPU (no real telemetry)");
  view.append(h("div", { class: "stack" },
    h("h1", { text: "Cluster" }), tiles,
    h("div", { class: "row" }, h("span", { class: "muted", text: "Colour by" }), seg, h("span", { class: "spacer" }), legend),
    nodes));

  function draw(data) {
    const gpus = data.nodes.flatMap((n) => n.gpus);
    const held = gpus.filter((g) => g.holders.length).length;
    const ready = data.nodes.filter((n) => n.status === "available").length;
    const emu = gpus.filter((g) => g.emulated).length;
    const booked = gpus.reduce((s, g) => s + g.booked_memory, 0);
    const total = gpus.reduce((s, g) => s + g.memory_total, 0);
    fill(tiles, 
      ...[[`${ready}/${data.nodes.length}`, "nodes ready"], [`${held}/${gpus.length}`, "GPUs in use"],
        [total ? pct(booked / total) : "–", "GPU memory booked"], [String(emu), "emulated GPUs"]]
        .map(([v, k]) => h("div", { class: "tile" }, h("div", { class: "v", text: v }), h("div", { class: "k", text: k }))));
    if (!data.nodes.length) {
      fill(nodes, h("p", { class: "empty", text: "No nodes have registered yet." }));
      return;
    }
    fill(nodes, ...data.nodes.map((n) => h("section", { class: "card node", "data-node": n.name },
      h("div", { class: "node-head" },
        h("span", { class: "node-name", text: n.name }),
        h("span", { class: `tag ${n.status === "available" ? "ok" : "bad"}`, text: n.status }),
        n.cordoned ? h("span", { class: "tag warn", text: "tainted" }) : null,
        n.gpu_source === "emulated" ? h("span", { class: "tag emu", text: "emulated GPUs" }) : null,
        h("span", { class: "muted", text: `${n.gpus.filter((g) => g.holders.length).length}/${n.gpus.length} GPUs in use` })),
      n.status_reason ? h("p", { class: "error", text: n.status_reason }) : null,
      n.gpus.length ? h("div", { class: "gpus" }, n.gpus.map(gpuCell)) : h("p", { class: "empty", text: "no GPUs" }))));
  }
  const seen = {};
  return {
    refresh: async () => {
      const data = await changed("/ui/api/cluster", seen);
      if (data) { last = data; draw(last); }
    },
  };
}

/* ---------- queues: usage against guarantee, limit and fair share ---------- */

function queueBar(title, q, key, capacity, fmt) {
  const usage = q.usage[key] || 0;
  const guarantee = q.guarantee[key] || 0;
  const fair = q.fair_share[key] || 0;
  const limit = q.limit[key];
  const scale = Math.max(capacity || 0, usage, guarantee, fair, limit === null ? 0 : limit) || 1;
  const at = (x) => `${Math.min(100, (x / scale) * 100)}%`;
  const over = (limit !== null && usage > limit) || usage > Math.max(guarantee, fair);
  return [
    h("div", { class: "bar-label" },
      h("span", { text: `${title}: ${fmt(usage)} in use` }),
      h("span", { text: `guarantee ${fmt(guarantee)} · fair share ${fmt(fair)} · limit ${limit === null ? "none" : fmt(limit)} · of ${fmt(capacity)}` })),
    h("div", { class: "bar", role: "img", "aria-label": `${title} usage ${fmt(usage)} of ${fmt(capacity)}` },
      h("div", { class: `fill${over ? " over" : ""}`, style: `width:${at(usage)}` }),
      guarantee ? h("div", { class: "mark guarantee", style: `left:calc(${at(guarantee)} - 1px)`, title: `guarantee ${fmt(guarantee)}` }) : null,
      fair ? h("div", { class: "mark fair", style: `left:calc(${at(fair)} - 1px)`, title: `fair share ${fmt(fair)}` }) : null,
      limit !== null ? h("div", { class: "mark limit", style: `left:calc(${at(limit)} - 2px)`, title: `limit ${fmt(limit)}` }) : null),
  ];
}

function queuesPage(view) {
  const list = h("div", { class: "queues" });
  const warnings = h("div");
  view.append(h("div", { class: "stack" }, h("h1", { text: "Queues" }),
    h("div", { class: "legend" }, h("span", {}, h("span", { class: "key usage" }), "usage"),
      h("span", {}, h("span", { class: "key guarantee" }), "guarantee"),
      h("span", {}, h("span", { class: "key fair" }), "fair share"),
      h("span", {}, h("span", { class: "key limit" }), "limit"),
      h("span", { text: "· orange bar: above guarantee and fair share (borrowing)" })),
    warnings, list));
  return {
    refresh: async () => {
      const r = await api("/v1/queues");
      fill(warnings, ...(r.warnings || []).map((w) => h("p", { class: "error", text: w })));
      if (!r.queues.length) { fill(list, h("p", { class: "empty", text: "No queues yet." })); return; }
      fill(list, ...r.queues.map((q) => h("section", { class: "card queue", "data-queue": q.name },
        h("div", { class: "node-head" }, h("span", { class: "node-name", text: q.name }),
          q.cohort ? h("span", { class: "muted", text: `cohort ${q.cohort}` }) : null,
          q.declared ? null : h("span", { class: "tag warn", text: "undeclared" })),
        ...queueBar("GPUs", q, "gpus", r.capacity.gpus, num),
        ...queueBar("GPU memory", q, "gpu_memory", r.capacity.gpu_memory, bytes),
        h("div", { class: "facts" },
          ...[["running", q.running_jobs], ["pending", q.pending_jobs], ["weight", num(q.weight)],
            ["dominant share", pct(q.dominant_share)], ["effective share", pct(q.effective_share)],
            ["borrowed GPUs", num(q.borrowed.gpus || 0)]]
            .map(([k, v]) => h("div", {}, h("b", { text: String(v) }), h("span", { class: "muted", text: k })))))));
    },
  };
}

/* ---------- jobs: a filterable, sortable table ---------- */

const JOB_COLUMNS = [
  ["id", "ID", (j) => j.id], ["name", "Name", (j) => j.name || ""], ["user", "User", (j) => j.user],
  ["queue", "Queue", (j) => j.queue], ["state", "State", (j) => STATES.indexOf(j.state)],
  ["gpus", "GPUs", (j) => j.spec.gpus], ["node", "Node", (j) => j.node || ""],
  ["submitted_at", "Submitted", (j) => j.submitted_at], ["runtime", "Runtime", (j) => runtime(j) ?? -1],
];
function runtime(j) {
  if (!j.started_at) return null;
  return (j.finished_at || Date.now() / 1000) - j.started_at;
}

function jobsPage(view) {
  const body = h("tbody");
  const head = h("tr");
  const count = h("span", { class: "muted" });
  const queueSel = h("select", { "aria-label": "queue" });
  const userSel = h("select", { "aria-label": "user" });
  const stateSel = h("select", { "aria-label": "state" },
    h("option", { value: "active", text: "active (pending…running)" }),
    h("option", { value: "", text: "all states" }),
    STATES.map((s) => h("option", { value: s, text: s })));
  stateSel.value = jobView.state;
  const search = h("input", { type: "search", placeholder: "filter by id, name, user, node…", value: jobView.text, "aria-label": "filter" });
  let jobs = [];
  const seen = {};
  const rerun = () => { jobView.state = stateSel.value; jobView.queue = queueSel.value; jobView.user = userSel.value; page && page.refresh(); };
  stateSel.addEventListener("change", rerun);
  queueSel.addEventListener("change", () => { jobView.queue = queueSel.value; draw(); });
  userSel.addEventListener("change", () => { jobView.user = userSel.value; draw(); });
  search.addEventListener("input", () => { jobView.text = search.value; draw(); });
  for (const [key, label] of JOB_COLUMNS) {
    head.append(h("th", { class: "sort", "data-sort": key, onclick: () => {
      jobView.desc = jobView.sort === key ? !jobView.desc : key === "id" || key === "submitted_at";
      jobView.sort = key; draw();
    } }, label));
  }
  view.append(h("div", { class: "stack" }, h("h1", { text: me.admin ? "Jobs" : `Jobs of ${me.user}` }),
    h("div", { class: "row filters" }, search, stateSel, queueSel, me.admin ? userSel : null, h("span", { class: "spacer" }), count),
    h("div", { class: "table-wrap" }, h("table", { class: "jobs" }, h("thead", {}, head), body))));

  function options(sel, values, all, current) {
    const want = ["", ...values].join("\n");
    if (sel.dataset.values !== want) {
      fill(sel, h("option", { value: "", text: all }), values.map((v) => h("option", { value: v, text: v })));
      sel.dataset.values = want;
    }
    sel.value = values.includes(current) ? current : "";
  }

  function draw() {
    options(queueSel, [...new Set(jobs.map((j) => j.queue))].sort(), "all queues", jobView.queue);
    options(userSel, [...new Set(jobs.map((j) => j.user))].sort(), "all users", jobView.user);
    const text = jobView.text.trim().toLowerCase();
    const col = JOB_COLUMNS.find((c) => c[0] === jobView.sort) || JOB_COLUMNS[0];
    const shown = jobs.filter((j) => (!jobView.queue || j.queue === jobView.queue) && (!jobView.user || j.user === jobView.user)
      && (!text || [j.id, j.name, j.user, j.queue, j.node, j.state].join(" ").toLowerCase().includes(text)));
    shown.sort((a, b) => {
      const x = col[2](a); const y = col[2](b);
      const c = x < y ? -1 : x > y ? 1 : a.id - b.id;
      return jobView.desc ? -c : c;
    });
    for (const th of head.children) {
      th.textContent = JOB_COLUMNS.find((c) => c[0] === th.dataset.sort)[1] + (th.dataset.sort === jobView.sort ? (jobView.desc ? " ▼" : " ▲") : "");
    }
    count.textContent = `${shown.length} of ${jobs.length}${jobs.length >= JOB_ROWS ? " newest" : ""} jobs`;
    fill(body, ...shown.map((j) => h("tr", { class: "click", "data-job": j.id, "data-state": j.state, onclick: () => { location.hash = `#/job/${j.id}`; } },
      h("td", {}, h("a", { href: `#/job/${j.id}`, text: String(j.id) })), h("td", { class: "name", text: j.name || "–", title: j.name || "" }),
      h("td", { text: j.user }), h("td", { text: j.queue }), h("td", {}, stateBadge(j.state)),
      h("td", { text: j.spec.gpu_memory ? `${j.spec.gpus} × ${bytes(j.spec.gpu_memory)}` : String(j.spec.gpus) }),
      h("td", { text: j.node || "–" }), h("td", { text: ago(j.submitted_at), title: clock(j.submitted_at) }),
      h("td", { text: duration(runtime(j)) }))));
    if (!shown.length) body.append(h("tr", {}, h("td", { colspan: JOB_COLUMNS.length, class: "empty", text: "No jobs match." })));
  }

  return {
    refresh: async () => {
      const state = jobView.state === "active" ? ACTIVE.join(",") : jobView.state;
      const data = await changed(`/v1/jobs?limit=${JOB_ROWS}${state ? `&state=${state}` : ""}`, seen);
      if (data) jobs = data;
      draw(); // relative times move on even when the jobs did not change
    },
  };
}

/* ---------- job detail ---------- */

function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(Boolean).flatMap(([k, v]) => [h("dt", { text: k }), h("dd", {}, v instanceof Node ? v : String(v))]));
}

function specValue(key, value) {
  if (value === null || value === undefined || value === "") return "–";
  if (["gpu_memory", "memory", "shm_size"].includes(key) && typeof value === "number") return bytes(value);
  if (["max_runtime", "min_runtime"].includes(key) && typeof value === "number") return duration(value);
  if (Array.isArray(value)) return value.length ? value.map((x) => (typeof x === "object" ? Object.entries(x).map(([a, b]) => `${a}=${b}`).join(" ") : String(x))).join("  ") : "–";
  if (typeof value === "object") {
    const entries = Object.entries(value);
    return entries.length ? entries.map(([a, b]) => `${a}=${typeof b === "object" ? Object.values(b || {}).join(",") : b}`).join("  ") : "–";
  }
  return String(value);
}

function eventText(e) {
  const p = e.payload || {};
  if (e.type === "job.state") return `${p.from || "new"} → ${p.to}${p.reason ? `: ${p.reason}` : ""}`;
  if (e.type === "job.placed") return `placed on ${e.node} GPUs ${(p.gpus || []).join(", ") || "–"}${p.memory_per_gpu ? ` (${bytes(p.memory_per_gpu)} each)` : ""}`;
  if (e.type === "job.preempted") return `preempted by job ${p.preemptor} (${[p.preemptor_user, p.preemptor_queue].filter(Boolean).join("/")})${p.reason ? `: ${p.reason}` : ""}`;
  if (e.type === "job.watchdog_kill") return p.reason ? `stopped: ${p.reason}` : `stopped: ran past max_runtime ${duration(p.max_runtime)}`;
  return Object.entries(p).map(([k, v]) => `${k} ${v}`).join(", ");
}

function jobPage(view, arg) {
  const id = Number(arg);
  const title = h("div", { class: "title" });
  const summary = h("section", { class: "card" });
  const reasons = h("section", { class: "card", id: "pending-reasons" });
  const alloc = h("section", { class: "card" });
  const spec = h("section", { class: "card" });
  const history = h("section", { class: "card wide" });
  const events = h("section", { class: "card wide" });
  const logs = h("pre", { class: "logs", id: "logs" });
  const logNote = h("span", { class: "muted" });
  view.append(h("div", {}, h("p", {}, h("a", { href: "#/jobs", text: "← all jobs" })), title,
    h("div", { class: "detail" }, summary, reasons, alloc, spec,
      h("section", { class: "card wide" }, h("div", { class: "row" }, h("h2", { text: "Logs" }), logNote), logs),
      history, events)));
  const stream = { controller: null, started: false, attempt: null };
  let lastEventId = 0; const eventRows = [];

  async function follow(job) {
    stream.started = true; stream.attempt = job.attempt;
    stream.controller = new AbortController();
    logs.textContent = "";
    logNote.textContent = ACTIVE.includes(job.state) ? "following live" : "";
    try {
      const res = await fetch(`/v1/jobs/${id}/logs?follow=true`, { credentials: "same-origin", signal: stream.controller.signal, headers: { "X-Gpudock-UI": "1" } });
      if (!res.ok) { logNote.textContent = `cannot read logs (${res.status})`; return; }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
        logs.append(decoder.decode(value, { stream: true }));
        if (atBottom) logs.scrollTop = logs.scrollHeight;
      }
      logNote.textContent = "end of log";
    } catch (err) {
      if (err.name !== "AbortError") logNote.textContent = `log stream lost: ${err.message}`;
    }
  }

  function draw(job) {
    const active = ACTIVE.includes(job.state);
    fill(title, h("h1", { text: `Job ${job.id}${job.name ? ` · ${job.name}` : ""}` }), stateBadge(job.state),
      job.cancel_requested ? h("span", { class: "tag warn", text: "stopping" }) : null, h("span", { class: "spacer" }),
      active && !job.cancel_requested ? h("button", { type: "button", class: "danger", text: "Cancel job", onclick: async (ev) => {
        ev.target.disabled = true;
        try { await api(`/v1/jobs/${id}/cancel`, { method: "POST" }); } catch (err) { status(`cancel failed: ${err.message}`); }
      } }) : null);
    fill(summary, h("h2", { text: "Summary" }), kv([
      ["user", job.user], ["queue", job.queue], ["priority", job.priority], ["attempt", job.attempt],
      ["submitted", clock(job.submitted_at)], ["started", clock(job.started_at)], ["finished", clock(job.finished_at)],
      ["runtime", duration(runtime(job))], job.exit_code !== null ? ["exit code", job.exit_code] : null,
      job.reason ? ["reason", job.reason] : null]));
    fill(reasons, h("h2", { text: "Why it is pending" }), job.pending_reasons.length
      ? job.pending_reasons.map((r) => h("div", { class: "reason" }, h("div", { class: "layer", text: r.layer }),
        h("div", { text: r.message }), r.counterfactual ? h("div", { class: "cf", text: `→ ${r.counterfactual}` }) : null))
      : h("p", { class: "empty", text: job.state === "PENDING" ? "Not looked at by the scheduler yet." : "Not pending." }));
    reasons.hidden = job.state !== "PENDING" && !job.pending_reasons.length;
    const a = job.allocation;
    fill(alloc, h("h2", { text: "Allocation" }), a ? kv([["node", a.node],
      ["GPUs", h("span", { class: "mono", text: a.gpus.join("\n") || "–", style: "white-space:pre-line" })],
      ["memory per GPU", a.memory_per_gpu ? bytes(a.memory_per_gpu) : "whole GPUs"], ["container", job.container || "–"]])
      : h("p", { class: "empty", text: job.node ? `Holds nothing now (last ran on ${job.node}).` : "Holds nothing." }));
    fill(spec, h("h2", { text: "Spec" }), kv(Object.entries(job.spec).map(([k, v]) => [k, specValue(k, v)]).filter(([, v]) => v !== "–")));
    fill(history, h("h2", { text: "State history" }), h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", { text: "time" }), h("th", { text: "change" }), h("th", { text: "reason" }))),
      h("tbody", {}, job.events.map((e) => h("tr", {}, h("td", { class: "nowrap", text: clock(e.at) }),
        h("td", { class: "nowrap" }, e.from ? stateBadge(e.from) : "new", " → ", stateBadge(e.to)),
        h("td", { class: "wrap", text: e.reason || "" })))))));
    if (!stream.started && job.state !== "PENDING" && job.state !== "ALLOCATED") follow(job);
    else if (stream.started && job.attempt !== stream.attempt && job.state !== "PENDING") { stream.controller.abort(); follow(job); }
    if (!stream.started) logNote.textContent = "no output yet: the job has not started";
    if (logNote.textContent === "following live" && !active) logNote.textContent = "";
  }

  async function refreshEvents() {
    const r = await api(`/v1/events?job=${id}&since=${lastEventId}&limit=1000`);
    if (!r.events.length && eventRows.length) return;
    eventRows.push(...r.events); lastEventId = r.next;
    fill(events, h("h2", { text: "Events" }), eventRows.length ? h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", { text: "time" }), h("th", { text: "type" }), h("th", { text: "what" }))),
      h("tbody", {}, eventRows.slice(-200).map((e) => h("tr", {}, h("td", { class: "nowrap", text: clock(e.at) }),
        h("td", { class: "nowrap", text: e.type }), h("td", { class: "wrap", text: eventText(e) }))))))
      : h("p", { class: "empty", text: "No events." }));
  }

  return {
    refresh: async () => {
      let job;
      try { job = await api(`/v1/jobs/${id}`); } catch (err) {
        if (err.status === 404 || err.status === 422) { fill(title, h("h1", { text: `Job ${arg}` })); fill(summary, h("p", { class: "error", text: err.message })); return; }
        throw err;
      }
      draw(job);
      await refreshEvents();
    },
    stop: () => { if (stream.controller) stream.controller.abort(); },
  };
}

/* ---------- boot ---------- */

document.getElementById("login-form").addEventListener("submit", login);
document.getElementById("logout").addEventListener("click", logout);
window.addEventListener("hashchange", route);
if (document.body.dataset.user) {  // the server found a valid cookie
  me = { user: document.body.dataset.user, admin: document.body.dataset.admin === "1" };
  start();
} else {
  showLogin();
}
