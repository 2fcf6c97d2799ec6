// Shared helpers of the status page: DOM building (text only, never HTML), formatting,
// the API client with the bearer token, and the token's storage.
// Every API call carries the token the user entered in the token form; the token is kept
// in sessionStorage (this tab only, gone when it closes).

export const $ = (sel) => document.querySelector(sel);
export const SYMBOL = {
  succeeded: "✓", failed: "✗", running: "▶", pending: "…", skipped: "↷", cancelled: "⊘",
};
const TOKEN_KEY = "raftcron.token";
const lastRendered = new Map();

function storedToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
}

let memoryToken = storedToken();
let authProblem = null;  // the last 401/403 message shown, so it is not repeated every poll
export const auth = { state: "ok" };  // "loading" after a new token, "refused" after a 401

export function token() { return memoryToken; }

export function setToken(value) {
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch (e) { /* storage disabled: the token lasts until reload */ }
  memoryToken = value;
  authProblem = null;
}

export function showAuth(text, isError) {
  const box = $("#auth-message");
  if (box.textContent !== text) box.textContent = text;
  box.className = isError ? "auth-message auth-error" : "auth-message";
}

export function authRecovered() {
  if (auth.state === "ok") return;
  auth.state = "ok";
  authProblem = null;
  showAuth("Using the token saved for this browser tab.", false);
}

function authFailed(status, message) {
  const text = status === 401
    ? `The API refused the token (401 unauthorized): ${message}. Enter a valid token.`
    : `This token is not allowed to do that (403 forbidden): ${message}.`;
  if (status === 401) auth.state = "refused";
  if (authProblem !== text) {
    authProblem = text;
    showAuth(text, true);
    if (status === 401) $("#token-input").focus();
  }
}

// Builds an element. Children and the `text` attribute become text nodes: nothing that
// comes from a job (names, output, errors) is ever parsed as HTML.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

export function td(content, attrs = {}) {
  return el("td", attrs, content ?? "–");
}

// A schedule in one line: its cron, its one-time times or its interval.
// A schedule in one line; a chained job (no schedule) shows what it runs after.
export function scheduleText(s, after) {
  if (!s) return after ? `after ${after.job} (${after.on})` : "";
  if (s.at) return `at ${[].concat(s.at).join(", ")}`;
  if (s.every) return `every ${s.every}${s.anchor ? ` from ${s.anchor}` : ""}`;
  return s.cron;
}

export function statusBadge(status, extra) {
  const text = `${SYMBOL[status] || "•"} ${status}${extra ? ` (${extra})` : ""}`;
  return el("span", { class: `status status-${status}` }, text);
}

export function jobLink(jobId) {
  if (!jobId) return "–";
  return el("a", { href: `#/jobs/${encodeURIComponent(jobId)}`, class: "job-link" }, jobId);
}

export function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const future = seconds < 0;
  const s = Math.abs(seconds);
  if (s < 1) return "now";
  const text = s < 90 ? `${Math.round(s)} s` : s < 5400 ? `${Math.round(s / 60)} min`
    : s < 172800 ? `${(s / 3600).toFixed(1)} h` : `${Math.round(s / 86400)} d`;
  return future ? `in ${text}` : `${text} ago`;
}

export function sinceIso(iso) {
  return iso ? age((Date.now() - Date.parse(iso)) / 1000) : "–";
}

// An alert's cause in words: "cluster_unavailable" says it is the cluster's trouble, not
// the job's (no leader, or its clock refused, when the instant was due).
export function causeText(cause) {
  return cause === "cluster_unavailable" ? "cause: cluster unavailable (not the job)" : `cause: ${cause}`;
}

export function shortTime(iso) {
  return iso ? iso.replace("T", " ").replace("Z", " UTC") : "–";
}

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 90_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 5_400_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

export function between(fromIso, toIso) {
  return fromIso && toIso ? duration(Date.parse(toIso) - Date.parse(fromIso)) : "–";
}

// Re-render only what changed, and give focus back to the control that had it, so a
// keyboard user does not lose their place every two seconds.
export function render(key, data, container, build) {
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

export function forget(key) {
  if (key === undefined) lastRendered.clear();
  else lastRendered.delete(key);
}

export function fillRows(tbody, rows, empty) {
  if (!rows.length) {
    const cols = tbody.closest("table").querySelectorAll("thead th").length;
    tbody.replaceChildren(el("tr", {}, el("td", { colspan: cols, class: "muted" }, empty)));
    return;
  }
  tbody.replaceChildren(...rows.map((cells) => (cells instanceof Node ? cells
    : el("tr", {}, ...cells))));
}

export async function api(path, options = {}) {
  const headers = { "content-type": "application/json", ...(options.headers || {}) };
  if (memoryToken) headers.Authorization = `Bearer ${memoryToken}`;
  const resp = await fetch(path, { ...options, headers });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const msg = body && body.error ? body.error.message : resp.statusText;
    const field = body && body.error && body.error.field;
    if (resp.status === 401 || resp.status === 403) authFailed(resp.status, msg);
    const err = new Error(field ? `${field} ${msg}` : msg);
    err.status = resp.status;
    err.body = body;
    throw err;
  }
  return body;
}

// A text answer (not JSON) as a file the browser saves, e.g. the jobs export.
export async function download(path, filename) {
  const headers = memoryToken ? { Authorization: `Bearer ${memoryToken}` } : {};
  const resp = await fetch(path, { headers });
  if (!resp.ok) {
    let msg = resp.statusText;
    try { msg = (await resp.json()).error.message; } catch (e) { /* not JSON */ }
    if (resp.status === 401 || resp.status === 403) authFailed(resp.status, msg);
    throw new Error(msg);
  }
  const url = URL.createObjectURL(await resp.blob());
  const link = el("a", { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(url);
}

export function say(text) {
  $("#action-result").textContent = text;
}

export function idempotencyKey() {
  return `page-${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

// POST /v1/jobs/{id}/{pause|resume|trigger}; `done` runs after a success.
export async function jobAction(job, action, label, done) {
  const headers = action === "trigger" ? { "Idempotency-Key": idempotencyKey() } : {};
  try {
    const result = await api(`/v1/jobs/${encodeURIComponent(job)}/${action}`,
      { method: "POST", body: "{}", headers });
    say(action === "trigger" ? `${label} ${job}: occurrence ${result.id} is ${result.status}`
      : `${label} ${job}: done`);
    if (done) done();
  } catch (e) {
    say(`${label} ${job} failed: ${e.message}`);
  }
}

export function actionButton(label, job, action, confirmText, done) {
  return el("button", {
    type: "button", "aria-label": `${label} ${job}`,
    // Pause and Resume share a key: after a click, focus lands on the button that replaced it.
    "data-key": `${action === "trigger" ? "trigger" : "toggle"}:${job}`,
    onclick: () => {
      if (confirmText && !window.confirm(confirmText)) {
        say(`${label} ${job}: cancelled`);
        return;
      }
      jobAction(job, action, label, done);
    },
  }, label);
}
