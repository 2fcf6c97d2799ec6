// One job's page (#/jobs/{id}): its definition, next fire times marked where they cross a
// DST transition, actions (pause/resume, run now, backfill with a preview), its alerts,
// and a paged history of occurrences filterable by status and kind, each expanding to
// its attempts (worker, fencing token, times, exit code, output, error).

import {
  $, el, td, scheduleText, statusBadge, sinceIso, shortTime, causeText, between, duration, render, forget, fillRows, api, say,
  actionButton, idempotencyKey, jobLink,
} from "./lib.js";
import { CHANGES_PAGE, renderChanges } from "./jobchanges.js";

const PAGE = 20;
let historyData = null;  // the occurrences page shown
const view = {
  jobId: null,
  cursors: [null],  // the cursor of each page from the newest one; the last is shown
  nextCursor: null,
  expanded: new Set(),  // occurrence ids whose attempts are shown
  attempts: new Map(),  // occurrence id -> its GET /v1/occurrences/{id}
  preview: null,
  changesLimit: CHANGES_PAGE,  // how many of the newest edits the History of edits shows
};

export function openJob(jobId) {
  if (view.jobId !== jobId) {
    Object.assign(view, { jobId, cursors: [null], nextCursor: null, preview: null,
      changesLimit: CHANGES_PAGE });
    view.expanded.clear();
    view.attempts.clear();
    $("#history-status").value = "";
    $("#history-kind").value = "";
    $("#backfill-result").replaceChildren();
    $("#backfill-run").disabled = true;
    $("#edit-result").replaceChildren();
    $("#edit-save").disabled = true;
    view.editFilled = false;
    view.proposal = null;
    // Nothing of the job shown before stays on screen under this one's title.
    for (const sel of ["#job-definition", "#job-actions", "#job-upcoming", "#job-alerts",
      "#history tbody", "#job-group", "#job-changes"]) $(sel).replaceChildren();
    $("#job-group-section").hidden = true;
    historyData = null;
    forget();
  }
  $("#job-title").textContent = jobId;
  document.title = `${jobId} · raftcron`;
}

function scheduleList(j) {
  return el("ul", { class: "schedules" }, ...j.schedules.map((s) => el("li", {},
    el("strong", {}, s.name), " ", el("code", {}, scheduleText(s)), ` (${s.timezone})`,
    s.start_at ? ` from ${shortTime(s.start_at)}` : "", s.end_at ? ` until ${shortTime(s.end_at)}` : "")));
}

