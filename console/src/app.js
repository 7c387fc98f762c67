// The termesh operator console: log in with a token (kept in this browser
// session only), the link to the node (reconnects, a stale mark driven by
// `ping`), the cluster's nodes, every session live through `watch` with
// its actions, the create and search (`grep`) forms, and who needs you:
// waiting sessions first with their question and an inline answer
// (`send`), a browser notification when one starts to wait,
// `#/session/ID` opens a session. Terminals are term.js's; what the parts
// share (state, sending, buttons) is shared.js's.
import { decode } from "@msgpack/msgpack";
import { $, state, send, request, auth, button } from "./shared.js";
import { openTerm } from "./term.js";

// ---- connection -------------------------------------------------------

function setLink(text, cls) {
  const b = $("link");
  b.textContent = text;
  b.className = `badge ${cls}`;
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${proto}://${location.host}/ws`, "termesh.v1");
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  setLink("connecting", "stale");
  ws.onmessage = (ev) => onMessage(decode(new Uint8Array(ev.data)));
  ws.onclose = (ev) => {
    // The node is going away (a restart, an upgrade): come back as soon
    // as it serves, every 50-100 ms for about 20 s (as `termesh attach`).
    if (ev.code === 1001) state.restartTries = 270;
    // Not logged in and closed for it: wait for the login form.
    lost(ws, !(ev.code === 4401 && !state.token));
  };
}

// The link `ws` is gone (closed, or given up on): fail what waits on it
// and, unless told not to, connect again after a jittered backoff.
function lost(ws, again = true) {
  if (state.ws !== ws) return;
  state.ws = null;
  state.ready = false;
  for (const [, resolve] of state.waiting) resolve({ t: "error", code: "unavailable", message: "link lost" });
  state.waiting.clear();
  setLink("offline", "down");
  if (!again) return;
  let delay;
  if (state.restartTries > 0) {
    state.restartTries--;
    delay = 100 * (0.5 + Math.random() / 2);
  } else {
    delay = state.backoff * (0.5 + Math.random() / 2);
    state.backoff = Math.min(state.backoff * 2, 8000);
  }
  setTimeout(connect, delay);
}

async function onWelcome() {
  if (state.authRequired) {
    if (!state.token) {
      showLogin("");
      return;
    }
    const ok = await request({ t: "auth", token: state.token });
    // The link dropped meanwhile: the next connection tries again.
    if (ok.t === "error" && ok.code === "unavailable") return;
    if (ok.t !== "ok") {
      logout(ok.message || "the token was refused");
      return;
    }
  }
  state.backoff = 100;
  state.restartTries = 0;
  setLink("up", "up");
  $("login").hidden = true;
  $("main").hidden = false;
  $("logout").hidden = false;
  // Every open terminal resumes where it stopped, first (no clear, and
  // no wait for the role and the list).
  for (const term of state.terms.values()) term.subscribe();
  await probeRole();
  // Watch first, then list, on one connection (handled in order): no
  // session created between the two is missed.
  const watching = request({ t: "watch" });
  const list = await request({ t: "list" });
  if (list.t === "sessions") {
    const now = Date.now();
    state.sessions = new Map(list.sessions.map((s) => [s.id, { ...s, heard_at: now }]));
    renderSessions();
  }
  await watching;
  state.ready = true;
  refreshNodes();
  refreshPreviews();
  route();
}

// A viewer may not resize: the answer for a session that does not exist
// tells the role without touching anything.
async function probeRole() {
  if (!state.authRequired) {
    // A node without tokens serves everyone as admin.
    state.role = "admin";
    document.body.classList.remove("viewer");
    $("who").textContent = "admin (no tokens configured)";
    return;
  }
  send({ t: "resize", session: "-role-probe-", cols: 80, rows: 24 });
  const nodes = await fetch("/api/v1/nodes", { headers: auth() }).catch(() => null);
  if (nodes && nodes.ok) state.role = "admin";
  $("who").textContent = state.role;
}

