"""Human report (report.md) and a timeline PNG of nemesis windows against fire lag
(matplotlib, optional: without it the PNG is skipped and the report says so)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_LISTED = 15


def write_report(d: Path, summary: dict[str, Any], run: dict[str, Any]) -> None:
    v = summary["verdict"]
    st = summary["stats"]
    meta = summary.get("meta") or {}
    lines = [f"# Chaos run — seed {v.get('seed')} ({v.get('profile')})", "",
             f"**{'VALID' if v['valid'] else 'INVALID'}**", ""]
    if meta:
        lines += [f"- wall-clock offset of the cluster: {meta.get('base_offset_s', 0):.0f} s "
                  f"(DST transition {meta.get('dst_transition')})",
                  f"- elapsed: {meta.get('elapsed_s', 0):.0f} s", ""]
    lines += ["## Checks", "",
              "Every check the checker ran, with its count of violations (0 = checked, "
              "nothing found; the run is VALID only when every count is 0).", "",
              "| check | violations |", "|---|---|"]
    lines += [f"| {name} | {n} |" for name, n in (v.get("checks") or {}).items()]
    sink_stats = st.get("sink") or {}
    if "early_bound_s" in sink_stats:
        lines += ["", f"early_fire bound: {sink_stats['early_bound_s']} s (the clock guard's "
                  "0.5 s plus the sink's stated clock error); the earliest effect reached the sink "
                  f"{sink_stats.get('earliest_effect_s')} s before its instant (negative: after)."]
    lines += ["", "## Violations", ""]
    if not summary["violations"]:
        lines.append("none")
    for kind, items in summary["violations"].items():
        lines.append(f"### {kind} ({len(items)})")
        for item in items[:MAX_LISTED]:
            lines.append(f"- `{json.dumps(item, default=str)}`")
        if len(items) > MAX_LISTED:
            lines.append(f"- … {len(items) - MAX_LISTED} more in summary.json")
        lines.append("")
    lines += ["", "## Coverage (evidence per failure kind)", "", "| kind | count |", "|---|---|"]
    lines += [f"| {k} | {n} |" for k, n in st["coverage"].items()]
    lines += ["", "## Nemesis windows, failover and fire lag", "",
              "| # | kind | targets | duration s | failover s | lag p50 s | lag max s |",
              "|---|---|---|---|---|---|---|"]
    fo = {f["op"]: f for f in st["failover"]}
    lag = {w["op"]: w for w in (st["fire_lag"].get("windows") or [])}
    for w in summary["windows"]:
        dur = (w["stop"] - w["start"]) if w["stop"] else None
        f = fo.get(w["op"], {})
        lw = lag.get(w["op"], {})
        lines.append(f"| {w['op']} | {w['kind']} | {w['targets']} | "
                     f"{'' if dur is None else f'{dur:.1f}'} | {f.get('failover_s', '')} | "
                     f"{lw.get('p50_s', '')} | {lw.get('max_s', '')} |")
    base = st["fire_lag"].get("baseline") or {}
    sink = {k: v for k, v in st["sink"].items() if k != "stale_examples"}
    lines += ["", f"Baseline fire lag (outside windows): p50 {base.get('p50_s')} s, "
              f"p95 {base.get('p95_s')} s, max {base.get('max_s')} s over {base.get('n')} runs.",
              "", "## Terms", "", f"`{json.dumps(st['terms'])}`", "",
              "## Fenced sink", "", f"`{json.dumps(sink)}`",
              "", "## DST", "", f"`{json.dumps(st['dst'])}`", "",
              "## Client operations", "", f"`{json.dumps(st['client_ops'])}`", "",
              "## Occurrences (reference node)", "", f"`{json.dumps(st['occurrences'])}`", "",
              "## Tenant quotas", "", f"`{json.dumps(st.get('tenants'))}`", "",
              "## Concurrency groups", "", f"`{json.dumps(st.get('groups'))}`", "",
              "## Retention", "", f"`{json.dumps(st.get('retention'))}`", "",
              "## Backup -> restore", "", f"digests compared: {st.get('backups_compared')}",
              "", "## Membership change", "", f"`{json.dumps(st.get('membership'))}`", ""]
    if summary["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in summary["notes"][:50]]
    png = _timeline(d, summary)
    lines += ["", f"![timeline]({png.name})" if png else
              "(timeline.png not drawn: matplotlib is not installed)"]
    (d / "report.md").write_text("\n".join(lines) + "\n")


def _timeline(d: Path, summary: dict[str, Any]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    points = summary["stats"]["fire_lag"].get("points") or []
    windows = summary["windows"]
    if not points and not windows:
        return None
    t0 = min([p[0] for p in points] + [w["start"] for w in windows])
    fig, ax = plt.subplots(figsize=(14, 5))
    colors = plt.get_cmap("tab20")
    kinds = sorted({w["kind"] for w in windows})
    for w in windows:
        stop = w["stop"] or w["start"] + 1
        c = colors(kinds.index(w["kind"]) % 20)
        ax.axvspan(w["start"] - t0, max(stop, w["start"] + 0.5) - t0, color=c, alpha=0.3,
                   label=w["kind"])
    if points:
        ax.scatter([p[0] - t0 for p in points], [p[1] for p in points], s=4, color="black",
                   label="fire lag (lease - scheduled)")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("seconds since first event (cluster clock)")
    ax.set_ylabel("fire lag, s")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=False))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="upper left", ncol=3)
    ax.set_title(f"seed {summary['verdict'].get('seed')}: nemesis windows vs fire lag")
    fig.tight_layout()
    path = d / "timeline.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
