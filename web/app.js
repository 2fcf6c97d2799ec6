// The status page: polls the API of whichever node served it (relative URLs, so any node
// works); actions go through the same API. No build step, no dependencies.
// Every API call carries the bearer token the user entered in the token form; the token is
// kept in sessionStorage (this tab only, gone when it closes).
"use strict";

const $ = (sel) => document.querySelector(sel);
const POLL_MS = 2000;
const HERD_MS = 30000;
const SYMBOL = {
  succeeded: "✓", failed: "✗", running: "▶", pending: "…", skipped: "↷", cancelled: "⊘",
};
const lastRendered = new Map();
const TOKEN_KEY = "raftcron.token";

function getToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
}

function setToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch (e) { /* storage disabled: the token lasts until reload */ }
  memoryToken = token;
}

let memoryToken = getToken();
let authProblem = null;  // the last 401/403 message shown, so it is not repeated every poll
let authState = "ok";  // "loading" after a new token, "refused" after a 401 while polling

function showAuth(text, isError) {
  const box = $("#auth-message");
  if (box.textContent !== text) box.textContent = text;
  box.className = isError ? "auth-message auth-error" : "auth-message";
}

function authFailed(status, message) {
  const text = status === 401
    ? `The API refused the token (401 unauthorized): ${message}. Enter a valid token.`
    : `This token is not allowed to do that (403 forbidden): ${message}.`;
  if (status === 401) authState = "refused";
  if (authProblem !== text) {
    authProblem = text;
    showAuth(text, true);
    if (status === 401) $("#token-input").focus();
  }
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function td(content, attrs = {}) {
  return el("td", attrs, content ?? "–");
}

function statusBadge(status, extra) {
  const text = `${SYMBOL[status] || "•"} ${status}${extra ? ` (${extra})` : ""}`;
  return el("span", { class: `status status-${status}` }, text);
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return `${Math.round(seconds)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${(seconds / 3600).toFixed(1)} h ago`;
}

function sinceIso(iso) {
  return iso ? age((Date.now() - Date.parse(iso)) / 1000) : "–";
}

function shortTime(iso) {
  return iso ? iso.replace("T", " ").replace("Z", " UTC") : "–";
}

// Re-render only what changed, and give focus back to the control that had it, so a
// keyboard user does not lose their place every two seconds.
function render(key, data, container, build) {
  const json = JSON.stringify(data);
  if (lastRendered.get(key) === json) return;
  lastRendered.set(key, json);
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.key : undefined;
  build(container, data);
  if (focused) {
    const again = container.querySelector(`[data-key="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

function fillRows(tbody, rows, empty) {
  if (!rows.length) {
    const cols = tbody.closest("table").querySelectorAll("thead th").length;
    tbody.replaceChildren(el("tr", {}, el("td", { colspan: cols, class: "muted" }, empty)));
    return;
  }
  tbody.replaceChildren(...rows.map((cells) => el("tr", {}, ...cells)));
}

async function api(path, options = {}) {
  const headers = { "content-type": "application/json", ...(options.headers || {}) };
  if (memoryToken) headers.Authorization = `Bearer ${memoryToken}`;
  const resp = await fetch(path, { ...options, headers });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const msg = body && body.error ? body.error.message : resp.statusText;
    if (resp.status === 401 || resp.status === 403) authFailed(resp.status, msg);
    const err = new Error(msg);
    err.status = resp.status;
    err.body = body;
    throw err;
  }
  return body;
}

function say(text) {
  $("#action-result").textContent = text;
}

async function act(job, action, label) {
  const headers = action === "trigger"
    ? { "Idempotency-Key": `page-${Date.now()}-${Math.random().toString(36).slice(2)}` } : {};
  try {
    const result = await api(`/v1/jobs/${encodeURIComponent(job)}/${action}`,
      { method: "POST", body: "{}", headers });
    say(action === "trigger" ? `${label} ${job}: occurrence ${result.id} is ${result.status}`
      : `${label} ${job}: done`);
    lastRendered.delete("jobs");
    refresh();
  } catch (e) {
    say(`${label} ${job} failed: ${e.message}`);
  }
}

function actionButton(label, job, action, confirmText) {
  return el("button", {
    type: "button", "aria-label": `${label} ${job}`,
    // Pause and Resume share a key: after a click, focus lands on the button that replaced it.
    "data-key": `${action === "trigger" ? "trigger" : "toggle"}:${job}`,
    onclick: () => {
      if (confirmText && !window.confirm(confirmText)) {
        say(`${label} ${job}: cancelled`);
        return;
      }
      act(job, action, label);
    },
  }, label);
}

// --- sections ---------------------------------------------------------------------------

function renderHealth(container, { ready, nodes }) {
  const problems = [...(ready.problems || [])];
  const notReady = problems.length > 0;
  const down = nodes.nodes.filter((n) => !n.reachable).map((n) => n.node_id);
  if (down.length) problems.push(`unreachable over HTTP: ${down.join(", ")}`);
  const warnings = ready.warnings || [];
  container.className = `banner ${problems.length ? "banner-bad" : "banner-ok"}`;
  const tick = ready.tick_age_s === null || ready.tick_age_s === undefined
    ? "no tick seen" : `last tick ${ready.tick_age_s.toFixed(1)} s ago`;
  container.replaceChildren(
    el("strong", {}, notReady ? "⚠ Not ready: " : problems.length ? "⚠ Degraded: " : "✓ Ready: "),
    problems.length ? problems.join("; ") : `leader ${ready.leader_id}, ${tick}`,
    ...warnings.map((w) => el("div", { class: "muted" }, `note: ${w}`)),
  );
}

function renderCluster(tbody, data) {
  fillRows(tbody, data.nodes.map((n) => {
    const reach = n.reachable ? "✓ yes" : `✗ no${n.error ? ` (${n.error})` : ""}`;
    const link = n.raft_link_from_here === false ? "; Raft link from here down" : "";
    const skew = n.clock_skew_vs_leader_ms;
    return [
      el("th", { scope: "row" }, n.node_id + (n.node_id === data.asked_by ? " (this page)" : "")),
      td(n.role ? statusBadgeRole(n.role) : "unknown"), td(n.term), td(n.leader_id),
      td(n.commit_index), td(n.last_applied_index),
      td(n.replication_lag === null || n.replication_lag === undefined ? "–"
        : `${n.replication_lag} entries`),
      td(reach + link),
      td(skew === null || skew === undefined ? "–"
        : `${skew > 0 ? "+" : ""}${Math.round(skew)} ms`),
      td(clockConfirmed(n.clock)),
      td(n.last_tick_ms ? age((Date.now() - n.last_tick_ms) / 1000) : "–"),
    ];
  }), "no nodes");
}

// Whether a majority confirmed the node's clock: a leader without it leases nothing.
function clockConfirmed(clock) {
  if (!clock) return "–";
  if (clock.confirmed) return "✓ yes";
  const last = clock.last_confirmed_at ? `, last ${sinceIso(clock.last_confirmed_at)}` : ", never";
  return el("span", { class: "status alert-open" }, `✗ no${last}`);
}

function statusBadgeRole(role) {
  return el("span", { class: `role role-${role}` }, role === "leader" ? `★ ${role}` : role);
}

function renderAlerts(tbody, { open, resolved }) {
  const rows = [...open, ...resolved.slice(0, 10)];
  fillRows(tbody, rows.map((a) => [
    td(el("span", { class: `status alert-${a.status}` },
      a.status === "open" ? "⚠ open" : "✓ resolved")),
    td(a.job_id), td(shortTime(a.scheduled_for)),
    td(a.reason), td(sinceIso(a.raised_at)), td(a.resolved_at ? sinceIso(a.resolved_at) : "–"),
    td([a.message, ...a.history.filter((h) => h.event === "resolved" && h.message)
      .map((h) => `resolved: ${h.message}`)].filter(Boolean).join("; ") || "–"),
  ]), "no alerts");
}

function renderJobs(tbody, jobs) {
  fillRows(tbody, jobs.map((j) => {
    const next = el("ol", { class: "fires" }, ...j.next_fire_times.map((f) =>
      el("li", {}, `${f.local.replace("T", " ")} / ${shortTime(f.utc)}`)));
    const last = j.last_run;
    const actions = el("td", { class: "actions" },
      j.paused ? actionButton("Resume", j.id, "resume") : actionButton("Pause", j.id, "pause"),
      actionButton("Run now", j.id, "trigger", `Run ${j.id} now?`));
    return [
      el("th", { scope: "row" }, j.id),
      td(el("span", {}, el("span", {}, j.describe),
        el("br"), el("code", {}, `${j.schedule.cron}`), ` ${j.schedule.timezone}`,
        j.deadline_s ? el("span", { class: "muted" }, ` · deadline ${j.deadline_s} s`) : null)),
      td(j.next_fire_times.length ? next : "none"),
      td(last ? el("span", {}, statusBadge(last.status, last.reason), el("br"),
        el("span", { class: "muted" }, `${last.kind} ${shortTime(last.scheduled_for)}`))
        : "never ran"),
      td(el("span", { class: `state state-${j.paused ? "paused" : "active"}` },
        j.paused ? "‖ paused" : "● active"), { "data-job-state": j.id }),
      actions,
    ];
  }), "no jobs yet");
}

function renderTimeline(container, jobs) {
  container.replaceChildren(...jobs.map((j) => {
    const occs = [...j.timeline].reverse();
    const strip = el("ol", { class: "strip", "aria-label": `Recent occurrences of ${j.id}` },
      ...occs.map((o) => {
        const label = `${shortTime(o.scheduled_for)} ${o.kind}: ${o.status}` +
          (o.reason ? ` (${o.reason})` : "");
        return el("li", { class: `occ status-${o.status}`, title: label },
          el("span", { "aria-hidden": "true" }, SYMBOL[o.status] || "•"),
          el("span", { class: "sr-only" }, label));
      }));
    const skipped = occs.filter((o) => o.status === "skipped");
    const reasons = [...new Set(skipped.map((o) => o.reason))];
    const list = el("details", {},
      el("summary", { "data-key": `details:${j.id}` }, `List ${occs.length} occurrences of ${j.id}`),
      el("ul", {}, ...j.timeline.map((o) => el("li", {},
        `${shortTime(o.scheduled_for)} — ${o.kind} — `, statusBadge(o.status, o.reason),
        o.attempts > 1 ? ` after ${o.attempts} attempts` : ""))));
    return el("div", { class: "job-timeline" },
      el("h3", {}, j.id),
      occs.length ? strip : el("p", { class: "muted" }, "no occurrences yet"),
      skipped.length ? el("p", { class: "muted" },
        `${skipped.length} skipped: ${reasons.join(", ")}`) : null,
      occs.length ? list : null);
  }));
  if (!jobs.length) container.replaceChildren(el("p", { class: "muted" }, "no jobs yet"));
}

function renderRunning(tbody, attempts) {
  fillRows(tbody, attempts.map((a) => [
    td(a.job_id), td(a.id), td(a.worker_id), td(sinceIso(a.leased_at)),
    td(a.heartbeat_age_s === null ? "–" : `${a.heartbeat_age_s.toFixed(1)} s`),
    td(a.fencing_token),
  ]), "nothing running");
}

function renderWorkers(tbody, workers) {
  fillRows(tbody, workers.map((w) => [
    el("th", { scope: "row" }, w.worker_id), td(age(w.last_seen_age_s)), td(w.runs),
    td(w.running), td(w.succeeded), td(w.failed),
  ]), "no worker has run anything yet");
}

function renderQueues(tbody, queues) {
  fillRows(tbody, queues.map((q) => [
    el("th", { scope: "row" }, q.queue), td(q.depth),
    td(q.depth ? age(q.oldest_due_age_s).replace(" ago", "") : "–"),
  ]), "no queue yet");
}

function renderTenants(tbody, tenants) {
  const list = (v) => (v === null ? "any" : v.length ? v.join(", ") : "none");
  const quota = (t) => ["max_jobs", "max_concurrent_runs", "max_fires_per_minute"]
    .filter((k) => t[k] !== null).map((k) => `${k} ${t[k]}`).join(", ") || "unlimited";
  fillRows(tbody, tenants.map((t) => [
    el("th", { scope: "row" }, t.name), td(quota(t)), td(list(t.queues)), td(list(t.targets)),
    td(t.policy_set && t.http_hosts === null ? "any public host" : list(t.http_hosts)),
  ]), "no tenant has quotas or a policy");
}

function renderHerd(container, herd) {
  const counts = herd.counts;
  const max = Math.max(1, ...counts);
  const w = counts.length;
  const h = 120;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const peak = herd.peak ? `peak ${herd.peak.count} at ${shortTime(herd.peak.at)}` : "nothing due";
  svg.setAttribute("aria-label",
    `Bar chart of occurrences due per ${herd.bucket_s / 60} minute(s) over ${herd.hours} h: ${peak}`);
  let d = "";
  counts.forEach((c, i) => {
    if (c) d += `M${i + 0.5} ${h}V${h - (c / max) * (h - 4)}`;
  });
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", d);
  path.setAttribute("class", "bars");
  path.setAttribute("stroke-width", "1");
  svg.append(path);
  const hours = el("div", { class: "herd-axis", "aria-hidden": "true" },
    ...[0, 6, 12, 18, 24].map((hh) => el("span", {}, hh === 0 ? "now" : `+${hh} h`)));
  container.replaceChildren(svg, hours);
  $("#herd-summary").textContent = `${herd.total} occurrences over the next ${herd.hours} h ` +
    `from ${herd.jobs} active jobs; ${peak} (max ${max} per bucket).` +
    (herd.truncated ? " Truncated: too many instants to count them all." : "");
}

// --- polling ----------------------------------------------------------------------------

async function readyz() {
  const resp = await fetch("/readyz");
  return resp.json();
}

async function refresh() {
  if (!memoryToken) {
    $("#summary").textContent = "Enter an API token to see the cluster.";
    return;
  }
  const results = await Promise.allSettled([
    readyz(), api("/v1/cluster/nodes"), api("/v1/alerts?status=open&limit=100"),
    api("/v1/alerts?status=resolved&limit=10"), api("/v1/status/jobs"),
    api("/v1/attempts?status=running&limit=100"), api("/v1/workers"), api("/v1/tenants"),
    api("/v1/status/queues"),
  ]);
  const [ready, nodes, open, resolved, jobs, running, workers, tenants, queues] =
    results.map((r) => (r.status === "fulfilled" ? r.value : null));
  const failed = results.filter((r) => r.status === "rejected");
  if (nodes) {
    const self = nodes.nodes.find((n) => n.node_id === nodes.asked_by) || {};
    $("#summary").textContent = `Served by ${nodes.asked_by} (${self.role || "unknown"}); ` +
      `leader ${nodes.leader_id || "none"}; term ${self.term ?? "?"}` +
      (open ? `; ${open.alerts.length} open alert${open.alerts.length === 1 ? "" : "s"}` : "");
    render("cluster", nodes, $("#cluster tbody"), renderCluster);
  }
  if (ready && nodes) render("health", { ready, nodes }, $("#health"), renderHealth);
  if (open && resolved) {
    render("alerts", { open: open.alerts, resolved: resolved.alerts }, $("#alerts tbody"),
      renderAlerts);
  }
  if (jobs) {
    render("jobs", jobs.jobs, $("#jobs tbody"), renderJobs);
    render("timeline", jobs.jobs, $("#timeline"), renderTimeline);
  }
  if (running) render("running", running.attempts, $("#running tbody"), renderRunning);
  if (workers) render("workers", workers.workers, $("#workers tbody"), renderWorkers);
  if (tenants) render("tenants", tenants.tenants, $("#tenants tbody"), renderTenants);
  if (queues) render("queues", queues.queues, $("#queues tbody"), renderQueues);
  // A refused or new token that now works: say so (a 403 from an action stays visible).
  if (!failed.some((r) => r.reason && (r.reason.status === 401 || r.reason.status === 403))
      && authState !== "ok") {
    authState = "ok";
    authProblem = null;
    showAuth("Using the token saved for this browser tab.", false);
  }
  $("#updated").textContent = failed.length
    ? `Update at ${new Date().toLocaleTimeString()} incomplete: ${failed[0].reason.message}`
    : `Updated ${new Date().toLocaleTimeString()} (every ${POLL_MS / 1000} s)`;
}

async function refreshHerd() {
  if (!memoryToken) return;
  try {
    render("herd", await api("/v1/schedule/herd?hours=24&bucket_s=60"), $("#herd"), renderHerd);
  } catch (e) {
    $("#herd-summary").textContent = `cannot compute the load ahead: ${e.message}`;
  }
}

async function loop() {
  try { await refresh(); } catch (e) { $("#summary").textContent = `cannot reach the API: ${e.message}`; }
  setTimeout(loop, POLL_MS);
}

function setupTokenForm() {
  const form = $("#token-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("#token-input").value.trim();
    if (!value) {
      showAuth("Enter a token first.", true);
      $("#token-input").focus();
      return;
    }
    setToken(value);
    $("#token-input").value = "";
    authProblem = null;
    authState = "loading";
    showAuth("Token saved for this browser tab; loading…", false);
    lastRendered.clear();
    refresh().catch(() => {});
    refreshHerd();
  });
  $("#token-forget").addEventListener("click", () => {
    setToken("");
    authProblem = null;
    showAuth("Token forgotten. Enter a token to see the cluster.", false);
    $("#token-input").focus();
  });
  if (memoryToken) showAuth("Using the token saved for this browser tab.", false);
  else showAuth("This cluster needs an API token (a read, tenant or admin token).", false);
}

setupTokenForm();
loop();
refreshHerd();
setInterval(refreshHerd, HERD_MS);
