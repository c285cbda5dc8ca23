// Schedules: the paged list; one schedule with its actions, its occurrence ledger
// (paged, refreshed live, the pending row included) and a preview of its next instants.

import {call} from "./rpc.js";
import {badge, h, inZone, json, kv, link, replace, table, time} from "./dom.js";
import {confirmAction, may} from "./actions.js";

const PAGE = 50;

function zoneOf(schedule) {
  return schedule.trigger && schedule.trigger.timezone ? schedule.trigger.timezone : "UTC";
}

function triggerText(trigger) {
  if (!trigger) return "—";
  if (trigger.kind === "cron") return `cron ${trigger.expression} (${trigger.timezone || "UTC"})`;
  if (trigger.kind === "oneshot") return `once at ${trigger.at}`;
  return JSON.stringify(trigger);
}

function pauseText(sc) {
  if (!sc.paused) return "no";
  return sc.pause_reason ? `paused: ${sc.pause_reason}` : "paused";
}

function overlapText(sc) {
  return sc.overlap === "parallel" ? `parallel (max ${sc.max_active_runs})` : String(sc.overlap);
}

export async function scheduleList(ctx) {
  const {root, query} = ctx;
  const cursor = query.get("cursor");
  const jump = h("input", {type: "text", placeholder: "schedule id", testid: "jump-id"});
  const form = h("form", {class: "toolbar"}, h("label", {}, "Open a schedule by id", jump),
    h("button", {type: "submit"}, "Open"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (jump.value.trim()) location.hash = `#/schedules/${encodeURIComponent(jump.value.trim())}`;
  });
  const body = h("div", {class: "panel"});
  root.append(h("h1", {}, "Schedules"), form, body);
  const started = performance.now();
  const page = await call("workflow.schedules.list", {limit: PAGE, cursor});
  if (!ctx.alive()) return;
  const rows = page.schedules.map((sc) => h("tr", {"data-schedule": sc.schedule_id},
    h("td", {}, link(`#/schedules/${encodeURIComponent(sc.schedule_id)}`, sc.schedule_id)),
    h("td", {}, sc.deployment_id),
    h("td", {}, sc.tenant),
    h("td", {}, badge(sc.status)),
    h("td", {}, triggerText(sc.trigger)),
    h("td", {}, sc.next_instant ? time(Date.parse(sc.next_instant) / 1000) : "—"),
    h("td", {}, inZone(sc.next_instant, zoneOf(sc))),
    h("td", {}, pauseText(sc)),
    h("td", {}, overlapText(sc)),
    h("td", {}, sc.misfire),
    h("td", {class: "num"}, `${sc.skipped_overlap} / ${sc.skipped_misfire}`),
    h("td", {class: "note"}, sc.note ?? "")));
  replace(body,
    table(["id", "deployment", "tenant", "status", "trigger", "next (UTC)", "next (zone)", "paused",
      "overlap", "misfire", "skipped overlap / misfire#", "note"], rows, {testid: "schedules"}),
    h("div", {class: "pager"},
      cursor ? link("#/schedules", "« first page") : null,
      page.next_cursor ? h("a", {href: `#/schedules?cursor=${encodeURIComponent(page.next_cursor)}`, testid: "next-page"}, "next page »") : null,
      h("span", {class: "muted", testid: "page-info"}, `${page.schedules.length} schedules on this page, loaded in ${Math.round(performance.now() - started)} ms`)));
}

