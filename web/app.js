// The status page: polls the API of whichever node served it; actions use the same API.
"use strict";

const $ = (sel) => document.querySelector(sel);

function cell(text, cls) {
  const td = document.createElement("td");
  if (cls) {
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    td.appendChild(span);
  } else {
    td.textContent = text ?? "–";
  }
  return td;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    tr.append(...cells);
    return tr;
  }));
}

async function api(path, options = {}) {
  const resp = await fetch(path, { headers: { "content-type": "application/json" }, ...options });
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error ? body.error.message : resp.statusText);
  return body;
}

function actionButton(label, job, action, confirmText) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.setAttribute("aria-label", `${label} ${job}`);
  b.addEventListener("click", async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    try {
      await api(`/v1/jobs/${encodeURIComponent(job)}/${action}`, { method: "POST", body: "{}" });
      $("#summary").textContent = `${label}: ${job} done`;
      refresh();
    } catch (e) {
      $("#summary").textContent = `${label} ${job} failed: ${e.message}`;
    }
  });
  return b;
}

async function refresh() {
  try {
    const [cluster, jobs, occ] = await Promise.all([
      api("/v1/cluster"), api("/v1/jobs?limit=200"), api("/v1/occurrences?limit=50"),
    ]);
    const peers = cluster.peers.map((p) => p.id + (p.reachable ? " ✓" : " ✗")).join(", ");
    $("#summary").textContent =
      `node ${cluster.node_id} is ${cluster.role}; leader ${cluster.leader_id ?? "none"}; ` +
      `term ${cluster.term}, epoch ${cluster.epoch}`;
    fill($("#cluster tbody"), [[
      cell(cluster.node_id), cell(cluster.role), cell(String(cluster.term)),
      cell(String(cluster.epoch)), cell(String(cluster.commit_index)),
      cell(String(cluster.last_applied_index)), cell(peers),
      cell(cluster.last_tick_ms ? new Date(cluster.last_tick_ms).toISOString() : "–"),
    ]]);
    const details = await Promise.all(
      jobs.jobs.slice(0, 50).map((j) => api(`/v1/jobs/${encodeURIComponent(j.id)}`)));
    fill($("#jobs tbody"), details.map((j) => {
      const next = j.next_fire_times[0];
      const last = j.latest_occurrence;
      const actions = document.createElement("td");
      actions.append(
        j.paused ? actionButton("Resume", j.id, "resume") : actionButton("Pause", j.id, "pause"),
        actionButton("Run now", j.id, "trigger", `Run ${j.id} now?`));
      return [
        cell(j.id), cell(`${j.schedule.cron} (${j.schedule.timezone})`),
        cell(next ? `${next.local} (${next.utc})` : "–"),
        last ? cell(`${last.status} ${last.scheduled_for}`, `status status-${last.status}`)
             : cell("never"),
        cell(j.paused ? "paused" : "active"), actions,
      ];
    }));
    fill($("#occurrences tbody"), occ.occurrences.map((o) => [
      cell(o.id), cell(o.kind), cell(o.scheduled_for),
      cell(o.status + (o.reason ? ` (${o.reason})` : ""), `status status-${o.status}`),
      cell(String(o.attempts)),
    ]));
  } catch (e) {
    $("#summary").textContent = `cannot reach the API: ${e.message}`;
  }
}

refresh();
setInterval(refresh, 2000);