function onMessage(m) {
  state.lastHeard = Date.now();
  if (m.t === "welcome") {
    state.pingMs = m.ping_interval_ms;
    state.authRequired = m.auth_required;
    state.node = m.node;
    onWelcome();
    return;
  }
  if (m.t === "error" && m.session === "-role-probe-") {
    if (m.code === "not_found" && state.role !== "admin") state.role = "operator";
    document.body.classList.toggle("viewer", m.code === "forbidden");
    $("who").textContent = m.code === "forbidden" ? "viewer" : state.role;
    return;
  }
  if (m.id !== undefined && m.id !== null && state.streams.has(m.id)) {
    state.streams.get(m.id)(m);
    if (m.t !== "grep_hits") state.streams.delete(m.id);
    return;
  }
  if (m.id !== undefined && m.id !== null && state.waiting.has(m.id) && m.t !== "snapshot") {
    state.waiting.get(m.id)(m);
    state.waiting.delete(m.id);
    return;
  }
  if (m.t === "session_changed") {
    const before = state.sessions.get(m.session.id);
    state.sessions.set(m.session.id, { ...m.session, heard_at: Date.now() });
    if (isWaiting(m.session) && !(before && isWaiting(before))) notifyWaiting(m.session);
    renderSessions();
  } else if (m.t === "session_removed") {
    state.sessions.delete(m.session);
    renderSessions();
    const term = state.terms.get(m.session);
    if (term) term.note("session removed");
  } else if (m.session && state.terms.has(m.session)) {
    state.terms.get(m.session).onMessage(m);
  }
}

// Liveness: a quiet link is probed; one silent past two probes is marked.
setInterval(() => {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return;
  const quiet = Date.now() - state.lastHeard;
  if (quiet > 5000) send({ t: "ping" });
  if (quiet > 12000) setLink(`stale ${Math.round(quiet / 1000)}s`, "stale");
  else if ($("link").textContent.startsWith("stale")) setLink("up", "up");
  // Given up: a dead TCP link may take minutes to report its close, so
  // the page stops waiting for it and connects anew at once.
  if (quiet > 30000) {
    const ws = state.ws;
    lost(ws);
    ws.close();
  }
}, 2500);

// ---- login ------------------------------------------------------------

function showLogin(why) {
  $("main").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why || "";
  $("token").focus();
}

function logout(why) {
  state.token = null;
  sessionStorage.removeItem("termesh.token");
  for (const term of [...state.terms.values()]) term.close();
  const ws = state.ws;
  state.ws = null;
  if (ws) ws.close();
  setLink("offline", "down");
  showLogin(why);
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.token = $("token").value.trim();
  $("token").value = "";
  sessionStorage.setItem("termesh.token", state.token);
  // The welcome has come already on an open link: log in on it.
  if (state.ws && state.ws.readyState === WebSocket.OPEN) onWelcome();
  else connect();
});
$("logout").addEventListener("click", () => logout());

// ---- cluster and sessions -----------------------------------------------

async function refreshNodes() {
  if (!state.ready) return;
  const resp = await fetch("/api/v1/nodes", { headers: auth() }).catch(() => null);
  $("cluster").hidden = !resp || !resp.ok;
  if (!resp || !resp.ok) return;
  const nodes = await resp.json();
  const body = $("nodes").tBodies[0];
  body.replaceChildren(
    ...nodes.map((n) => {
      const tr = row([
        n.name + (n.self ? " *" : ""),
        n.state,
        n.rtt_ms == null ? "-" : `${n.rtt_ms.toFixed(2)} ms`,
        n.breaker,
        `${n.stall_ms} ms`,
        n.sessions,
      ]);
      tr.cells[1].classList.toggle("bad", n.state !== "up");
      tr.cells[3].classList.toggle("bad", n.breaker !== "closed");
      return tr;
    }),
  );
}
setInterval(refreshNodes, 2000);

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.append(c);
    else td.textContent = String(c);
    tr.append(td);
  }
  return tr;
}

