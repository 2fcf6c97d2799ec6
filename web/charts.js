// The two charts of the overview, hand-drawn SVG (no dependency):
// - herd: fires per minute for the next 24 h as a steady band (every minute's count, grey)
//   with the minutes well above the steady level overlaid as spikes (red, drawn at least
//   3 px wide so a single minute of 1,440 stays visible), the peak named in text;
// - lag: p50 and p99 of the lease lag per minute over the last hour, on a log scale.

import { $, el, svg, duration } from "./lib.js";

const H = 120;
const fmt = (n) => n.toLocaleString("en-US");
const hhmm = (ms) => new Date(ms).toISOString().slice(11, 16);

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
}

// Minutes that stand out above the steady level: more than 1.5× the median and at least
// 3 more than it.
export function spikes(counts) {
  const steady = median(counts);
  const threshold = Math.max(steady * 1.5, steady + 3);
  const found = [];
  counts.forEach((c, i) => { if (c > threshold) found.push(i); });
  return { steady, found };
}

// Tick labels centred on their position, except near an edge, where they keep inside.
function axis(ticks) {
  const place = (left) => (left < 4 ? "left:0;transform:none"
    : left > 96 ? "left:auto;right:0;transform:none" : `left:${left}%`);
  return el("div", { class: "chart-axis", "aria-hidden": "true" },
    ...ticks.map(([left, text]) => el("span", { style: place(left) }, text)));
}

export function renderHerd(container, herd) {
  const counts = herd.counts;
  const n = counts.length;
  const max = Math.max(1, ...counts);
  const startMs = Date.parse(herd.start);
  const bucketMs = herd.bucket_s * 1000;
  const { steady, found } = spikes(counts);
  const y = (c) => H - (c / max) * (H - 6);
  const chart = svg("svg", { viewBox: `0 0 ${n} ${H}`, preserveAspectRatio: "none",
    role: "img", class: "herd-svg" });
  let band = `M0 ${H}`;
  counts.forEach((c, i) => { band += `V${y(c)}H${i + 1}`; });
  chart.append(svg("path", { d: `${band}V${H}Z`, class: "band" }));
  if (steady > 0) {
    chart.append(svg("line", { x1: 0, x2: n, y1: y(steady), y2: y(steady), class: "steady" }));
  }
  for (const i of found) {
    chart.append(svg("line", { x1: i + 0.5, x2: i + 0.5, y1: H, y2: y(counts[i]),
      class: "spike", "data-minute": new Date(startMs + i * bucketMs).toISOString(),
      "data-count": counts[i] }));
  }
  const peak = herd.peak;
  const peakMs = peak ? Date.parse(peak.at) : null;
  const peakText = peak
    ? `peak ${fmt(peak.count)} fires in the minute of ${hhmm(peakMs)} UTC` +
      ` (${new Date(peakMs).toISOString().slice(0, 10)})` : "nothing due";
  chart.setAttribute("aria-label", `Fires per ${herd.bucket_s / 60} minute over the next ` +
    `${herd.hours} h: steady about ${fmt(steady)} per minute, ${found.length} spike minutes, ` +
    peakText);
  const wrap = el("div", { class: "chart-wrap" }, chart);
  if (peak) {
    const i = Math.round((peakMs - startMs) / bucketMs);
    wrap.append(el("span", { class: "peak-label", id: "herd-peak",
      style: `left:${Math.min(94, Math.max(6, ((i + 0.5) / n) * 100))}%` }, `▼ ${fmt(peak.count)} at ${hhmm(peakMs)}`));
  }
  wrap.append(el("span", { class: "scale-label", "aria-hidden": "true" }, `${fmt(max)}/min`));
  const ticks = [];
  const firstTick = Math.ceil(startMs / 10_800_000) * 10_800_000;
  for (let t = firstTick; t < startMs + n * bucketMs; t += 10_800_000) {
    ticks.push([((t - startMs) / (n * bucketMs)) * 100, `${hhmm(t)} UTC`]);
  }
  container.replaceChildren(wrap, axis(ticks));
  const others = found.filter((i) => !peak || i !== Math.round((peakMs - startMs) / bucketMs))
    .sort((a, b) => counts[b] - counts[a]).slice(0, 3)
    .map((i) => `${hhmm(startMs + i * bucketMs)} (${fmt(counts[i])})`);
  $("#herd-summary").textContent = `${fmt(herd.total)} fires from ${fmt(herd.jobs)} active jobs; ` +
    `steady about ${fmt(steady)} per minute; ${peakText}` +
    (peak && steady ? `, ${fmt(peak.count - steady)} above the steady level` : "") + "." +
    (others.length ? ` Other spikes: ${others.join(", ")}.` : "") +
    (herd.excluded ? ` ${fmt(herd.excluded)} more excluded by calendars.` : "") +
    (herd.truncated ? " Truncated: too many instants to count them all." : "");
}

export function renderLag(container, lag) {
  const buckets = lag.buckets;
  const n = buckets.length;
  const top = Math.max(1000, ...buckets.map((b) => b.p99_ms || 0));
  const logTop = Math.log10(top);
  // log scale from 1 ms: 0 ms lag draws at the bottom
  const y = (ms) => H - (Math.log10(Math.max(1, ms)) / logTop) * (H - 6);
  const chart = svg("svg", { viewBox: `0 0 ${n} ${H}`, preserveAspectRatio: "none",
    role: "img", class: "lag-svg" });
  buckets.forEach((b, i) => {
    if (b.p99_ms !== null) {
      chart.append(svg("rect", { x: i + 0.1, width: 0.8, y: y(b.p99_ms), height: H - y(b.p99_ms),
        class: "p99" }));
      chart.append(svg("rect", { x: i + 0.1, width: 0.8, y: y(b.p50_ms), height: H - y(b.p50_ms),
        class: "p50" }));
    }
    if (b.waiting) {
      chart.append(svg("rect", { x: i + 0.1, width: 0.8, y: 0, height: 4, class: "waiting" }));
    }
  });
  const worst = lag.worst;
  const leased = buckets.reduce((s, b) => s + b.leased, 0);
  const waiting = buckets.reduce((s, b) => s + b.waiting, 0);
  const last = [...buckets].reverse().find((b) => b.leased);
  const text = !leased ? "No scheduled fire was leased in this window." :
    `${fmt(leased)} fires leased; worst minute ${hhmm(Date.parse(worst.minute))} UTC: ` +
    `p99 ${duration(worst.p99_ms)}, p50 ${duration(worst.p50_ms)}` +
    (last ? `; latest minute ${hhmm(Date.parse(last.minute))} UTC: p99 ` +
      `${duration(last.p99_ms)}, p50 ${duration(last.p50_ms)}` : "") + "." +
    (waiting ? ` ${fmt(waiting)} due and not leased yet (red marks).` : "") +
    (lag.truncated ? " Only the newest 20,000 instants are counted." : "");
  chart.setAttribute("aria-label", `Fire lag per minute, last ${n} minutes, log scale: ${text}`);
  const wrap = el("div", { class: "chart-wrap" }, chart,
    el("span", { class: "scale-label", "aria-hidden": "true" }, duration(top)));
  container.replaceChildren(wrap, axis([[0, `−${n} min`], [50, `−${n / 2} min`], [100, "now"]]),
    el("p", { class: "legend-line", "aria-hidden": "true" },
      el("span", { class: "swatch p50" }), " p50 ", el("span", { class: "swatch p99" }), " p99 (log scale)"));
  $("#lag-summary").textContent = text;
}
