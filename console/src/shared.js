// What the console's parts share: the page's state, the sending side of
// its link to the node (send, request; app.js connects and reads), the
// token's header, `$` and the buttons they make.
import { encode } from "@msgpack/msgpack";

export const $ = (id) => document.getElementById(id);
export const state = {
  token: sessionStorage.getItem("termesh.token"),
  ws: null,
  nextId: 1,
  waiting: new Map(), // request id -> resolve
  streams: new Map(), // request id -> handler of each answer (grep)
  sessions: new Map(), // id -> SessionInfo
  terms: new Map(), // session id -> Term
  role: "viewer",
  authRequired: true,
  lastHeard: 0,
  backoff: 100,
  // Quick retries left while the node restarts (it closed with 1001).
  restartTries: 0,
  notified: [], // the browser notifications shown (for the tests)
  // Logged in and the session list loaded on this link (app.js).
  ready: false,
  // The terminal shown (term.js).
  active: null,
  // From the node's welcome: its keepalive interval and its name.
  pingMs: null,
  node: null,
};
// For the browser tests and a curious operator's devtools.
window.termesh = state;

// ---- the connection's sending side --------------------------------------

export function send(msg) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) {
    state.ws.send(encode(msg));
    return true;
  }
  return false;
}

export function request(msg) {
  const id = state.nextId++;
  return new Promise((resolve) => {
    state.waiting.set(id, resolve);
    if (!send({ ...msg, id })) {
      state.waiting.delete(id);
      resolve({ t: "error", code: "unavailable", message: "not connected" });
    }
  });
}

export function auth() {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

export function button(label, onClick, operator = true) {
  const b = document.createElement("button");
  b.textContent = label;
  if (operator) b.className = "operator";
  b.addEventListener("click", onClick);
  return b;
}
