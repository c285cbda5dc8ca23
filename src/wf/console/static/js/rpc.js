// JSON-RPC over fetch with the bearer token the operator signed in with. The token
// lives in sessionStorage (this tab only); no cookie is ever used, so a request from
// another site carries no credential (no CSRF).

const TOKEN_KEY = "wf.console.token";
let nextId = 1;
let unauthorized = () => {};

export class RpcError extends Error {
  constructor(error, status) {
    super(error.message || "error");
    this.rpcCode = error.code;
    const data = error.data || {};
    this.code = data.code || String(error.code);
    this.details = data.details || {};
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function onUnauthorized(fn) {
  unauthorized = fn;
}

/** Call ``method``; resolves to its result or rejects with an RpcError. */
export async function call(method, params = {}) {
  const headers = {"Content-Type": "application/json", Accept: "application/json"};
  const current = token();
  if (current) headers.Authorization = `Bearer ${current}`;
  const response = await fetch("/rpc", {
    method: "POST",
    headers,
    body: JSON.stringify({jsonrpc: "2.0", id: nextId++, method, params}),
    credentials: "omit",
    cache: "no-store",
  });
  let body;
  try {
    body = await response.json();
  } catch (e) {
    throw new RpcError({code: -1, message: `HTTP ${response.status}`, data: {code: "http_error"}}, response.status);
  }
  if (body.error) {
    const error = new RpcError(body.error, response.status);
    if (response.status === 401) unauthorized(error);
    throw error;
  }
  return body.result;
}
