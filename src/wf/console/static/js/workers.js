// Workers (heartbeat figures, capabilities, held leases, load; drain) and one activity
// (its transitions, paged, and the leases they record).

import {call} from "./rpc.js";
import {badge, duration, h, json, kv, link, replace, table, time, value} from "./dom.js";
import {confirmAction, may} from "./actions.js";

const PAGE = 100;

function list(values) {
  return values && values.length ? values.join(", ") : "any";
}

function percent(fraction) {
  return typeof fraction === "number" ? `${(fraction * 100).toFixed(1)}%` : "—";
}

export async function workerList(ctx) {
  const {root, query, who} = ctx;
  const cursor = query.get("cursor");
  const body = h("div", {class: "panel"});
  const stamp = h("span", {class: "live", testid: "workers-refreshed"});
  root.append(h("h1", {}, "Workers ", stamp), body);
  const drain = (id) => confirmAction({
    title: `Drain ${id}`, method: "scheduler.workers.shutdown", danger: true,
    describe: "Shut this worker down gracefully: its unstarted leases return to the queue and it takes no new work.",
    params: () => ({worker_id: id}),
  }).then((r) => { if (r !== null) ctx.reload(); });
  await ctx.live(async () => {
    const page = await call("scheduler.workers.list", {limit: PAGE, cursor});
    if (!ctx.alive()) return;
    const now = Date.now() / 1000;
    const rows = page.workers.map((w) => {
      const info = w.info;
      const leases = Object.entries(w.leases || {});
      const stats = w.stats || {};
      return h("tr", {"data-worker": info.worker_id},
        h("td", {}, h("strong", {}, info.worker_id), h("div", {class: "muted"}, info.hostname ?? ""), h("div", {class: "muted"}, info.version ? `v${info.version}` : "")),
        h("td", {}, badge(w.status)),
        h("td", {}, time(w.last_seen_at), h("div", {class: "muted"}, `${duration(Math.max(0, now - w.last_seen_at))} ago · every ${info.heartbeat_interval_s ?? "?"} s`)),
        h("td", {class: "num", testid: "load"}, `${leases.length} / ${info.max_concurrency}`),
        h("td", {}, `cpu ${percent(stats.cpu_fraction)} · mem ${percent(stats.memory_fraction)}`,
          h("div", {class: "muted"}, `workload ${stats.workload ?? 0} · buffered ${stats.queue_depth ?? 0}`),
          stats.last_completed_activity ? h("div", {class: "muted"}, "last done ", link(`#/activities/${encodeURIComponent(stats.last_completed_activity)}`, stats.last_completed_activity)) : null),
        h("td", {}, leases.length ? leases.map(([act, tok]) => h("div", {}, link(`#/activities/${encodeURIComponent(act)}`, act), ` (token ${tok}${stats.lease_status && stats.lease_status[act] ? `, ${stats.lease_status[act]}` : ""})`)) : "—"),
        h("td", {}, `capabilities: ${list(info.capabilities)}`, h("div", {class: "muted"}, `types: ${list(info.activity_types)}`),
          info.tenants ? h("div", {class: "muted"}, `tenants: ${list(info.tenants)}`) : null),
        h("td", {}, value(info.labels)),
        h("td", {}, may(who, "worker") && w.status === "active"
          ? h("button", {type: "button", class: "danger", testid: `drain-${info.worker_id}`, on: {click: () => drain(info.worker_id)}}, "Drain")
          : ""));
    });
    replace(body,
      table(["worker", "status", "last heartbeat", "leases / slots#", "heartbeat figures", "held leases", "scope", "labels", ""], rows, {testid: "workers"}),
      h("div", {class: "pager"},
        cursor ? link("#/workers", "« first page") : null,
        page.next_cursor ? h("a", {href: `#/workers?cursor=${encodeURIComponent(page.next_cursor)}`, testid: "next-page"}, "next page »") : null,
        page.workers.length ? null : h("span", {class: "muted"}, "No workers visible.")));
    stamp.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
  });
}

function leasesOf(transitions) {
  const leases = new Map();
  for (const t of transitions) {
    if (!t.token) continue;
    const lease = leases.get(t.token) || {token: t.token, worker_id: t.worker_id, granted_at: null, expires_at: null, ended: null, outcome: null};
    if (t.to_state === "leased") lease.granted_at = t.at;
    lease.expires_at = t.lease_expires_at || lease.expires_at;
    lease.worker_id = t.worker_id || lease.worker_id;
    if (!["leased", "executing"].includes(t.to_state)) {
      lease.ended = t.at;
      lease.outcome = `${t.to_state} (${t.reason})`;
    }
    leases.set(t.token, lease);
  }
  return [...leases.values()];
}

export async function activityOne(ctx) {
  const {root, query} = ctx;
  const [id] = ctx.args;
  const cursor = query.get("cursor");
  const state = h("div", {class: "panel", testid: "activity"});
  const leases = h("div", {class: "panel", testid: "leases"});
  const history = h("div", {class: "panel"});
  root.append(h("h1", {}, "Activity ", h("span", {testid: "activity-id"}, id)), state, h("h2", {}, "Leases"), leases, h("h2", {}, "Transitions"), history);
  const [view, page] = await Promise.all([
    call("scheduler.activities.get", {activity_id: id}),
    call("scheduler.activities.history", {activity_id: id, limit: PAGE, cursor}),
  ]);
  if (!ctx.alive()) return;
  if (view.activity) replace(state, kv(view.activity, {times: ["created_at", "updated_at", "not_before", "lease_expires_at"]}));
  else replace(state, h("p", {}, "Finished: ", badge(view.finished_state ?? "unknown")));
  replace(leases, table(["token#", "worker", "granted", "expires", "ended", "outcome"], leasesOf(page.transitions).map((l) =>
    h("tr", {}, h("td", {class: "num"}, String(l.token)), h("td", {}, l.worker_id ?? "—"), h("td", {}, time(l.granted_at)),
      h("td", {}, time(l.expires_at)), h("td", {}, time(l.ended)), h("td", {}, l.outcome ?? "held")))));
  const known = ["kind", "at", "activity_id", "from_state", "to_state", "reason", "attempt", "token", "worker_id", "lease_expires_at", "result"];
  replace(history,
    table(["at (UTC)", "from → to", "reason", "attempt#", "token#", "worker", "lease expires", "details"], page.transitions.map((t) => {
      const extra = Object.fromEntries(Object.entries(t).filter(([k, v]) => !known.includes(k) && v !== null && v !== 0));
      return h("tr", {"data-to": t.to_state},
        h("td", {}, time(t.at)), h("td", {}, badge(t.from_state), " → ", badge(t.to_state)), h("td", {}, t.reason),
        h("td", {class: "num"}, String(t.attempt)), h("td", {class: "num"}, String(t.token)), h("td", {}, t.worker_id ?? "—"),
        h("td", {}, t.lease_expires_at ? time(t.lease_expires_at) : "—"),
        h("td", {}, Object.keys(extra).length ? kv(extra) : ""));
    }), {testid: "transitions"}),
    h("div", {class: "pager"},
      cursor ? link(`#/activities/${encodeURIComponent(id)}`, "« first page") : null,
      page.next_cursor ? h("a", {href: `#/activities/${encodeURIComponent(id)}?cursor=${encodeURIComponent(page.next_cursor)}`, testid: "next-page"}, "next page »") : null));
}
