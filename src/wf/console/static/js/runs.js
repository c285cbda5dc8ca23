// Runs: newest first, filtered by deployment, schedule, status and creation time, paged;
// one run's DAG (coloured by state), attempts timeline, inputs, output and interrupts.

import {call} from "./rpc.js";
import {badge, duration, h, json, kv, link, replace, s, table, time, value, withQuery} from "./dom.js";
import {confirmAction, may} from "./actions.js";
import {drawDag, NODE_STATES} from "./dag.js";

const PAGE = 50;
const RUN_STATUSES = ["admitted", "running", "interrupted", "completed", "failed", "cancelled"];
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const ATTEMPT_TIMES = ["leased_at", "started_at", "finished_at", "at", "heartbeat_at", "last_heartbeat_at", "expires_at"];

function toEpoch(local) {
  // <input type="datetime-local"> holds a wall time; the console reads it as UTC.
  if (!local) return null;
  const t = Date.parse(`${local}Z`);
  return Number.isNaN(t) ? null : t / 1000;
}

export async function runList(ctx) {
  const {root, query} = ctx;
  const filters = {
    deployment: query.get("deployment") || "",
    schedule: query.get("schedule") || "",
    status: query.get("status") || "",
    from: query.get("from") || "",
    to: query.get("to") || "",
  };
  const inputs = {
    deployment: h("input", {type: "text", name: "deployment", value: filters.deployment, testid: "filter-deployment"}),
    schedule: h("input", {type: "text", name: "schedule", value: filters.schedule, testid: "filter-schedule"}),
    status: h("select", {name: "status", testid: "filter-status"},
      h("option", {value: ""}, "any"), RUN_STATUSES.map((st) => h("option", {value: st}, st))),
    from: h("input", {type: "datetime-local", step: 1, name: "from", value: filters.from, testid: "filter-from"}),
    to: h("input", {type: "datetime-local", step: 1, name: "to", value: filters.to, testid: "filter-to"}),
  };
  inputs.status.value = filters.status;
  const form = h("form", {class: "toolbar", testid: "run-filters"},
    h("label", {}, "Deployment", inputs.deployment),
    h("label", {}, "Schedule", inputs.schedule),
    h("label", {}, "Status", inputs.status),
    h("label", {}, "Created from (UTC)", inputs.from),
    h("label", {}, "Created before (UTC)", inputs.to),
    h("button", {type: "submit", testid: "apply-filters"}, "Filter"),
    link("#/runs", "clear"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = withQuery("/runs", Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value])));
  });
  const body = h("div", {class: "panel"});
  root.append(h("h1", {}, "Runs ", h("span", {class: "muted"}, "newest first")), form, body);
  const params = {
    newest_first: true,
    limit: PAGE,
    cursor: query.get("cursor"),
    deployment_id: filters.deployment || null,
    schedule_id: filters.schedule || null,
    status: filters.status || null,
    created_after: toEpoch(filters.from),
    created_before: toEpoch(filters.to),
  };
  const page = await call("workflow.runs.list", params);
  if (!ctx.alive()) return;
  const rows = page.runs.map((r) => h("tr", {"data-run": r.run_id},
    h("td", {}, link(`#/runs/${encodeURIComponent(r.run_id)}`, r.run_id)),
    h("td", {}, badge(r.status)),
    h("td", {}, r.deployment_id ?? "—"),
    h("td", {}, r.tenant ?? "—"),
    h("td", {}, r.trigger && r.trigger.schedule_id
      ? link(`#/schedules/${encodeURIComponent(r.trigger.schedule_id)}`, r.trigger.schedule_id)
      : (r.trigger ? r.trigger.kind : "—")),
    h("td", {}, time(r.created_at)),
    h("td", {}, r.finished_at && r.started_at ? duration(r.finished_at - r.started_at) : "—"),
    h("td", {}, r.error ? `${r.error.error_type || r.error.code || "error"}: ${r.error.message || ""}` : (r.corrupt || ""))));
  const next = page.next_cursor ? withQuery("/runs", {...filters, cursor: page.next_cursor}) : null;
  replace(body,
    table(["run", "status", "deployment", "tenant", "trigger", "created (UTC)", "took", "error"], rows, {testid: "runs"}),
    h("div", {class: "pager"},
      params.cursor ? h("a", {href: withQuery("/runs", filters)}, "« newest") : null,
      next ? h("a", {href: next, testid: "next-page"}, "older »") : null,
      page.runs.length ? null : h("span", {class: "muted", testid: "no-runs"}, "No runs match.")));
}