function definitionRows(j) {
  // A job with several schedules: the first stands for the zone and DST rows. A chained
  // job has none: its runs come from its upstream's ends.
  const s = j.schedule || (j.schedules ? j.schedules[0] : null) || {};
  const followers = (j.chain && j.chain.followed_by) || [];
  const note = j.pause_note;
  const bounds = [s.start_at && `from ${shortTime(s.start_at)}`, s.end_at && `until ${shortTime(s.end_at)}`]
    .filter(Boolean).join(" ");
  return [
    j.after ? ["Runs after", el("span", { "data-chain": "after" }, jobLink(j.after.job),
      ` on ${j.after.on}: one run for each of its runs that ends ${ON_TEXT[j.after.on]}`)]
      : j.schedules ? ["Schedules", el("div", {}, j.describe, scheduleList(j))]
        : ["Schedule", el("span", {}, j.describe, " ", el("code", {}, scheduleText(s)))],
    followers.length ? ["Followed by", el("span", { "data-chain": "followed-by" },
      ...followers.flatMap((f, i) => [i ? ", " : "", jobLink(f.job), ` (on ${f.on})`]))] : null,
    // A one-time job that fired, or a schedule past its end: nothing more will run.
    j.done ? ["State", el("span", { class: "status status-succeeded" },
      "done: its schedule names no further instant (its history stays)")] : null,
    j.calendars && j.calendars.length ? ["Calendars", j.calendars.join(", ")] : null,
    j.labels && Object.keys(j.labels).length ? ["Labels", Object.entries(j.labels)
      .map(([k, v]) => `${k}=${v}`).join(", ")] : null,
    note ? ["Bulk " + note.action.replace("paused", "pause").replace("resumed", "resume"),
      `${note.action} by ${note.by} ${sinceIso(note.at)}: ${note.note}`] : null,
    j.after ? null : ["Time zone", s.timezone],
    j.after ? null : ["DST", `gap: ${s.dst_gap}, fold: ${s.dst_fold}`],
    j.after ? null : ["Misfire", `${j.misfire_policy} (grace ${j.misfire_grace_s} s, catch up at most ${j.catch_up_max})`],
    ["Overlap", j.overlap_policy],
    ["Retries", `at most ${j.max_attempts} attempts, backoff ${j.retry_backoff_s} s`],
    ["Limits", [j.max_runtime_s ? `max runtime ${j.max_runtime_s} s` : "no max runtime",
      j.deadline_s ? `deadline ${j.deadline_s} s` : "no deadline",
      `heartbeat timeout ${j.heartbeat_timeout_s} s`].join(", ")],
    ["Run alerts", runBounds(j)],
    ["Queue", j.queue], ["Tenant", j.tenant],
    j.concurrency_group ? ["Concurrency group", j.concurrency_group] : null,
    ["Version", `${j.version}, last changed ${sinceIso(j.updated_at)} (${shortTime(j.updated_at)}); ` +
      `created ${shortTime(j.created_at)}`],
    ["State", el("span", { class: `state state-${j.paused ? "paused" : "active"}`,
      "data-job-state": j.id }, j.paused ? "‖ paused" : "● active")],
    bounds ? ["Bounds", bounds] : null,
    ["Target", el("code", { class: "target" }, JSON.stringify(j.target))],
    s.jitter_s ? ["Jitter", `${s.jitter_s} s`] : null,
  ].filter(Boolean);
}

// What each `after.on` of a chained job follows, in words.
const ON_TEXT = { success: "in success", failure: "in failure (after its last retry)", finish: "either way" };

// A run's kind; a chained job's run names the upstream run that started it.
function kindCell(o) {
  if (!o.upstream) return td(o.kind);
  return td(el("span", { "data-upstream": o.upstream.occurrence_id,
    title: `started by ${o.upstream.occurrence_id}` }, "after ", jobLink(o.upstream.job_id),
  ` ${o.upstream.outcome}`));
}

// The run bounds (each off unless set), as the job page and its tests read them.
function runBounds(j) {
  const parts = [
    j.start_deadline_s ? `not started within ${j.start_deadline_s} s` : null,
    j.min_duration_s ? `faster than ${j.min_duration_s} s` : null,
    j.max_duration_s ? `slower than ${j.max_duration_s} s (not killed)` : null,
    j.alert_after_failures ? `after ${j.alert_after_failures} consecutive failure${j.alert_after_failures === 1 ? "" : "s"}` : null,
  ].filter(Boolean);
  return parts.length ? `alert when ${parts.join("; ")}` : "none";
}

