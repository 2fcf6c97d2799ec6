// The history of a job's edits on its page (GET /v1/jobs/{id}/history): each committed
// change, newest first, with its kind, who made it and when, and the fields it changed,
// before → after. Values are text only: nothing in a job definition is parsed as HTML.

import { el, shortTime, sinceIso } from "./lib.js";

export const CHANGES_PAGE = 20;

const KIND_TEXT = {
  create: "created", edit: "edited", pause: "paused", resume: "resumed",
  bulk_pause: "paused in bulk", bulk_resume: "resumed in bulk", delete: "deleted",
};

function valueText(v) {
  if (v === null || v === undefined) return "–";
  return typeof v === "string" ? v : JSON.stringify(v);
}

function changedFields(v) {
  if (v.kind === "create") return null;
  if (v.changes === null) return el("p", { class: "muted" }, "the version before is not in the history");
  if (!v.changes.length) return el("p", { class: "muted" }, "no field changed");
  return el("ul", { class: "changed-fields" }, ...v.changes.map((c) => el("li", { "data-field": c.field },
    el("span", { class: "field" }, c.field), ": ",
    el("code", { class: "before" }, valueText(c.before)), " → ",
    el("code", { class: "after" }, valueText(c.after)))));
}

export function renderChanges(list, { versions }) {
  if (!versions.length) {
    list.replaceChildren(el("li", { class: "muted" }, "no change recorded"));
    return;
  }
  list.replaceChildren(...versions.map((v) => el("li", { class: "change", "data-seq": v.seq, "data-kind": v.kind },
    el("p", { class: "change-head" },
      el("strong", {}, `Version ${v.version}`), ` ${KIND_TEXT[v.kind] || v.kind} by `,
      el("span", { class: "who" }, v.by ?? "(not recorded)"),
      ` · ${shortTime(v.at)} `, el("span", { class: "muted" }, sinceIso(v.at))),
    v.note ? el("p", { class: "change-note" }, `Note: ${v.note}`) : null,
    changedFields(v))));
}
