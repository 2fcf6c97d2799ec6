// The overview: health and alerts on top (alerts can be acknowledged or resolved with a
// note), one compact row per job with a sparkline of its recent outcomes (sortable,
// filterable), the charts, then the cluster, running attempts, workers, queues, tenants.

import {
  $, SYMBOL, el, td, scheduleText, statusBadge, jobLink, age, sinceIso, shortTime, causeText, render, forget,
  fillRows, api, say, actionButton,
} from "./lib.js";
import { renderHerd, renderLag } from "./charts.js";

const sort = { key: "id", dir: 1 };
let jobsData = [];
let jobsTruncated = false;  // the server lists at most 200 jobs
let fleetTruncated = false;  // the unfiltered list was cut at 200: the filter asks the server
let jobsSearched = false;  // jobsData is the server's answer to the filter's words
let searchTimer = null;

// The jobs to ask for: all (the first 200 by id), or, when the fleet is larger than that
// and the filter has words, the first 200 the server finds for them (GET ?q=).
function jobsPath() {
  const q = $("#job-filter").value.trim().slice(0, 200);
  return q && fleetTruncated ? `/v1/status/jobs?q=${encodeURIComponent(q)}` : "/v1/status/jobs";
}
const alertForms = new Map();  // alert id -> "ack" | "resolve": its note form is open
let alertsData = null;

// --- health and cluster -------------------------------------------------------------------

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

// Whether a majority confirmed the node's clock: a leader without it leases nothing.
function clockConfirmed(clock) {
  if (!clock) return "–";
  if (clock.confirmed) return "✓ yes";
  const last = clock.last_confirmed_at ? `, last ${sinceIso(clock.last_confirmed_at)}` : ", never";
  return el("span", { class: "status alert-open" }, `✗ no${last}`);
}

// The protocol level the node speaks, and the cluster's committed one when it is lower:
// the features of the newer level stay locked until every node speaks it.
function protocolLevel(n) {
  if (n.protocol_level === null || n.protocol_level === undefined) return "–";
  const cluster = n.cluster_level;
  if (cluster === null || cluster === undefined || cluster >= n.protocol_level) {
    return String(n.protocol_level);
  }
  return el("span", { class: "status alert-open" },
    `${n.protocol_level}; cluster at ${cluster}: newer features locked until every node is upgraded`);
}

function roleBadge(role) {
  return el("span", { class: `role role-${role}` }, role === "leader" ? `★ ${role}` : role);
}

function renderCluster(tbody, data) {
  fillRows(tbody, data.nodes.map((n) => {
    const reach = n.reachable ? "✓ yes" : `✗ no${n.error ? ` (${n.error})` : ""}`;
    const link = n.raft_link_from_here === false ? "; Raft link from here down" : "";
    const skew = n.clock_skew_vs_leader_ms;
    return [
      el("th", { scope: "row" }, n.node_id + (n.node_id === data.asked_by ? " (this page)" : "")),
      td(n.role ? roleBadge(n.role) : "unknown"), td(n.term), td(n.leader_id),
      td(n.commit_index), td(n.last_applied_index),
      td(n.replication_lag === null || n.replication_lag === undefined ? "–"
        : `${n.replication_lag} entries`),
      td(reach + link),
      td(skew === null || skew === undefined ? "–"
        : `${skew > 0 ? "+" : ""}${Math.round(skew)} ms`),
      td(clockConfirmed(n.clock)),
      td(n.last_tick_ms ? age((Date.now() - n.last_tick_ms) / 1000) : "–"),
      td(protocolLevel(n)),
    ];
  }), "no nodes");
}

// --- alerts -------------------------------------------------------------------------------

async function alertAction(alertId, action, note) {
  const label = action === "ack" ? "Acknowledge" : "Resolve";
  try {
    await api(`/v1/alerts/${encodeURIComponent(alertId)}/${action}`,
      { method: "POST", body: JSON.stringify({ note }) });
    say(`${label} ${alertId}: done`);
    alertForms.delete(alertId);
    forget("alerts");
    refreshOverview();
  } catch (e) {
    say(`${label} ${alertId} failed: ${e.message}`);
  }
}