function renderDefinition(dl, j) {
  dl.replaceChildren(...definitionRows(j).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const done = () => { forget("job"); refreshJob(); };
  $("#job-actions").replaceChildren(
    j.paused ? actionButton("Resume", j.id, "resume", null, done)
      : actionButton("Pause", j.id, "pause", null, done),
    actionButton("Run now", j.id, "trigger", `Run ${j.id} now?`, done));
}

function renderUpcoming(list, upcoming) {
  if (!upcoming.length) {
    list.replaceChildren(el("li", { class: "muted" }, "no fire time ahead"));
    return;
  }
  list.replaceChildren(...upcoming.map((f) => el("li", {
    class: [f.dst_change ? "dst" : null, f.excluded_by ? "excluded" : null].filter(Boolean).join(" ") || null },
    `${f.local.replace("T", " ")} / ${shortTime(f.utc)} `,
    el("span", { class: "muted" }, sinceIso(f.utc)),
    f.schedules ? el("span", { class: "muted" }, ` · ${f.schedules.join(" + ")}`) : null,
    f.excluded_by ? el("span", { class: "excluded-mark" }, ` ⊘ skipped: calendar ${f.excluded_by}`) : null,
    f.dst_change ? el("span", { class: "dst-mark" }, ` ⚑ after a DST change: UTC ${f.dst_change}`) : null)));
}

function renderJobAlerts(list, alerts) {
  if (!alerts.length) {
    list.replaceChildren(el("li", { class: "muted" }, "none"));
    return;
  }
  list.replaceChildren(...alerts.map((a) => el("li", {},
    el("span", { class: `status alert-${a.status}` }, a.status === "open" ? "⚠ open" : "✓ resolved"),
    ` ${a.kind}: ${a.reason} · raised ${sinceIso(a.raised_at)}`,
    a.cause ? el("span", { class: "cause", "data-cause": a.cause }, ` · ${causeText(a.cause)}`) : "",
    a.message ? ` · ${a.message}` : "",
    a.acknowledged ? ` · acknowledged by ${a.acknowledged.by}: ${a.acknowledged.note}` : "")));
}

function attemptsTable(detail) {
  const attempts = detail.attempt_list;
  if (!attempts.length) return el("p", { class: "muted" }, "no attempt (nothing ran)");
  return el("div", { class: "attempts" }, ...attempts.map((a) => {
    return el("section", { class: "attempt", "data-attempt": a.id },
      el("h4", {}, `Attempt ${a.number} `, statusBadge(a.status)),
      el("dl", { class: "definition" },
        el("dt", {}, "Worker"), el("dd", {}, a.worker_id ?? "–"),
        el("dt", {}, "Fencing token"), el("dd", {}, a.fencing_token ?? "–"),
        el("dt", {}, "Leased"), el("dd", {}, shortTime(a.leased_at)),
        // The start its worker reported (the run's time); an attempt without one (an
        // older worker, a run lost before it ended) shows no start and no duration.
        el("dt", {}, "Started"), el("dd", {}, a.started_at ? shortTime(a.started_at)
          : a.status === "running" ? "running (reported when it ends)" : "– (not reported)"),
        el("dt", {}, "Finished"), el("dd", {}, shortTime(a.finished_at)),
        el("dt", {}, "Duration"), el("dd", {}, a.duration_s == null ? "–"
          : duration(a.duration_s * 1000)),
        el("dt", {}, "Exit code"), el("dd", {}, a.exit_code ?? "–"),
        a.error ? el("dt", {}, "Error") : null,
        a.error ? el("dd", { class: "error-text" }, a.error) : null,
        a.release_reason ? el("dt", {}, "Released") : null,
        a.release_reason ? el("dd", {}, `${a.unacknowledged_releases} × (${a.release_reason})`) : null),
      el("p", { class: "output-label" }, "Output"),
      // Text only: job output is never parsed as HTML.
      el("pre", { class: "output", tabindex: "0", "aria-label": `Output of attempt ${a.number}` },
        a.output ? a.output : el("span", { class: "muted" }, "(no output)")));
  }));
}

async function toggle(occId) {
  if (view.expanded.has(occId)) {
    view.expanded.delete(occId);
  } else {
    view.expanded.add(occId);
    await loadAttempts(occId);
  }
  forget("history");
  drawHistory();
}

async function loadAttempts(occId) {
  try {
    view.attempts.set(occId, await api(`/v1/occurrences/${encodeURIComponent(occId)}`));
  } catch (e) {
    view.attempts.set(occId, { error: e.message });
  }
}

function renderHistory(tbody, { occurrences }) {
  // New runs redraw the table: an output the reader scrolled stays where it was.
  const scrolled = new Map([...tbody.querySelectorAll(".attempt")].map((a) =>
    [a.dataset.attempt, a.querySelector("pre.output").scrollTop]));
  const rows = [];
  for (const o of occurrences) {
    const open = view.expanded.has(o.id);
    const detailsId = `attempts-${o.id}`;
    rows.push(el("tr", { "data-occurrence": o.id },
      td(shortTime(o.scheduled_for)),
      td(view.zone ? new Date(o.scheduled_for).toLocaleString("sv-SE", { timeZone: view.zone }) : "–"),
      kindCell(o), td(statusBadge(o.status, o.reason)), td(o.attempts),
      td(between(o.dispatch_at, o.finished_at), { title: "from due to finished" }),
      el("td", {}, el("button", { type: "button", "aria-expanded": String(open),
        "aria-controls": detailsId, "data-key": `expand:${o.id}`,
        "aria-label": `${open ? "Hide" : "Show"} attempts of ${shortTime(o.scheduled_for)} ${o.kind}`,
        onclick: () => toggle(o.id) }, open ? "Hide attempts" : "Attempts"),
      ["pending", "running"].includes(o.status) ? cancelButton(o) : null)));
    if (open) {
      const detail = view.attempts.get(o.id);
      rows.push(el("tr", { class: "attempts-row", id: detailsId },
        el("td", { colspan: 7 }, !detail ? "loading…"
          : detail.error ? `cannot load: ${detail.error}` : attemptsTable(detail))));
    }
  }
  fillRows(tbody, rows, "no occurrence matches");
  for (const a of tbody.querySelectorAll(".attempt")) {
    if (scrolled.get(a.dataset.attempt)) a.querySelector("pre.output").scrollTop = scrolled.get(a.dataset.attempt);
  }
  const page = view.cursors.length;
  $("#history-page").textContent = `page ${page}` + (view.nextCursor ? "" : " (oldest)");
  $("#history-older").disabled = !view.nextCursor;
  $("#history-newest").disabled = page === 1;
}

// POST /v1/occurrences/{id}/cancel with a note asked for first. A queued run ends at once;
// a running one is stopped by its worker at its next heartbeat (the row shows it then).
async function cancelRun(o) {
  const when = shortTime(o.scheduled_for);
  const note = window.prompt(`Cancel the ${o.kind} run of ${when}? Why (kept with the run):`);
  if (note === null) { say(`Cancel ${when}: not sent`); return; }
  if (!note.trim()) { say(`Cancel ${when}: a note is required`); return; }
  try {
    const result = await api(`/v1/occurrences/${encodeURIComponent(o.id)}/cancel`, {
      method: "POST", body: JSON.stringify({ note }),
      headers: { "Idempotency-Key": idempotencyKey() } });
    say(result.status === "cancelled" ? `Cancelled the run of ${when}`
      : `The run of ${when} is stopping: its worker kills it at its next heartbeat`);
    forget("history");
    refreshJob();
  } catch (e) {
    say(`Cancel ${when} failed: ${e.message}`);
  }
}

function cancelButton(o) {
  return el("button", { type: "button", class: "cancel-run", "data-key": `cancel:${o.id}`,
    "aria-label": `Cancel the ${o.kind} run of ${shortTime(o.scheduled_for)}`,
    onclick: () => cancelRun(o) }, "Cancel");
}

// The job's concurrency group: its limit, the runs holding its slots and those waiting.
function renderGroup(box, g) {
  const holders = g.holders.map((h) => el("li", {}, el("a", { href: `#/jobs/${encodeURIComponent(h.job_id)}` }, h.job_id),
    ` on ${h.worker_id ?? "–"} since ${sinceIso(h.leased_at)}`));
  const waiters = g.waiters.map((w) => el("li", {}, el("a", { href: `#/jobs/${encodeURIComponent(w.job_id)}` }, w.job_id),
    ` due ${sinceIso(w.due)}`));
  box.replaceChildren(...[
    el("p", {}, `${g.name} (tenant ${g.tenant}): limit ${g.limit}${g.configured ? "" : " (not set: default)"}, `,
      el("strong", {}, `${g.holding} holding`), `, ${g.waiting} waiting`),
    el("h4", {}, "Holding"), holders.length ? el("ul", { class: "plain", "data-group": "holders" }, ...holders)
      : el("p", { class: "muted" }, "none"),
    el("h4", {}, "Waiting"), waiters.length ? el("ul", { class: "plain", "data-group": "waiters" }, ...waiters)
      : el("p", { class: "muted" }, "none"),
    g.waiting > g.waiters.length ? el("p", { class: "muted" }, `and ${g.waiting - g.waiters.length} more waiting`) : null,
  ].filter(Boolean));
}

async function refreshGroup(job) {
  const section = $("#job-group-section");
  if (!job.concurrency_group) { section.hidden = true; return; }
  section.hidden = false;
  try {
    const g = await api(`/v1/concurrency-groups/${encodeURIComponent(job.concurrency_group)}` +
      `?tenant=${encodeURIComponent(job.tenant)}`);
    render("group", g, $("#job-group"), renderGroup);
  } catch (e) {
    $("#job-group").textContent = `cannot load the group: ${e.message}`;
  }
}

function drawHistory() {
  if (!historyData) return;
  const attempts = [...view.expanded].map((id) => view.attempts.get(id));
  render("history", { ...historyData, expanded: [...view.expanded], attempts },
    $("#history tbody"), renderHistory);
}

function historyQuery() {
  const params = new URLSearchParams({ job_id: view.jobId, limit: String(PAGE) });
  const status = $("#history-status").value;
  const kind = $("#history-kind").value;
  if (status) params.set("status", status);
  if (kind) params.set("kind", kind);
  const cursor = view.cursors[view.cursors.length - 1];
  if (cursor) params.set("cursor", cursor);
  return `/v1/occurrences?${params}`;
}

export async function refreshJob() {
  const jobId = view.jobId;
  const [job, history, alerts, changes] = await Promise.allSettled([
    api(`/v1/status/jobs/${encodeURIComponent(jobId)}?fires=10`), api(historyQuery()),
    api(`/v1/alerts?status=all&limit=10&job_id=${encodeURIComponent(jobId)}`),
    api(`/v1/jobs/${encodeURIComponent(jobId)}/history?limit=${view.changesLimit}`)]);
  if (jobId !== view.jobId) return [];
  const error = $("#job-error");
  if (job.status === "rejected") {
    error.hidden = false;
    error.textContent = job.reason.status === 404 ? `No job ${jobId} (or this token may not see it).`
      : `Cannot load ${jobId}: ${job.reason.message}`;
    return [job];
  }
  error.hidden = true;
  // A job with several schedules: the first stands for the zone. A chained job has no
  // schedule: its times are shown in UTC.
  const first = job.value.schedule || (job.value.schedules || [])[0] || null;
  view.zone = first ? first.timezone : "UTC";
  view.job = job.value;
  offerZones(view.zone);
  // The schedule editor edits a single schedule (not a list of them, not a chain).
  const single = job.value.schedule || null;
  for (const sel of ["#h-edit", "#edit-form", "#edit-result"]) $(sel).hidden = !single;
  if (!view.editFilled && single) {
    $("#edit-cron").value = single.cron || "";
    $("#edit-timezone").value = single.timezone;
    view.editFilled = true;
  }
  render("job", job.value, $("#job-definition"), renderDefinition);
  render("upcoming", job.value.upcoming, $("#job-upcoming"), renderUpcoming);
  await refreshGroup(job.value);
  if (alerts.status === "fulfilled") render("job-alerts", alerts.value.alerts, $("#job-alerts"), renderJobAlerts);
  if (changes.status === "fulfilled") {
    render("changes", changes.value, $("#job-changes"), renderChanges);
    $("#changes-older").hidden = changes.value.next_before === null;
  }
  if (history.status === "fulfilled") {
    view.nextCursor = history.value.next_cursor;
    // Runs still going are asked again; finished ones keep what was loaded.
    await Promise.all([...view.expanded].filter((id) => {
      const d = view.attempts.get(id);
      return !d || d.error || ["pending", "running"].includes(d.status);
    }).map(loadAttempts));
    historyData = history.value;
    drawHistory();
  }
  return [job, history, alerts, changes].filter((r) => r.status === "rejected");
}

// --- backfill ------------------------------------------------------------------------------

// The zone's UTC offset (ms) at the instant `ms`.
function zoneOffsetMs(ms, tz) {
  const parts = Object.fromEntries(new Intl.DateTimeFormat("en-US", {
    timeZone: tz, hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit" })
    .formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
  return Date.UTC(+parts.year, +parts.month - 1, +parts.day, +parts.hour, +parts.minute,
    +parts.second) - Math.floor(ms / 1000) * 1000;
}

// The wall-clock time `local` (a datetime-local value) in zone `tz`, as ISO 8601 with that
// zone's offset then. A time the zone skips or repeats at a DST change takes the offset
// found by stepping from the UTC reading (the preview lists the instants the range holds).
export function zonedIso(local, tz) {
  const v = local.length === 16 ? `${local}:00` : local;
  if (tz === "UTC") return `${v}Z`;
  const wall = Date.parse(`${v}Z`);
  const off = zoneOffsetMs(wall - zoneOffsetMs(wall, tz), tz);
  const minutes = Math.abs(off) / 60000;
  const hh = String(Math.floor(minutes / 60)).padStart(2, "0");
  return `${v}${off < 0 ? "-" : "+"}${hh}:${String(minutes % 60).padStart(2, "0")}`;
}

function rangeIso() {
  const start = $("#backfill-start").value;
  const end = $("#backfill-end").value;
  if (!start || !end) return null;
  const tz = $("#backfill-zone").value;
  return { start: zonedIso(start, tz), end: zonedIso(end, tz) };
}

// The range's zone: UTC, or the job's own (its instants are chosen in it).
function offerZones(zone) {
  const select = $("#backfill-zone");
  const want = zone && zone !== "UTC" ? ["UTC", zone] : ["UTC"];
  const have = [...select.options].map((o) => o.value);
  if (want.join() === have.join()) return;
  const chosen = want.includes(select.value) ? select.value : "UTC";
  select.replaceChildren(...want.map((z) => el("option", { value: z }, z)));
  select.value = chosen;
}

async function preview() {
  const range = rangeIso();
  const out = $("#backfill-result");
  $("#backfill-run").disabled = true;
  if (!range) { out.textContent = "Choose both ends of the range first."; return; }
  try {
    const p = await api(`/v1/status/jobs/${encodeURIComponent(view.jobId)}/backfill-preview?` +
      new URLSearchParams(range));
    view.preview = { ...range, count: p.count };
    out.replaceChildren(
      el("p", {}, `${p.count} instant${p.count === 1 ? "" : "s"} in ${shortTime(range.start)} – ` +
        `${shortTime(range.end)}` + (p.count > p.shown ? ` (first ${p.shown} shown)` : "") +
        (p.count ? ":" : ".")),
      p.count ? el("ol", { class: "fires preview" }, ...p.instants.map((i) => el("li", {}, shortTime(i))))
        : null);
    $("#backfill-run").disabled = p.count === 0;
  } catch (e) {
    view.preview = null;
    out.textContent = `Preview refused: ${e.message}`;
  }
}

async function runBackfill(event) {
  event.preventDefault();
  const range = rangeIso();
  const p = view.preview;
  if (!p || !range || p.start !== range.start || p.end !== range.end) {
    $("#backfill-result").textContent = "Preview this range first.";
    return;
  }
  if (!window.confirm(`Backfill ${p.count} instants of ${view.jobId}?`)) return;
  try {
    const r = await api(`/v1/jobs/${encodeURIComponent(view.jobId)}/backfill`, {
      method: "POST", body: JSON.stringify(range), headers: { "Idempotency-Key": idempotencyKey() } });
    say(`Backfill ${view.jobId}: ${r.count} occurrences (${r.created} new)`);
    $("#backfill-run").disabled = true;
    forget("history");
    refreshJob();
  } catch (e) {
    say(`Backfill ${view.jobId} failed: ${e.message}`);
  }
}

// --- schedule edit -------------------------------------------------------------------------

// The fields PUT /v1/jobs/{id} takes (GET adds version, watermark, times, next fires).
const JOB_FIELDS = ["id", "tenant", "schedule", "target", "misfire_policy", "misfire_grace_s",
  "catch_up_max", "overlap_policy", "max_runtime_s", "max_attempts", "retry_backoff_s",
  "heartbeat_timeout_s", "ack_timeout_s", "deadline_s", "start_deadline_s", "min_duration_s",
  "max_duration_s", "alert_after_failures", "queue", "notify", "paused", "calendars", "labels",
  "concurrency_group"];

function fireList(fires) {
  return el("ol", { class: "fires" }, ...fires.map((f) => el("li", { class: f.dst_change ? "dst" : null },
    `${f.local.replace("T", " ")} / ${shortTime(f.utc)}`,
    f.dst_change ? el("span", { class: "dst-mark" }, ` ⚑ UTC ${f.dst_change}`) : null)));
}

function proposalParams() {
  return { cron: $("#edit-cron").value.trim(), timezone: $("#edit-timezone").value.trim() };
}

async function previewEdit() {
  const out = $("#edit-result");
  const params = proposalParams();
  $("#edit-save").disabled = true;
  try {
    const r = await api(`/v1/status/jobs/${encodeURIComponent(view.jobId)}?` +
      new URLSearchParams({ ...params, fires: "5" }));
    view.proposal = { ...params, version: r.version, schedule: r.proposed.schedule };
    out.replaceChildren(el("div", { class: "compare" },
      el("div", {}, el("h4", {}, `Now: ${r.describe}`), fireList(r.upcoming)),
      el("div", {}, el("h4", {}, `Proposed: ${r.proposed.describe}`), fireList(r.proposed.upcoming))));
    $("#edit-save").disabled = false;
  } catch (e) {
    view.proposal = null;
    out.textContent = `Preview refused: ${e.message}`;
  }
}

async function saveEdit(event) {
  event.preventDefault();
  const p = view.proposal;
  const now = proposalParams();
  if (!p || p.cron !== now.cron || p.timezone !== now.timezone) {
    $("#edit-result").textContent = "Preview this schedule first.";
    return;
  }
  try {
    // The job as this token reads it: secrets come back as "***", which the server keeps.
    const job = await api(`/v1/jobs/${encodeURIComponent(view.jobId)}`);
    const body = Object.fromEntries(JOB_FIELDS.filter((k) => k in job).map((k) => [k, job[k]]));
    // A cron replaces whatever kind the schedule was (one-time, interval).
    const { at, every, anchor, ...kept } = job.schedule;
    body.schedule = { ...kept, cron: p.cron, timezone: p.timezone };
    for (const k of ["start_at", "end_at"]) if (body.schedule[k] === null) delete body.schedule[k];
    const saved = await api(`/v1/jobs/${encodeURIComponent(view.jobId)}`, {
      method: "PUT", body: JSON.stringify(body), headers: { "If-Match": `"${p.version}"` } });
    say(`Schedule of ${view.jobId} saved: version ${saved.version}`);
    $("#edit-save").disabled = true;
    view.proposal = null;
    forget("job");
    forget("upcoming");
    refreshJob();
  } catch (e) {
    say(`Saving the schedule of ${view.jobId} failed: ${e.status === 412
      ? "the job changed since the preview; preview again" : e.message}`);
  }
}

export function setupJobPage() {
  $("#edit-preview").addEventListener("click", previewEdit);
  $("#edit-form").addEventListener("submit", saveEdit);
  for (const id of ["#edit-cron", "#edit-timezone"]) {
    $(id).addEventListener("input", () => { $("#edit-save").disabled = true; });
  }
  const refilter = () => { view.cursors = [null]; forget("history"); refreshJob(); };
  $("#history-status").addEventListener("change", refilter);
  $("#history-kind").addEventListener("change", refilter);
  $("#history-older").addEventListener("click", () => {
    if (!view.nextCursor) return;
    view.cursors.push(view.nextCursor);
    forget("history");
    refreshJob();
  });
  $("#history-newest").addEventListener("click", refilter);
  $("#changes-older").addEventListener("click", () => {
    view.changesLimit = Math.min(500, view.changesLimit + CHANGES_PAGE);
    refreshJob();
  });
  $("#backfill-preview").addEventListener("click", preview);
  $("#backfill-form").addEventListener("submit", runBackfill);
  for (const id of ["#backfill-start", "#backfill-end", "#backfill-zone"]) {
    $(id).addEventListener("input", () => { $("#backfill-run").disabled = true; });
  }
}