function timeline(run) {
  const spans = [];
  for (const entry of run.trace || []) {
    for (const a of entry.attempts || []) {
      const start = a.leased_at ?? a.started_at;
      if (typeof start === "number") spans.push({node: entry.node, a, start, end: a.finished_at});
    }
  }
  if (!spans.length) return h("p", {class: "muted"}, "No attempts yet.");
  const t0 = Math.min(...spans.map((x) => x.start));
  const now = Date.now() / 1000;
  const t1 = Math.max(...spans.map((x) => x.end ?? now), t0 + 0.001);
  const rowH = 20;
  const width = 720;
  const left = 170;
  const scale = (width - left - 10) / (t1 - t0);
  const svg = s("svg", {class: "bars", width, height: spans.length * rowH + 20, "data-testid": "timeline"});
  spans.forEach((x, i) => {
    const y = i * rowH + 2;
    const end = x.end ?? now;
    svg.appendChild(s("text", {x: 0, y: y + 13}, `${x.node} #${x.a.attempt ?? "?"}`));
    svg.appendChild(s("rect", {class: `bar outcome-${x.a.outcome ?? "open"}`, x: left + (x.start - t0) * scale, y: y + 2,
      height: 14, width: Math.max(2, (end - x.start) * scale)}, s("title", {}, `${x.a.outcome ?? "in progress"}: ${duration(end - x.start)}`)));
  });
  svg.appendChild(s("text", {x: left, y: spans.length * rowH + 16}, `${time(t0)} → +${duration(t1 - t0)}`));
  return svg;
}

function attemptLine(a) {
  // One attempt in a few words: "#2 completed on w1 (1.2 s)".
  const start = a.started_at ?? a.leased_at;
  const took = typeof start === "number" && typeof a.finished_at === "number" ? ` (${duration(a.finished_at - start)})` : "";
  return `#${a.attempt ?? "?"} ${a.outcome ?? "in progress"}${a.worker_id ? ` on ${a.worker_id}` : ""}${took}`;
}

function mapItems(entry) {
  // A map node's items: one row each, with its activity and every attempt (as text).
  const items = entry.items || [];
  if (!items.length) return null;
  return [h("h3", {}, `Items (${items.length})`), table(["item", "status", "activity", "attempts", "started (UTC)", "finished (UTC)", "error"],
    items.map((item) => h("tr", {"data-item": String(item.index)},
      h("td", {}, String(item.index)),
      h("td", {}, badge(item.status), item.unserved ? [" ", h("span", {class: "muted", "data-field": "unserved"}, "no registered worker takes its type")] : null),
      h("td", {}, item.activity_id ? link(`#/activities/${encodeURIComponent(item.activity_id)}`, item.activity_id) : "—"),
      h("td", {}, (item.attempts || []).length
        ? item.attempts.map((a) => h("div", {class: "item-attempt", "data-attempt": String(a.attempt ?? "")}, attemptLine(a),
          a.error ? [": ", a.error] : null))
        : h("span", {class: "muted"}, "none yet")),
      h("td", {}, time(item.started_at)),
      h("td", {}, time(item.finished_at)),
      h("td", {"data-field": "error"}, item.error ? value(item.error) : "—"))),
    {testid: `items-${entry.node}`})];
}

function tracedAttempt(entry) {
  // The attempt whose stack trace the node's error repeats: its last one reporting one.
  const traced = (entry && entry.attempts || []).filter((a) => a.stack_trace);
  return traced.length ? traced[traced.length - 1] : null;
}

function errorPointing(error, node, attempt, attempts) {
  // An error whose stack trace is shown once, on its attempt: here a button leading
  // there instead (a hash link would be taken for a route).
  if (!error || typeof error !== "object" || !error.stack_trace || !attempt) return error;
  const go = () => {
    const el = attempts.querySelector(`[data-node="${CSS.escape(node)}"] .attempt[data-attempt="${CSS.escape(String(attempt.attempt ?? ""))}"]`);
    if (el) el.scrollIntoView({block: "start"});
  };
  return kv({...error, stack_trace: h("button", {type: "button", class: "linklike", testid: "stack-trace-link",
    "data-node": node, "data-attempt": String(attempt.attempt ?? ""), on: {click: go}},
  `on ${node} attempt #${attempt.attempt ?? "?"} ↓`)});
}