// A session's action buttons are made once and kept across redraws: a
// click never lands on a button that a redraw has just replaced.
const actionsOf = new Map(); // session id -> <span> of buttons

// A refusal says why (reviving a running session) in a bar at the top
// for a while, without blocking the page as an alert would. A request the
// link lost on its way (the node restarting) says so and to try again.
let noticeTimer = null;
function notice(text) {
  const bar = $("notice");
  bar.textContent = text;
  bar.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { bar.hidden = true; }, 8000);
}

function refused(reply) {
  if (reply.t !== "error") return false;
  notice(reply.code === "unavailable" ? `not done: ${reply.message}; try again once the link is up` : reply.message);
  return true;
}

async function act(msg) {
  refused(await request(msg));
}

function actions(id) {
  let span = actionsOf.get(id);
  if (span) return span;
  const info = () => state.sessions.get(id) || { id };
  span = document.createElement("span");
  span.className = "acts";
  // On a phone the actions other than open sit behind a menu button.
  const more = document.createElement("span");
  more.className = "more";
  const menu = button("\u22ef", () => span.classList.toggle("open"), false);
  menu.className = "menu";
  menu.title = "actions";
  menu.setAttribute("aria-label", "actions");
  span.append(button("open", () => openTerm(id), false), menu, more);
  // A choice closes the menu.
  more.addEventListener("click", () => span.classList.remove("open"));
  more.append(
    button("kill", () => act({ t: "kill", session: id })),
    button("rename", () => {
      const name = prompt("name", info().name || "");
      if (name) act({ t: "rename", session: id, name });
    }),
    button("tag", () => {
      const tags = prompt("tags (comma separated)", (info().tags || []).join(","));
      if (tags !== null) act({ t: "tag", session: id, tags: tags.split(",").map((t) => t.trim()).filter(Boolean) });
    }),
    button("revive", () => act({ t: "revive", session: id })),
    button("remove", () => confirm(`remove ${info().name || id}?`) && act({ t: "remove", session: id })),
  );
  actionsOf.set(id, span);
  return span;
}

// Idle time as of now: the node's figure plus the time since it came.
function idle(s) {
  const ms = s.status === "running" ? s.idle_ms + (Date.now() - s.heard_at) : s.idle_ms;
  const secs = Math.round(ms / 1000);
  return secs < 120 ? `${secs}s` : secs < 7200 ? `${Math.round(secs / 60)}m` : `${Math.round(secs / 3600)}h`;
}
setInterval(() => {
  for (const tr of $("sessions").tBodies[0].rows) {
    const s = state.sessions.get(tr.dataset.session);
    if (s && tr.dataset.session) tr.cells[5].textContent = idle(s);
  }
}, 5000);

// The name (or id), and under it the session's last line of output.
function nameCell(s) {
  const cell = document.createElement("div");
  const name = document.createElement("div");
  name.textContent = s.name ? `${s.name} (${s.id})` : s.id;
  const preview = document.createElement("div");
  preview.className = "preview";
  preview.textContent = (previewOf.get(s.id) || {}).line || "";
  cell.append(name, preview);
  return cell;
}

