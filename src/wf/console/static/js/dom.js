// DOM helpers. Every value reaches the page through createElement and textContent
// (never by parsing markup), so data from the server is always shown as text.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent, child) {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) {
    for (const c of child) append(parent, c);
  } else if (child instanceof Node) {
    parent.appendChild(child);
  } else {
    parent.appendChild(document.createTextNode(String(child)));
  }
}

function apply(el, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.setAttribute("class", value);
    else if (key === "text") el.textContent = String(value);
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
    else if (key === "testid") el.setAttribute("data-testid", value);
    else if (key === "value") el.value = value;
    else if (key === "checked" || key === "disabled" || key === "hidden") el[key] = Boolean(value);
    else el.setAttribute(key, String(value));
  }
}

/** An HTML element: h("td", {class: "num"}, "42"). Strings become text nodes. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  apply(el, props);
  append(el, children);
  return el;
}

/** An SVG element (attributes set one by one; no markup is parsed). */
export function s(tag, props, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, props);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

function pad(n, width = 2) {
  return String(n).padStart(width, "0");
}

/** Epoch seconds as ``2026-12-01 09:49:00.123Z`` (UTC). */
export function time(epoch) {
  if (epoch === null || epoch === undefined) return "—";
  const d = new Date(epoch * 1000);
  if (Number.isNaN(d.getTime())) return String(epoch);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.` +
    `${pad(d.getUTCMilliseconds(), 3)}Z`;
}

/** An ISO instant in a named time zone (what a schedule's zone shows). */
export function inZone(iso, zone) {
  if (!iso) return "—";
  try {
    const f = new Intl.DateTimeFormat("sv-SE", {
      timeZone: zone || "UTC", year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
    });
    return `${f.format(new Date(iso))} ${zone || "UTC"}`;
  } catch (e) {
    return `${iso} (${zone})`;
  }
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  if (seconds < 1) return `${(seconds * 1000).toFixed(1)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

export function json(value) {
  return h("pre", {class: "json"}, JSON.stringify(value, null, 2));
}

export function badge(status) {
  const text = status === null || status === undefined ? "—" : String(status);
  return h("span", {class: `badge st-${text.replace(/[^a-z_]/gi, "")}`}, text);
}

function flat(v) {
  return v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length > 0 &&
    Object.values(v).every((x) => x === null || typeof x !== "object");
}

/** A value as text: scalars as they are, a flat object as a nested table (so a stack
 * trace reads as lines), other objects as JSON, long text in a <pre>; an element the
 * console built itself (never one from the server: they send JSON) as it is. */
export function value(v) {
  if (v === null || v === undefined) return "—";
  if (v instanceof Node) return v;
  if (flat(v)) return kv(v);
  if (typeof v === "object") return json(v);
  const text = String(v);
  return text.includes("\n") || text.length > 120 ? h("pre", {}, text) : text;
}

/** A key/value table of every field of ``obj`` (fields shown generically, as text). */
export function kv(obj, {times = [], skip = []} = {}) {
  const rows = [];
  for (const [key, v] of Object.entries(obj || {})) {
    if (skip.includes(key)) continue;
    const shown = times.includes(key) && typeof v === "number" ? time(v) : value(v);
    rows.push(h("tr", {}, h("th", {}, key), h("td", {"data-field": key}, shown)));
  }
  return h("table", {class: "kv"}, h("tbody", {}, rows));
}

export function table(headers, rows, {testid} = {}) {
  return h("table", {testid},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {class: x.endsWith("#") ? "num" : ""}, x.replace(/#$/, ""))))),
    h("tbody", {}, rows));
}

export function link(href, text) {
  return h("a", {href}, text);
}

/** A hash for ``path`` with the non-empty entries of ``query``. */
export function withQuery(path, query) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const text = q.toString();
  return `#${path}${text ? `?${text}` : ""}`;
}