function noteForm(alert, action, cols) {
  const label = action === "ack" ? "Acknowledge" : "Resolve";
  const inputId = `note-${action}-${alert.id}`;
  const input = el("input", { id: inputId, type: "text", size: 40, maxlength: 1000,
    required: true, placeholder: "what you did or why", "data-key": `note:${alert.id}` });
  const form = el("form", { class: "note-form", onsubmit: (event) => {
    event.preventDefault();
    const note = input.value.trim();
    if (!note) { say(`${label} ${alert.id}: a note is required`); input.focus(); return; }
    alertAction(alert.id, action, note);
  } },
  el("label", { for: inputId }, `Note for ${label.toLowerCase()} ${alert.id}`), input,
  el("button", { type: "submit" }, label),
  el("button", { type: "button", onclick: () => {
    alertForms.delete(alert.id); forget("alerts"); drawAlerts();
  } }, "Cancel"));
  setTimeout(() => input.focus(), 0);
  return el("tr", { class: "note-row" }, el("td", { colspan: cols }, form));
}

function alertNotes(a) {
  const notes = a.history.filter((h) => h.note || (h.event === "resolved" && h.message))
    .map((h) => (h.note ? `${h.event} by ${h.by}: ${h.note}` : `resolved: ${h.message}`));
  return [a.message, ...notes].filter(Boolean).join("; ") || "–";
}

function renderAlerts(tbody, { open, resolved }) {
  const rows = [];
  for (const a of [...open, ...resolved.slice(0, 5)]) {
    const acked = a.acknowledged;
    const state = a.status === "open"
      ? el("span", { class: "status alert-open" }, acked ? "⚠ open, acknowledged" : "⚠ open")
      : el("span", { class: "status alert-resolved" }, "✓ resolved");
    const open = (action) => () => { alertForms.set(a.id, action); forget("alerts"); drawAlerts(); };
    const actions = a.status === "open" ? el("td", { class: "actions" },
      acked ? null : el("button", { type: "button", "aria-label": `Acknowledge alert ${a.id}`,
        "data-key": `ack:${a.id}`, onclick: open("ack") }, "Ack"),
      el("button", { type: "button", "aria-label": `Resolve alert ${a.id}`,
        "data-key": `resolve:${a.id}`, onclick: open("resolve") }, "Resolve")) : td("–");
    rows.push(el("tr", { "data-alert": a.id },
      td(state), td(jobLink(a.job_id)),
      td(el("span", {}, `${a.kind}: ${a.reason}${a.scheduled_for ? ` · ${shortTime(a.scheduled_for)}` : ""}`,
        a.cause ? el("span", { class: "cause", "data-cause": a.cause }, ` · ${causeText(a.cause)}`) : "")),
      td(sinceIso(a.raised_at)), td(alertNotes(a), { class: "notes" }), actions));
    if (alertForms.has(a.id)) rows.push(noteForm(a, alertForms.get(a.id), 6));
  }
  fillRows(tbody, rows, "no alerts");
}

function drawAlerts() {
  if (alertsData) render("alerts", { ...alertsData, forms: [...alertForms] }, $("#alerts tbody"), renderAlerts);
}

// --- jobs ---------------------------------------------------------------------------------

function sparkline(j) {
  const occs = [...j.timeline].reverse();
  if (!occs.length) return el("span", { class: "muted" }, "none yet");
  const tally = {};
  for (const o of occs) {
    const key = o.reason ? `${o.status} (${o.reason})` : o.status;
    tally[key] = (tally[key] || 0) + 1;
  }
  const label = `Last ${occs.length} of ${j.id}, oldest first: ` +
    Object.entries(tally).map(([k, v]) => `${v} ${k}`).join(", ");
  return el("span", { class: "spark", role: "img", "aria-label": label, title: label },
    ...occs.map((o) => el("i", { class: `occ status-${o.status}`,
      title: `${shortTime(o.scheduled_for)} ${o.kind}: ${o.status}${o.reason ? ` (${o.reason})` : ""}` },
    SYMBOL[o.status] || "•")));
}