export async function runOne(ctx) {
  const {root, who} = ctx;
  const [id] = ctx.args;
  const head = h("div", {});
  const actions = h("div", {class: "actions", testid: "run-actions"});
  const picture = h("div", {class: "panel"});
  const attempts = h("div", {});
  const io = h("div", {class: "split"});
  const stamp = h("span", {class: "live", testid: "run-refreshed"});
  root.append(h("h1", {}, "Run ", h("span", {testid: "run-id"}, id), " ", stamp), head, actions,
    h("h2", {}, "DAG"), picture, io, h("h2", {}, "Attempts"), attempts);
  let plan = null;
  let lastStatus = null;
  const act = (spec) => confirmAction(spec).then((r) => { if (r !== null) ctx.reload(); });

  const render = (run) => {
    const byNode = new Map((run.trace || []).map((t) => [t.node, t]));
    const runErrorNode = run.error && run.error.node;
    replace(head, h("div", {class: "panel", testid: "run"},
      h("p", {}, badge(run.status), " deployment ", link(`#/runs?deployment=${encodeURIComponent(run.deployment_id)}`, run.deployment_id),
        run.trigger && run.trigger.schedule_id ? [" · schedule ", link(`#/schedules/${encodeURIComponent(run.trigger.schedule_id)}`, run.trigger.schedule_id)] : null),
      kv(run, {times: ["created_at", "started_at", "finished_at", "deadline"],
        skip: ["trace", "inputs", "output", "awaiting", "resumes", "checkpoint", "error"]}),
      run.error ? h("div", {testid: "run-error"}, h("h2", {}, "Error"),
        value(errorPointing(run.error, runErrorNode, tracedAttempt(byNode.get(runErrorNode)), attempts))) : null));
    replace(actions);
    if (may(who, "operate") && !TERMINAL.has(run.status)) {
      actions.append(h("button", {type: "button", class: "danger", testid: "action-cancel", on: {click: () => act({
        title: `Cancel ${id}`, method: "workflow.runs.cancel", describe: "Cancel this run; its activities are withdrawn.", danger: true,
        fields: [{name: "reason", label: "Reason (optional)"}],
        params: (v) => ({run_id: id, reason: v.reason || ""})})}}, "Cancel run"));
    }
    if (may(who, "operate") && (run.awaiting || []).length) {
      actions.append(h("button", {type: "button", testid: "action-resume", on: {click: () => act({
        title: `Resume ${id}`, method: "workflow.runs.resume", describe: "Answer the run's interrupt (a JSON value).",
        fields: [{name: "node_id", label: "Interrupt node", value: run.awaiting[0].node},
          {name: "answer", label: "Answer (JSON)", value: "null", multiline: true}],
        params: (v) => ({run_id: id, node_id: v.node_id || null, answer: JSON.parse(v.answer)})})}}, "Resume…"));
    }
    const states = Object.fromEntries((run.trace || []).map((t) => [t.node, t.status]));
    const targets = new Map();
    if (plan) {
      replace(picture, drawDag(plan.nodes, states, (node) => {
        const el = targets.get(node);
        if (el) el.scrollIntoView({block: "start"});
      }), h("div", {class: "legend"}, NODE_STATES.map((st) => badge(st))));
    } else {
      replace(picture, h("p", {class: "muted"}, "The plan could not be read."));
    }
    replace(io,
      h("div", {class: "panel", testid: "inputs"}, h("h2", {}, "Inputs"), json(run.inputs)),
      h("div", {class: "panel", testid: "output"}, h("h2", {}, "Output"), run.output === null || run.output === undefined ? h("p", {class: "muted"}, "none") : json(run.output)),
      h("div", {class: "panel", testid: "interrupts"}, h("h2", {}, "Interrupts"),
        (run.awaiting || []).length ? table(["node", "prompt", "input schema"], run.awaiting.map((a) =>
          h("tr", {}, h("td", {}, a.node), h("td", {}, value(a.prompt)), h("td", {}, json(a.input_schema))))) : h("p", {class: "muted"}, "none waiting"),
        (run.resumes || []).length ? [h("h2", {}, "Answers given"), json(run.resumes)] : null));
    const nodes = plan ? plan.nodes.map((n) => n.id) : [...byNode.keys()];
    replace(attempts, h("div", {class: "panel"}, timeline(run)), nodes.map((node) => {
      const entry = byNode.get(node);
      const section = h("div", {class: "panel", "data-node": node, testid: `node-${node}`},
        h("h2", {}, node, " ", badge(entry ? entry.status : "pending"), " ",
          entry && entry.activity_id ? link(`#/activities/${encodeURIComponent(entry.activity_id)}`, entry.activity_id) : null),
        entry ? kv(entry.error ? {...entry, error: errorPointing(entry.error, node, tracedAttempt(entry), attempts)} : entry,
          {times: ["started_at", "finished_at", "wake_at"], skip: ["attempts", "node", "items"]}) : h("p", {class: "muted"}, "not started"),
        entry ? mapItems(entry) : null,
        entry && (entry.attempts || []).length ? entry.attempts.map((a) =>
          h("div", {class: "attempt", "data-attempt": String(a.attempt ?? "")}, h("strong", {}, `attempt ${a.attempt ?? "?"}`), " ", badge(a.outcome ?? "in progress"),
            kv(a, {times: ATTEMPT_TIMES}))) : null);
      targets.set(node, section);
      return section;
    }));
    stamp.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
  };

  const first = await call("workflow.runs.inspect", {run_id: id});
  if (!ctx.alive()) return;
  try {
    const artifact = await call("workflow.artifacts.get", {artifact_id: first.artifact.artifact_id, version: first.artifact.version});
    plan = artifact.plan;
  } catch (e) {
    plan = null;
  }
  render(first);
  lastStatus = first.status;
  if (TERMINAL.has(lastStatus)) return;
  await ctx.live(async () => {
    const run = await call("workflow.runs.inspect", {run_id: id});
    if (!ctx.alive()) return;
    render(run);
    lastStatus = run.status;
    return !TERMINAL.has(lastStatus);
  });
}
