// The console's entry point: sign-in, hash routing, live refresh.

import {call, onUnauthorized, setToken, token} from "./rpc.js";
import {h, replace} from "./dom.js";
import {overview} from "./overview.js";
import {scheduleList, scheduleOne} from "./schedules.js";
import {runList, runOne} from "./runs.js";
import {activityOne, workerList} from "./workers.js";

const ROUTES = [
  [/^\/?$/, "overview", overview],
  [/^\/schedules$/, "schedules", scheduleList],
  [/^\/schedules\/(.+)$/, "schedules", scheduleOne],
  [/^\/runs$/, "runs", runList],
  [/^\/runs\/(.+)$/, "runs", runOne],
  [/^\/activities\/(.+)$/, "workers", activityOne],
  [/^\/workers$/, "workers", workerList],
];

const REFRESH_MS = 2000;
let generation = 0;
let who = null;

function main() {
  return document.getElementById("main");
}

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query = ""] = raw.split("?", 2);
  return {path, query: new URLSearchParams(query)};
}

async function route() {
  const mine = ++generation;
  const {path, query} = parseHash();
  for (const [pattern, nav, view] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.nav === nav);
    const root = h("div", {class: "view", testid: `view-${nav}`});
    replace(main(), root);
    const ctx = {
      root,
      who,
      query,
      args: m.slice(1).map(decodeURIComponent),
      alive: () => mine === generation,
      /** Run ``fn`` now and every REFRESH_MS while this view is shown (never overlapping),
       * until it returns false. */
      live: async (fn) => {
        const tick = async () => {
          if (mine !== generation) return;
          try {
            if ((await fn()) === false) return; // the view has nothing more to follow
          } catch (e) {
            console.warn("refresh failed", e);
          }
          if (mine === generation) setTimeout(tick, REFRESH_MS);
        };
        await tick();
      },
      reload: () => route(),
    };
    try {
      await view(ctx);
    } catch (e) {
      if (mine === generation) root.appendChild(errorBox(e));
    }
    return;
  }
  replace(main(), h("p", {class: "error"}, "No such page: ", path));
}

export function errorBox(e) {
  return h("div", {class: "panel error", testid: "error"},
    h("strong", {}, e.code || "error"), ": ", e.message || String(e));
}

function showLogin(message) {
  generation++;
  who = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  replace(document.getElementById("who"));
  const input = h("input", {type: "password", name: "token", autocomplete: "off", testid: "token",
    placeholder: "bearer token"});
  const form = h("form", {class: "login", testid: "login"},
    h("h1", {}, "Sign in"),
    h("p", {class: "muted"}, "Paste a wf bearer token. It is kept in this tab's session storage only."),
    message ? h("p", {class: "error", testid: "login-error"}, message) : null,
    input,
    h("button", {type: "submit", testid: "sign-in"}, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    await start();
  });
  replace(main(), form);
  input.focus();
}

async function start() {
  try {
    who = await call("rpc.whoami");
  } catch (e) {
    const had = token();
    setToken(null);
    if (e.code === "unauthorized") showLogin(had ? "That token is not valid." : null);
    else showLogin(`${e.code}: ${e.message}`);
    return;
  }
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = !token();
  const tenants = who.tenants ? ` · tenants ${who.tenants.join(", ")}` : "";
  replace(document.getElementById("who"), h("span", {testid: "who"}, `${who.identity} (${who.role})${tenants}`));
  await route();
}

onUnauthorized(() => {
  if (who !== null) {
    setToken(null);
    showLogin("Your session ended (the token was refused); sign in again.");
  }
});

window.addEventListener("hashchange", () => {
  if (who !== null) route();
});
document.getElementById("logout").addEventListener("click", () => {
  setToken(null);
  showLogin(null);
});
start();