// Last lines for the list: `read` of a session's last few frames, for the
// sessions whose output moved on since, eight per pass, one at a time (a
// read takes one of the connection's few reply slots).
const previewOf = new Map(); // session id -> { seq, line, at }
const PREVIEWS_PER_PASS = 8;
// A session whose read was refused (busy, unreachable) waits this long.
const PREVIEW_RETRY_MS = 30000;
let previewing = false;
async function refreshPreviews() {
  if (!state.ready || previewing) return;
  previewing = true;
  const now = Date.now();
  const known = (s) => previewOf.get(s.id) || { seq: -1, at: 0 };
  // The longest unrefreshed first, so that none waits behind the others.
  const stale = [...state.sessions.values()]
    .filter((s) => s.last_seq > 0 && known(s).seq !== s.last_seq && now - known(s).at >= (known(s).failed ? PREVIEW_RETRY_MS : 0))
    .sort((a, b) => known(a).at - known(b).at)
    .slice(0, PREVIEWS_PER_PASS);
  let changed = false;
  for (const s of stale) {
    const reply = await request({ t: "read", session: s.id, since_seq: Math.max(0, s.last_seq - 3), max_bytes: 4096 });
    if (reply.t !== "text") {
      previewOf.set(s.id, { ...known(s), at: Date.now(), failed: true });
      continue;
    }
    const lines = reply.text.split("\n").map((l) => l.trim()).filter(Boolean);
    previewOf.set(s.id, { seq: s.last_seq, line: (lines[lines.length - 1] || "").slice(0, 160), at: Date.now() });
    changed = true;
  }
  previewing = false;
  for (const id of previewOf.keys()) if (!state.sessions.has(id)) previewOf.delete(id);
  if (changed) renderSessions();
}
setInterval(refreshPreviews, 3000);

function isWaiting(s) {
  return s.status === "running" && s.state === "waiting";
}

// Waiting sessions first, the longest waiting on top; then the others,
// oldest first. A waiting one has a row under it with its question and
// an answer box.
function renderSessions() {
  const body = $("sessions").tBodies[0];
  const rank = (s) => (isWaiting(s) ? [0, s.state_since || 0] : [1, s.created_at]);
  const list = [...state.sessions.values()].sort((a, b) => {
    const [x, y] = [rank(a), rank(b)];
    return x[0] - y[0] || x[1] - y[1];
  });
  for (const id of actionsOf.keys()) if (!state.sessions.has(id)) actionsOf.delete(id);
  for (const id of answerOf.keys()) if (!isWaiting(state.sessions.get(id) || {})) answerOf.delete(id);
  const rows = [];
  for (const s of list) {
    const status = s.status === "exited" ? `exit ${s.exit_code}` : s.status;
    const tr = row([nameCell(s), s.state || "-", s.node, status, s.phase || "-", idle(s), s.viewers, (s.tags || []).join(" "), actions(s.id)]);
    tr.dataset.session = s.id;
    tr.cells[3].classList.toggle("bad", s.status === "unreachable" || s.status === "lost");
    tr.classList.toggle("waiting", isWaiting(s));
    rows.push(tr);
    if (isWaiting(s)) rows.push(askRow(s));
  }
  // Taking a focused answer box out of the page, even to put it straight
  // back, drops its focus (and a phone's keyboard with it, the next keys
  // going nowhere): it gets its focus and caret back.
  const focused = document.activeElement;
  const caret = focused instanceof HTMLInputElement ? [focused.selectionStart, focused.selectionEnd] : null;
  body.replaceChildren(...rows);
  if (focused && focused.isConnected && document.activeElement !== focused) {
    focused.focus({ preventScroll: true });
    if (caret) focused.setSelectionRange(...caret);
  }
  const waiting = list.filter(isWaiting).length;
  $("attention").hidden = waiting === 0;
  $("waiting-count").textContent = `${waiting} waiting for you`;
  $("notify-me").hidden = !("Notification" in window) || Notification.permission !== "default";
  document.title = waiting ? `(${waiting}) termesh console` : "termesh console";
}

// ---- who needs you ------------------------------------------------------

// A waiting session's question and answer box, kept across redraws (what
// is typed in it stays).
const answerOf = new Map(); // session id -> { tr, question }

