// Overview: queue depth per partition and lane, dispatch rate and latency, workers by
// status, backpressure, runs by status over the last hour. Two calls every refresh.

import {call} from "./rpc.js";
import {badge, duration, h, replace, s, table, time} from "./dom.js";

const WINDOW_S = 3600;

function card(label, value, testid) {
  return h("div", {class: "card", testid}, h("div", {class: "label"}, label),
    h("div", {class: "value", testid: testid ? `${testid}-value` : null}, value));
}

/** A quantile's upper bound from cumulative-able bucket counts. */
function quantile(bounds, buckets, q) {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (!total) return null;
  let seen = 0;
  for (let i = 0; i < buckets.length; i++) {
    seen += buckets[i];
    if (seen >= q * total) return i < bounds.length ? bounds[i] : Infinity;
  }
  return Infinity;
}

function bars(counts) {
  const entries = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return h("p", {class: "muted", testid: "runs-by-status-empty"}, "No runs created in the last hour.");
  const max = Math.max(...entries.map(([, n]) => n));
  const rowH = 22;
  const svg = s("svg", {class: "bars", width: 520, height: entries.length * rowH + 4, role: "img",
    "aria-label": "runs by status"});
  entries.forEach(([status, n], i) => {
    const y = i * rowH + 2;
    svg.appendChild(s("text", {x: 0, y: y + 14}, status));
    svg.appendChild(s("rect", {class: "bar", x: 110, y: y + 3, height: 14, width: Math.max(2, (n / max) * 340)}));
    svg.appendChild(s("text", {x: 116 + (n / max) * 340, y: y + 14}, String(n)));
  });
  return h("div", {}, svg,
    table(["status", "runs#"], entries.map(([st, n]) => h("tr", {"data-status": st}, h("td", {}, badge(st)), h("td", {class: "num"}, String(n)))),
      {testid: "runs-by-status"}));
}

export async function overview(ctx) {
  const {root} = ctx;
  const stamp = h("span", {class: "live", testid: "refreshed"});
  const figures = h("div", {testid: "figures"});
  const runs = h("div", {class: "panel", testid: "runs-panel"});
  root.append(h("h1", {}, "Overview ", stamp), figures, h("h2", {}, "Runs created in the last hour, by status"), runs);
  let previous = null;
  let refreshes = 0;
  await ctx.live(async () => {
    const [stats, counts] = await Promise.allSettled([
      call("scheduler.dispatch.stats"),
      call("workflow.runs.counts", {window_s: WINDOW_S}),
    ]);
    if (!ctx.alive()) return;
    if (stats.status === "fulfilled") {
      const d = stats.value;
      let rate = "—";
      let latency = "—";
      if (previous && d.at > previous.at) {
        rate = `${((d.dispatched - previous.dispatched) / (d.at - previous.at)).toFixed(1)} /s`;
        const n = d.latency_count - previous.latency_count;
        latency = n > 0 ? duration((d.latency_sum_s - previous.latency_sum_s) / n) : "no dispatch";
      }
      previous = d;
      const p50 = quantile(d.latency_bounds_s, d.latency_buckets, 0.5);
      const p95 = quantile(d.latency_bounds_s, d.latency_buckets, 0.95);
      const workers = Object.entries(d.workers_by_status);
      replace(figures,
        h("div", {class: "cards"},
          card("queue depth", String(d.depth), "depth"),
          card("running / capacity", `${d.running} / ${d.capacity}`, "running"),
          card("delayed", String(d.delayed), "delayed"),
          card("backpressure", badge(d.backpressure), "backpressure"),
          card("dispatch rate", rate, "rate"),
          card("latency (mean, last interval)", latency, "latency"),
          card("latency p50 / p95 (since start, ≤)", `${p50 === null ? "—" : duration(p50)} / ${p95 === null ? "—" : duration(p95)}`, "latency-q"),
          card("dispatched (since start)", String(d.dispatched), "dispatched"),
          card("completed / failed", `${d.completed} / ${d.failed}`, "outcomes")),
        h("div", {class: "split"},
          h("div", {class: "panel"}, h("h2", {}, "Workers by status"),
            table(["status", "workers#"], workers.map(([st, n]) => h("tr", {"data-status": st}, h("td", {}, badge(st)), h("td", {class: "num"}, String(n)))), {testid: "workers-by-status"})),
          h("div", {class: "panel"}, h("h2", {}, "Queue depth by partition"),
            table(["partition", "depth#"], Object.entries(d.depth_by_partition).map(([p, n]) => h("tr", {}, h("td", {}, p), h("td", {class: "num"}, String(n)))), {testid: "depth-by-partition"}))),
        h("div", {class: "panel"}, h("h2", {}, `Deepest lanes (${d.lanes.length} of ${d.lanes_total} non-empty)`),
          table(["partition", "tenant", "activity type", "priority", "region", "depth#"],
            d.lanes.map((l) => h("tr", {}, h("td", {}, l.partition), h("td", {}, l.tenant), h("td", {}, l.activity_type),
              h("td", {}, l.priority), h("td", {}, l.region ?? "—"), h("td", {class: "num"}, String(l.depth)))),
            {testid: "lanes"})));
    } else {
      replace(figures, h("div", {class: "panel muted", testid: "figures-refused"},
        "Queue, dispatch and worker figures are cluster-wide: ", stats.reason.code, " (", stats.reason.message, ")"));
    }
    if (counts.status === "fulfilled") {
      const c = counts.value;
      replace(runs, bars(c.by_status),
        h("p", {class: "muted"}, `Created since ${time(c.since)}`, c.complete ? "" : " (only the newest 10,000 runs counted)"));
    } else {
      replace(runs, h("p", {class: "error"}, counts.reason.code, ": ", counts.reason.message));
    }
    refreshes++;
    stamp.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
    stamp.dataset.refreshes = String(refreshes);
  });
}
