// Actions: every one asks for confirmation, then shows the server's answer (its
// result, or its typed error: code, message and details) before the dialog closes.

import {call} from "./rpc.js";
import {h, json, replace} from "./dom.js";

function dialogParts() {
  return {
    dialog: document.getElementById("dialog"),
    title: document.getElementById("dialog-title"),
    body: document.getElementById("dialog-body"),
    buttons: document.getElementById("dialog-buttons"),
  };
}

/** The server's answer as the dialog shows it. */
export function answer(result, error) {
  if (error) {
    return h("div", {class: "answer refused", testid: "answer"},
      h("p", {}, "Refused: ", h("strong", {testid: "answer-code"}, error.code)),
      h("p", {testid: "answer-message"}, error.message),
      Object.keys(error.details || {}).length ? json(error.details) : null);
  }
  return h("div", {class: "answer ok", testid: "answer"},
    h("p", {}, h("strong", {testid: "answer-code"}, "ok")), json(result));
}

/**
 * Ask, call, show the answer. ``fields`` are inputs shown in the dialog; ``params``
 * builds the call's parameters from their values. Resolves once the dialog closes
 * (to the result, or null when cancelled or refused).
 */
export function confirmAction({title, method, describe, fields = [], params, danger = false}) {
  const {dialog, title: titleEl, body, buttons} = dialogParts();
  return new Promise((resolve) => {
    let outcome = null;
    const inputs = fields.map((f) => {
      const input = f.multiline
        ? h("textarea", {name: f.name, rows: 4, testid: `field-${f.name}`, value: f.value ?? ""})
        : h("input", {name: f.name, type: "text", testid: `field-${f.name}`, value: f.value ?? ""});
      if (f.multiline) input.value = f.value ?? "";
      return {f, input};
    });
    replace(titleEl, title);
    replace(body,
      h("p", {}, describe),
      h("p", {class: "muted"}, "JSON-RPC method ", h("code", {}, method)),
      inputs.map(({f, input}) => h("label", {}, f.label, input)),
      h("div", {id: "dialog-answer"}));
    const close = h("button", {type: "button", class: "secondary", testid: "dialog-close",
      on: {click: () => dialog.close()}}, "Cancel");
    const confirm = h("button", {type: "button", class: danger ? "danger" : "", testid: "dialog-confirm",
      on: {click: async () => {
        confirm.disabled = true;
        const values = Object.fromEntries(inputs.map(({f, input}) => [f.name, input.value]));
        let result = null;
        let error = null;
        try {
          result = await call(method, params(values));
          outcome = result;
        } catch (e) {
          error = e instanceof Error ? e : new Error(String(e));
          if (!error.code) error.code = "invalid_input";
        }
        replace(document.getElementById("dialog-answer"), answer(result, error));
        confirm.remove();
        close.textContent = "Close";
      }}}, "Confirm");
    replace(buttons, close, confirm);
    const done = () => {
      dialog.removeEventListener("close", done);
      resolve(outcome);
    };
    dialog.addEventListener("close", done);
    dialog.showModal();
  });
}

export const OPERATE_ROLES = new Set(["admin", "operator"]);

/** Whether the signed-in role may call methods of ``access`` (the server decides anyway). */
export function may(who, access) {
  if (!who) return false;
  if (access === "read") return who.role !== "worker";
  if (access === "operate") return OPERATE_ROLES.has(who.role);
  if (access === "worker") return who.role === "admin";
  return who.role === "admin";
}