const SORT_KEYS = {
  id: (j) => j.id,
  schedule: (j) => j.describe,
  last: (j) => (j.last_run ? j.last_run.scheduled_for : ""),
  next: (j) => (j.next_fire_times.length ? j.next_fire_times[0].utc : "~"),
  state: (j) => (j.paused ? "paused" : "active"),
  failures: (j) => -j.timeline.filter((o) => o.status === "failed").length,
};

function matches(j, words) {
  const hay = [j.id, j.tenant, j.queue, j.describe, scheduleText(j.schedule, j.after),
    j.schedule ? j.schedule.timezone : "", ...Object.entries(j.labels || {}).flat(), j.paused ? "paused" : "active",
    j.last_run ? j.last_run.status : "never"].join(" ").toLowerCase();
  return words.every((w) => hay.includes(w));
}

function visibleJobs() {
  const words = $("#job-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const key = SORT_KEYS[sort.key];
  return jobsData.filter((j) => matches(j, words))
    .sort((a, b) => (key(a) < key(b) ? -sort.dir : key(a) > key(b) ? sort.dir : 0)
      || (a.id < b.id ? -1 : 1));
}

function renderJobs(tbody) {
  const jobs = visibleJobs();
  const more = jobsSearched
    ? (jobsTruncated ? "; searched all jobs, the first 200 matches by name are listed"
      : "; searched all jobs")
    : jobsTruncated ? "; more exist, only the first 200 by name are listed: type to search all" : "";
  $("#jobs-count").textContent = jobs.length === jobsData.length
    ? `(${jobsData.length}${more})` : `(${jobs.length} of ${jobsData.length} shown${more})`;
  const done = () => { forget("jobs"); refreshOverview(); };
  fillRows(tbody, jobs.map((j) => {
    const last = j.last_run;
    const next = j.next_fire_times[0];
    return [
      el("th", { scope: "row" }, jobLink(j.id),
        j.tenant !== "default" ? el("span", { class: "muted" }, ` ${j.tenant}`) : null),
      td(el("span", { title: j.schedule ? `${scheduleText(j.schedule)} (${j.schedule.timezone})`
        : scheduleText(null, j.after) }, j.describe)),
      td(last ? el("span", {}, statusBadge(last.status, last.reason), " ",
        el("span", { class: "muted", title: `${last.kind} ${shortTime(last.scheduled_for)}` },
          sinceIso(last.scheduled_for))) : el("span", { class: "muted" }, "never ran")),
      td(j.paused ? el("span", { class: "muted" }, "paused")
        : next ? el("span", { title: `${next.local} / ${shortTime(next.utc)}` },
          sinceIso(next.utc)) : "none"),
      td(el("span", { class: `state state-${j.paused ? "paused" : "active"}` },
        j.paused ? "‖ paused" : "● active"), { "data-job-state": j.id }),
      td(sparkline(j)),
      el("td", { class: "actions" },
        j.paused ? actionButton("Resume", j.id, "resume", null, done)
          : actionButton("Pause", j.id, "pause", null, done),
        actionButton("Run now", j.id, "trigger", `Run ${j.id} now?`, done)),
    ];
  }), jobsData.length ? "no job matches the filter" : "no jobs yet");
}

function drawJobs() {
  render("jobs", { jobsData, jobsTruncated, sort, filter: $("#job-filter").value }, $("#jobs tbody"), renderJobs);
}

function showSort() {
  for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
    const on = th.dataset.sort === sort.key;
    th.setAttribute("aria-sort", on ? (sort.dir > 0 ? "ascending" : "descending") : "none");
    th.querySelector(".arrow").textContent = on ? (sort.dir > 0 ? " ▲" : " ▼") : "";
  }
}

