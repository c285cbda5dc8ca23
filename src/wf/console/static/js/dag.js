// A run's DAG drawn as SVG from its plan: nodes in layers by their longest path from a
// source, edges from ``needs`` and from every {"$node": ...} reference; each node is
// coloured by its state in the run's trace. No layout library: plans are small and
// layered drawing is enough to read them.

import {s} from "./dom.js";

const BOX_W = 160;
const BOX_H = 38;
const GAP_X = 70;
const GAP_Y = 22;
const PAD = 12;

function references(value, found) {
  if (Array.isArray(value)) {
    for (const v of value) references(v, found);
  } else if (value && typeof value === "object") {
    if (typeof value.$node === "string") found.add(value.$node);
    for (const v of Object.values(value)) references(v, found);
  }
  return found;
}

/** Edges (from, to) of a plan's nodes. */
export function edgesOf(nodes) {
  const ids = new Set(nodes.map((n) => n.id));
  const edges = [];
  for (const node of nodes) {
    const deps = new Set(Array.isArray(node.needs) ? node.needs : []);
    references(node, deps);
    deps.delete(node.id);
    for (const d of deps) if (ids.has(d)) edges.push([d, node.id]);
  }
  return edges;
}

function layers(nodes, edges) {
  const incoming = new Map(nodes.map((n) => [n.id, []]));
  for (const [a, b] of edges) incoming.get(b).push(a);
  const depth = new Map();
  const visiting = new Set();
  const measure = (id) => {
    if (depth.has(id)) return depth.get(id);
    if (visiting.has(id)) return 0; // a cycle cannot be stored; stay finite anyway
    visiting.add(id);
    const d = Math.max(-1, ...incoming.get(id).map(measure)) + 1;
    visiting.delete(id);
    depth.set(id, d);
    return d;
  };
  for (const n of nodes) measure(n.id);
  return depth;
}

function short(text, max = 22) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * The SVG picture. ``states`` maps node id to its status; ``onPick(id)`` runs when a
 * node is clicked.
 */
export function drawDag(nodes, states, onPick) {
  const edges = edgesOf(nodes);
  const depth = layers(nodes, edges);
  const columns = [];
  for (const n of nodes) {
    const d = depth.get(n.id);
    (columns[d] ||= []).push(n);
  }
  const pos = new Map();
  columns.forEach((col, x) => col.forEach((n, y) => pos.set(n.id, {
    x: PAD + x * (BOX_W + GAP_X), y: PAD + y * (BOX_H + GAP_Y)})));
  const width = PAD * 2 + Math.max(1, columns.length) * (BOX_W + GAP_X) - GAP_X;
  const height = PAD * 2 + Math.max(1, ...columns.map((c) => c.length)) * (BOX_H + GAP_Y) - GAP_Y;
  const svg = s("svg", {class: "dag", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "run DAG", "data-testid": "dag"});
  const defs = s("defs", {}, s("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"}, s("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa3ad"})));
  svg.appendChild(defs);
  for (const [a, b] of edges) {
    const p = pos.get(a);
    const q = pos.get(b);
    const x1 = p.x + BOX_W;
    const y1 = p.y + BOX_H / 2;
    const x2 = q.x;
    const y2 = q.y + BOX_H / 2;
    const mid = (x1 + x2) / 2;
    svg.appendChild(s("path", {class: "edge", d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`,
      "marker-end": "url(#arrow)", "data-edge": `${a}->${b}`}));
  }
  for (const n of nodes) {
    const {x, y} = pos.get(n.id);
    const status = states[n.id] || "pending";
    const g = s("g", {class: `node st-${String(status).replace(/[^a-z_]/gi, "")}`, "data-node": n.id,
      "data-status": status, transform: `translate(${x} ${y})`},
      s("title", {}, `${n.id} (${n.kind}): ${status}`),
      s("rect", {width: BOX_W, height: BOX_H, rx: 6}),
      s("text", {x: 8, y: 16}, short(n.id)),
      s("text", {x: 8, y: 31, class: "muted"}, short(`${n.kind} · ${status}`)));
    g.addEventListener("click", () => onPick(n.id));
    svg.appendChild(g);
  }
  return svg;
}

export const NODE_STATES = ["pending", "submitted", "waiting", "awaiting_input", "completed", "skipped", "failed", "cancelled"];