export async function scheduleOne(ctx) {
  const {root, query, who} = ctx;
  const [id] = ctx.args;
  const occCursor = query.get("occ");
  const head = h("div", {});
  const actions = h("div", {class: "actions", testid: "schedule-actions"});
  const ledger = h("div", {class: "panel"});
  const preview = h("div", {class: "panel", testid: "preview"});
  const ledgerStamp = h("span", {class: "live", testid: "ledger-refreshed"});
  root.append(h("h1", {}, "Schedule ", h("span", {testid: "schedule-id"}, id)), actions, head,
    h("h2", {}, "Occurrence ledger ", ledgerStamp), ledger, h("h2", {}, "Next instants"), preview);

  const sc = await call("workflow.schedules.get", {schedule_id: id});
  if (!ctx.alive()) return;
  replace(head, h("div", {class: "panel", testid: "schedule"},
    h("p", {}, badge(sc.status), " ", sc.paused ? badge("paused") : null,
      " deployment ", link(`#/runs?deployment=${encodeURIComponent(sc.deployment_id)}`, sc.deployment_id),
      " · ", link(`#/runs?schedule=${encodeURIComponent(sc.schedule_id)}`, "its runs")),
    kv(sc, {times: ["created_at", "updated_at", "finished_at", "paused_at", "deleted_at", "watermark", "candidate_since"]})));

  const act = (spec) => confirmAction(spec).then((r) => { if (r !== null) ctx.reload(); });
  if (may(who, "operate")) {
    actions.append(
      h("button", {type: "button", testid: "action-pause", on: {click: () => act({
        title: `Pause ${id}`, method: "workflow.schedules.pause", describe: "Stop admitting this schedule's future occurrences.",
        fields: [{name: "reason", label: "Reason (optional)"}],
        params: (v) => ({schedule_id: id, reason: v.reason || null})})}}, "Pause"),
      h("button", {type: "button", testid: "action-resume", on: {click: () => act({
        title: `Resume ${id}`, method: "workflow.schedules.resume", describe: "Admit again from the next future instant.",
        params: () => ({schedule_id: id})})}}, "Resume"),
      h("button", {type: "button", testid: "action-trigger", on: {click: () => act({
        title: `Trigger ${id}`, method: "workflow.schedules.trigger", describe: "Start one run now through this schedule's bindings.",
        params: () => ({schedule_id: id})})}}, "Trigger now"));
  }
  actions.append(h("button", {type: "button", class: "secondary", testid: "action-preview", on: {click: () => confirmAction({
    title: `Preview ${id}`, method: "workflow.schedules.preview", describe: "List the next instants the trigger yields.",
    fields: [{name: "count", label: "How many (1-100)", value: "5"}],
    params: (v) => ({schedule_id: id, count: Number.parseInt(v.count, 10)})})}}, "Preview…"));

  const instants = await call("workflow.schedules.preview", {schedule_id: id, count: 10}).catch((e) => e);
  if (!ctx.alive()) return;
  if (instants instanceof Error) replace(preview, h("p", {class: "muted"}, instants.code, ": ", instants.message));
  else replace(preview, table(["instant (UTC)", "in the schedule's zone"],
    instants.map((p) => h("tr", {}, h("td", {}, p.instant), h("td", {}, p.local ?? inZone(p.instant, p.timezone))))));

  await ctx.live(async () => {
    const page = await call("workflow.schedules.occurrences.list", {schedule_id: id, limit: PAGE, cursor: occCursor});
    if (!ctx.alive()) return;
    const rows = page.occurrences.map((o) => h("tr", {"data-status": o.status},
      h("td", {}, o.instant),
      h("td", {}, inZone(o.instant, zoneOf(sc))),
      h("td", {}, badge(o.status)),
      h("td", {}, o.reason ?? ""),
      h("td", {}, o.run_id ? link(`#/runs/${encodeURIComponent(o.run_id)}`, o.run_id) : "—"),
      h("td", {}, time(o.recorded_at)),
      h("td", {}, Object.keys(o).some((k) => !["schedule_id", "instant", "instant_s", "status", "reason", "run_id", "recorded_at"].includes(k))
        ? json(Object.fromEntries(Object.entries(o).filter(([k]) => !["schedule_id", "instant", "instant_s", "status", "reason", "run_id", "recorded_at"].includes(k))))
        : "")));
    replace(ledger,
      table(["instant (UTC)", "in zone", "status", "reason", "run", "recorded", "more"], rows, {testid: "occurrences"}),
      h("div", {class: "pager"},
        occCursor ? link(`#/schedules/${encodeURIComponent(id)}`, "« first page") : null,
        page.next_cursor ? h("a", {testid: "occ-next", href: `#/schedules/${encodeURIComponent(id)}?occ=${encodeURIComponent(page.next_cursor)}`}, "next page »") : null,
        page.occurrences.length ? null : h("span", {class: "muted"}, "No occurrences yet.")));
    ledgerStamp.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
  });
}