function setupJobsTable() {
  for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
    const key = th.dataset.sort;
    th.replaceChildren(el("button", { type: "button", class: "sort", "data-key": `sort:${key}`,
      onclick: () => {
        sort.dir = sort.key === key ? -sort.dir : 1;
        sort.key = key;
        showSort();
        drawJobs();
      } }, th.textContent, el("span", { class: "arrow", "aria-hidden": "true" })));
  }
  showSort();
  $("#job-filter").addEventListener("input", () => {
    drawJobs();
    if (!fleetTruncated) return;
    clearTimeout(searchTimer);
    searchTimer = setTimeout(refreshOverview, 300);
  });
}

// --- the rest -----------------------------------------------------------------------------

function renderRunning(tbody, attempts) {
  fillRows(tbody, attempts.map((a) => [
    td(jobLink(a.job_id)), td(a.id), td(a.worker_id), td(sinceIso(a.leased_at)),
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

function exclusionText(e) {
  if (e.date) return e.date;
  if (e.cron) return `cron ${e.cron}`;
  return `${shortTime(e.start)} → ${shortTime(e.end)}`;
}

function renderCalendars(tbody, calendars) {
  fillRows(tbody, calendars.map((c) => [
    el("th", { scope: "row" }, c.name), td(c.tenant), td(c.timezone),
    td(c.exclude.map(exclusionText).join("; ") || "nothing"),
  ]), "no calendar");
}

async function readyz() {
  const resp = await fetch("/readyz");
  return resp.json();
}

export async function refreshOverview() {
  const jobsAt = jobsPath();
  const results = await Promise.allSettled([
    readyz(), api("/v1/cluster/nodes"), api("/v1/alerts?status=open&limit=100"),
    api("/v1/alerts?status=resolved&limit=5"), api(jobsAt),
    api("/v1/attempts?status=running&limit=100"), api("/v1/workers"), api("/v1/tenants"),
    api("/v1/status/queues"), api("/v1/calendars"),
  ]);
  const searched = jobsAt !== "/v1/status/jobs";
  const [ready, nodes, open, resolved, jobs, running, workers, tenants, queues, calendars] =
    results.map((r) => (r.status === "fulfilled" ? r.value : null));
  if (nodes) {
    const self = nodes.nodes.find((n) => n.node_id === nodes.asked_by) || {};
    $("#summary").textContent = `Served by ${nodes.asked_by} (${self.role || "unknown"}); ` +
      `leader ${nodes.leader_id || "none"}; term ${self.term ?? "?"}` +
      (open ? `; ${open.alerts.length} open alert${open.alerts.length === 1 ? "" : "s"}` : "");
    render("cluster", nodes, $("#cluster tbody"), renderCluster);
  }
  if (ready && nodes) render("health", { ready, nodes }, $("#health"), renderHealth);
  // An open note form is not redrawn under the user's typing; it shows new data on close.
  if (open && resolved) {
    alertsData = { open: open.alerts, resolved: resolved.alerts };
    if (!alertForms.size) drawAlerts();
  }
  if (jobs) {
    jobsData = jobs.jobs;
    jobsTruncated = jobs.truncated;
    jobsSearched = searched;
    if (!searched) fleetTruncated = jobs.truncated;
    drawJobs();
  }
  if (running) render("running", running.attempts, $("#running tbody"), renderRunning);
  if (workers) render("workers", workers.workers, $("#workers tbody"), renderWorkers);
  if (tenants) render("tenants", tenants.tenants, $("#tenants tbody"), renderTenants);
  if (queues) render("queues", queues.queues, $("#queues tbody"), renderQueues);
  if (calendars) render("calendars", calendars.calendars, $("#calendars tbody"), renderCalendars);
  return results.filter((r) => r.status === "rejected");
}

export async function refreshCharts() {
  const [herd, lag] = await Promise.allSettled([
    api("/v1/schedule/herd?hours=24&bucket_s=60"), api("/v1/status/fire-lag?minutes=60")]);
  if (herd.status === "fulfilled") render("herd", herd.value, $("#herd"), renderHerd);
  else $("#herd-summary").textContent = `cannot compute the load ahead: ${herd.reason.message}`;
  if (lag.status === "fulfilled") render("lag", lag.value, $("#lag"), renderLag);
  else $("#lag-summary").textContent = `cannot read the fire lag: ${lag.reason.message}`;
}

export { setupJobsTable };