function askRow(s) {
  let a = answerOf.get(s.id);
  if (!a) {
    const tr = document.createElement("tr");
    tr.className = "ask";
    tr.dataset.ask = s.id;
    const td = document.createElement("td");
    td.colSpan = 9;
    const question = document.createElement("span");
    question.className = "question";
    const form = document.createElement("form");
    form.className = "operator";
    const input = document.createElement("input");
    input.placeholder = "answer";
    input.setAttribute("aria-label", "answer");
    const submit = document.createElement("button");
    submit.textContent = "send";
    form.append(input, submit);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      answer(s.id, input.value, input);
    });
    const keys = document.createElement("span");
    td.append(question, form, keys);
    tr.append(td);
    a = { tr, question, keys, input };
    answerOf.set(s.id, a);
  }
  a.question.textContent = `\u00bb ${s.waiting_for || "waiting"}`;
  // One-key answers for a yes/no question.
  const yesNo = /[[(]\s*y(es)?\s*\/\s*n(o)?\s*[\])]/i.test(s.waiting_for || "");
  if (yesNo && !a.keys.childElementCount) {
    for (const key of ["y", "n"]) a.keys.append(button(key, () => answer(s.id, key)));
  }
  a.keys.hidden = !yesNo;
  return a.tr;
}

async function answer(session, text, input) {
  const reply = await request({ t: "send", session, text });
  if (!refused(reply) && input) input.value = "";
}

// Asked once, on a click (browsers allow the question only then).
$("notify-me").addEventListener("click", async () => {
  await Notification.requestPermission();
  renderSessions();
});

function notifyWaiting(s) {
  const title = `${s.name || s.id} on ${s.node} is waiting`;
  state.notified.push({ session: s.id, title, body: s.waiting_for || "" });
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  const n = new Notification(title, { body: s.waiting_for || "", tag: s.id });
  n.onclick = () => {
    window.focus();
    location.hash = `#/session/${s.id}`;
  };
}

// `#/session/ID` (a notification's link) opens that session.
function route() {
  const m = /^#\/session\/([^/]+)$/.exec(location.hash);
  if (m && state.ready && state.sessions.has(m[1])) openTerm(m[1]);
}
window.addEventListener("hashchange", route);

$("create").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const req = { t: "create" };
  const command = f.get("command").trim();
  if (command) req.command = ["sh", "-c", command];
  for (const k of ["node", "cwd", "name"]) if (f.get(k).trim()) req[k] = f.get(k).trim();
  const reply = await request(req);
  if (!refused(reply)) ev.target.reset();
});

// ---- search ---------------------------------------------------------------

// `grep` over every session's stored output in the cluster: each node's
// hits are listed as they come; a hit opens its session.
$("search").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const pattern = new FormData(ev.target).get("pattern").trim();
  const list = $("hits");
  const status = $("search-status");
  list.replaceChildren();
  list.hidden = !pattern;
  if (!pattern) return;
  const id = state.nextId++;
  let shown = 0;
  status.textContent = "searching…";
  state.streams.set(id, (m) => {
    if (m.t === "grep_hits") {
      for (const h of m.hits) {
        const li = document.createElement("li");
        li.dataset.session = h.session;
        li.dataset.seq = h.seq;
        const s = state.sessions.get(h.session);
        const a = document.createElement("a");
        a.href = `#/session/${h.session}`;
        a.textContent = `${(s && s.name) || h.session}@${h.node}`;
        const line = document.createElement("code");
        line.textContent = h.line;
        li.append(a, " ", line);
        list.append(li);
        shown++;
      }
    } else if (m.t === "grep_done") {
      const more = m.truncated ? " (stopped early: narrow the search)" : "";
      const failed = m.errors.length ? `; ${m.errors.join("; ")}` : "";
      status.textContent = `${shown} hit${shown === 1 ? "" : "s"} in ${(m.scanned_bytes / 1e6).toFixed(1)} MB${more}${failed}`;
    } else {
      status.textContent = m.message || m.t;
    }
  });
  if (!send({ t: "grep", id, pattern, max_hits: 200 })) {
    state.streams.delete(id);
    status.textContent = "not connected";
  }
});

// ---- start ----------------------------------------------------------------

connect();
