// The status page: polls the API of whichever node served it (relative URLs, so any node
// works); actions go through the same API. No build step, no dependencies: ES modules
// served as they are. Two views in one page, routed by the URL's hash:
//   #/            the overview (overview.js)
//   #/jobs/{id}   one job (jobpage.js)

import { $, token, setToken, showAuth, forget, auth, authRecovered, download, say } from "./lib.js";
import { refreshOverview, refreshCharts, setupJobsTable } from "./overview.js";
import { openJob, refreshJob, setupJobPage } from "./jobpage.js";

const POLL_MS = 2000;
const CHARTS_MS = 30000;
let timer = null;

function route() {
  const m = /^#\/jobs\/(.+)$/.exec(window.location.hash);
  return m ? { view: "job", jobId: decodeURIComponent(m[1]) } : { view: "overview" };
}

async function refresh() {
  if (!token()) {
    $("#summary").textContent = "Enter an API token to see the cluster.";
    return;
  }
  const r = route();
  const failed = r.view === "job" ? await refreshJob() : await refreshOverview();
  // A refused or new token that now works: say so (a 403 from an action stays visible).
  if (!failed.some((f) => f.reason && (f.reason.status === 401 || f.reason.status === 403))) {
    authRecovered();
  }
  if (r.view === "job") $("#summary").textContent = `Job ${r.jobId}`;
  $("#updated").textContent = failed.length
    ? `Update at ${new Date().toLocaleTimeString()} incomplete: ${failed[0].reason.message}`
    : `Updated ${new Date().toLocaleTimeString()} (every ${POLL_MS / 1000} s)`;
}

async function loop() {
  clearTimeout(timer);
  try { await refresh(); } catch (e) { $("#summary").textContent = `cannot reach the API: ${e.message}`; }
  timer = setTimeout(loop, POLL_MS);
}

function charts() {
  if (token() && route().view === "overview") refreshCharts().catch(() => {});
}

function show() {
  const r = route();
  $("#overview-view").hidden = r.view !== "overview";
  $("#job-view").hidden = r.view !== "job";
  if (r.view === "job") {
    openJob(r.jobId);
    $("#job-title").focus();
  } else {
    document.title = "raftcron status";
    forget();
    charts();
  }
  loop();
}

function setupTokenForm() {
  $("#token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("#token-input").value.trim();
    if (!value) {
      showAuth("Enter a token first.", true);
      $("#token-input").focus();
      return;
    }
    setToken(value);
    $("#token-input").value = "";
    auth.state = "loading";
    showAuth("Token saved for this browser tab; loading…", false);
    forget();
    loop();
    charts();
  });
  $("#token-forget").addEventListener("click", () => {
    setToken("");
    showAuth("Token forgotten. Enter a token to see the cluster.", false);
    $("#token-input").focus();
  });
  if (token()) showAuth("Using the token saved for this browser tab.", false);
  else showAuth("This cluster needs an API token (a read, tenant or admin token).", false);
}

function setupExport() {
  $("#export-jobs").addEventListener("click", async () => {
    const format = $("#export-format").value;
    try {
      await download(`/v1/jobs:export?format=${encodeURIComponent(format)}`, `jobs.${format}`);
      say(`Jobs exported as jobs.${format}.`);
    } catch (e) {
      say(`Export failed: ${e.message}`);
    }
  });
}

setupTokenForm();
setupExport();
setupJobsTable();
setupJobPage();
window.addEventListener("hashchange", show);
show();
setInterval(charts, CHARTS_MS);
