// A session's terminal in the console: xterm.js on the WebSocket protocol
// (docs/protocol.md): a fresh attach with scrollback, resume with
// `from_seq` on every reconnect (no clear), `resync_required` -> reset +
// snapshot, acks after xterm has rendered what it was given, the
// session's size followed and taken (docs/cli.md, "Sizes"), a row of
// keys a phone keyboard lacks; its events over SSE.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { WebLinksAddon } from "@xterm/addon-web-links";
import { $, state, send, request, auth, button } from "./shared.js";

// Each subscription's credit window (bytes): acked a quarter at a time,
// once xterm has rendered it.
const WINDOW = 1 << 20;

export class Term {
  constructor(session) {
    this.session = session;
    this.lastSeq = null; // null: never shown, so the first subscribe is fresh
    this.unacked = 0;
    this.resetNext = false;
    this.resyncs = 0; // resets after the first screen: each one a resync
    this.eventIds = []; // of the events shown, in order
    this.shownSeq = null; // the last seq xterm has drawn
    this.size = null; // the session's size, as it last said ({cols, rows})
    this.asked = null; // the size this page last gave the session ("CxR")
    this.pane = document.createElement("div");
    this.pane.className = "pane";
    const el = document.createElement("div");
    el.className = "term";
    this.el = el;
    this.events = document.createElement("div");
    this.events.className = "events";
    this.pane.append(this.sizeBar(), el, this.keyRow(), this.events);
    $("panes").append(this.pane);
    const info = state.sessions.get(session);
    this.tab = button((info && info.name) || session, () => show(this), false);
    this.tab.append(button("×", (e) => { e.stopPropagation(); this.close(); }, false));
    $("tabs").append(this.tab);
    const viewer = state.role === "viewer";
    this.xterm = new Terminal({ scrollback: 10000, convertEol: false, disableStdin: viewer });
    this.fit = new FitAddon();
    this.xterm.loadAddon(this.fit);
    this.xterm.loadAddon(new WebLinksAddon());
    this.xterm.open(el);
    // The view follows the cursor until a person scrolls away from it.
    this.follow = true;
    this.scrolledAt = -Infinity;
    for (const kind of ["wheel", "touchmove", "pointermove"]) {
      el.addEventListener(kind, (e) => {
        // A pointer moves the view only while held (the scrollbar dragged,
        // a selection past the edge).
        if (kind !== "pointermove" || e.buttons) this.scrolledAt = performance.now();
      }, { passive: true });
    }
    this.xterm.onScroll(() => this.keepFollowing());
    this.xterm.onRender(() => this.keepFollowing());
    // The terminal's element takes a new size a render after a resize:
    // the pane's scroll to the cursor is measured then.
    this.screenEl = this.xterm.element.querySelector(".xterm-screen");
    this.proposed = null; // the size this pane would give ({cols, rows})
    this.overflows = false; // the terminal is larger than its pane
    new ResizeObserver(() => {
      this.measure();
      if (this.follow) this.paneToCursor();
    }).observe(this.xterm.element);
    this.ctrl = false;
    this.xterm.onData((d) => {
      // A person's keys take the size; xterm's own answers to the
      // program's queries come through here too, and do not.
      if (performance.now() - this.keyAt < 1000) this.takeSize();
      if (this.ctrl && d.length === 1) {
        // Ctrl from the key row: the next key as its control character.
        d = String.fromCharCode(d.toUpperCase().charCodeAt(0) & 0x1f);
        this.setCtrl(false);
      }
      this.type(d);
    });
    // Keys and pastes a person makes (marked here, acted on in onData: a
    // key that types nothing, Shift or a copy, takes nothing).
    this.keyAt = -Infinity;
    this.xterm.attachCustomKeyEventHandler((e) => {
      if (e.type !== "keydown") return true;
      this.keyAt = performance.now();
      // Shift with Page Up or Down scrolls the view (xterm sends Shift
      // with Home or End to the program); a key that types brings the view
      // to the cursor (and a resize the typing takes may move it, which is
      // not the person's doing).
      if (e.shiftKey && (e.key === "PageUp" || e.key === "PageDown")) this.scrolledAt = this.keyAt;
      return true;
    });
    this.xterm.textarea.addEventListener("paste", () => { this.keyAt = performance.now(); });
    // Layout settles over a few frames (a scrollbar comes and goes): look
    // once it has.
    let pending = null;
    new ResizeObserver(() => {
      clearTimeout(pending);
      pending = setTimeout(() => this.relayout(), 150);
    }).observe(el);
    this.eventStream = new EventStream(session, (e) => this.showEvent(e));
  }

  type(d) {
    if (state.role !== "viewer") send({ t: "input", session: this.session, data: new TextEncoder().encode(d) });
  }

  // The session's size and who gave it, and the button that takes it.
  sizeBar() {
    const bar = document.createElement("div");
    bar.className = "size-bar";
    this.sizeLabel = document.createElement("span");
    const take = button("fit here", () => {
      this.takeSize();
      this.xterm.focus();
    }, false);
    take.className = "operator";
    take.dataset.key = "fit";
    take.title = "size the session to this pane, as typing here does";
    bar.append(this.sizeLabel, take);
    return bar;
  }

  showSize() {
    if (!this.size) return;
    const size = `${this.size.cols}x${this.size.rows}`;
    this.sizeLabel.textContent = `${size}${size === this.asked ? " · sized here" : ""}`;
  }

  // The keys a phone keyboard lacks: Esc, Tab, a sticky Ctrl, arrows.
  keyRow() {
    const row = document.createElement("div");
    row.className = "keys operator";
    const arrow = (c) => () => this.type(this.xterm.modes.applicationCursorKeysMode ? `\x1bO${c}` : `\x1b[${c}`);
    const keys = [
      ["Esc", () => this.type("\x1b")],
      ["Tab", () => this.type("\t")],
      ["Ctrl", () => this.setCtrl(!this.ctrl)],
      ["^C", () => this.type("\x03")],
      ["\u2190", arrow("D")],
      ["\u2191", arrow("A")],
      ["\u2193", arrow("B")],
      ["\u2192", arrow("C")],
    ];
    for (const [label, act] of keys) {
      const b = button(label, () => {
        this.takeSize();
        act();
        this.xterm.focus();
      }, false);
      b.dataset.key = label;
      // Keeps the terminal's focus (and a phone's keyboard) on a tap.
      b.addEventListener("mousedown", (e) => e.preventDefault());
      row.append(b);
    }
    this.ctrlButton = row.querySelector("[data-key=Ctrl]");
    return row;
  }

  setCtrl(on) {
    this.ctrl = on;
    this.ctrlButton.classList.toggle("on", on);
  }

  subscribe() {
    // A new connection: the node knows nothing of the last one's size.
    this.claimed = false;
    const msg = { t: "subscribe", session: this.session, window: WINDOW };
    if (this.lastSeq === null) msg.scrollback = 1000;
    else msg.from_seq = this.lastSeq;
    request(msg).then((reply) => {
      if (reply.t === "error" && reply.code !== "unavailable") this.note(reply.message);
    });
  }

  // A dim line in the terminal: something about the session, not from it.
  note(text) {
    this.xterm.write(`\r\n\x1b[2m[${text}]\x1b[0m\r\n`);
  }

  // One size policy for every viewer (docs/cli.md, "Sizes"): the session
  // takes the size of the viewer that was active last. Typing here or the
  // fit button gives it this pane's size; a page that only watches never
  // resizes. The terminal always has the session's size, changed when the
  // session says so (`resized`, in order with its output), so it draws
  // what the session's screen holds; a pane smaller than that scrolls.
  takeSize() {
    if (state.role === "viewer" || !this.pane.offsetParent) return;
    // Measured when the layout changes, not at every key.
    const d = this.proposed || this.measure();
    if (!d) return;
    const { cols, rows } = d;
    this.asked = `${cols}x${rows}`;
    this.showSize();
    // Sent once even when the session has this size already: the node
    // then counts this page as a sizer (to give the size back to).
    const same = this.size && this.size.cols === cols && this.size.rows === rows;
    if (same && this.claimed) return;
    if (send({ t: "resize", session: this.session, cols, rows })) this.claimed = true;
  }

  // The pane changed size (window, split, shown, a phone's keyboard): a
  // page that holds the session's size gives it the new one; the view
  // goes to the cursor unless the person scrolled it away.
  relayout() {
    if (!this.pane.offsetParent) return;
    this.measure();
    const holds = this.size && this.asked === `${this.size.cols}x${this.size.rows}`;
    if (holds) this.takeSize();
    if (this.follow) this.toCursor();
  }

  // The layout's figures: the size this pane would give the session (null
  // while hidden) and whether the terminal overflows the pane.
  measure() {
    const d = this.pane.offsetParent && this.fit.proposeDimensions();
    this.proposed = d && d.cols > 0 && d.rows > 0
      ? { cols: Math.min(Math.max(d.cols, 2), 1000), rows: Math.min(Math.max(d.rows, 1), 500) }
      : null;
    this.overflows = !!this.screenEl
      && (this.screenEl.clientWidth > this.el.clientWidth || this.screenEl.clientHeight > this.el.clientHeight);
    return this.proposed;
  }

  // The view to the cursor, and following it from now on.
  toCursor() {
    this.follow = true;
    this.bottomNow();
  }

  // After each scroll and render: a view at the bottom follows; one a
  // person moved (wheel, touch, the keys that scroll) stays where they
  // put it; one moved by anything else (xterm 6 syncs its scroll area to
  // a resize only when it renders, and a scroll event of the old layout
  // lands rows above the bottom, even while the person types) goes back
  // to the cursor.
  keepFollowing() {
    const b = this.xterm.buffer.active;
    const now = performance.now();
    const moved = now - this.scrolledAt < 1000;
    if (b.viewportY === b.baseY) {
      this.follow = true;
      if (!moved) this.paneToCursor();
      return;
    }
    if (moved) {
      this.follow = false;
      return;
    }
    if (this.follow) this.bottomNow();
  }

  // Through the buffer, not xterm 6's public scrollToBottom: that scrolls
  // its scroll area by pixels that may still measure the old layout.
  bottomNow() {
    const b = this.xterm.buffer.active;
    const core = this.xterm._core;
    const buffers = core && core._bufferService;
    if (buffers && typeof buffers.scrollLines === "function") buffers.scrollLines(b.baseY - b.viewportY);
    else this.xterm.scrollToBottom();
    this.paneToCursor();
  }

  // A session larger than its pane: the pane scrolls so that the cursor
  // is in view (centred), when it is not.
  paneToCursor() {
    // Only a pane the terminal overflows has anything to scroll (and a
    // render of output reads no layout).
    const screen = this.screenEl;
    if (!this.overflows || !screen || !this.el.clientWidth) return;
    const b = this.xterm.buffer.active;
    const w = screen.clientWidth / this.xterm.cols;
    const h = screen.clientHeight / this.xterm.rows;
    const [x, y, el] = [b.cursorX * w, b.cursorY * h, this.el];
    if (x < el.scrollLeft || x + w > el.scrollLeft + el.clientWidth) {
      el.scrollLeft = Math.max(0, x + w - el.clientWidth / 2);
    }
    if (y < el.scrollTop || y + h > el.scrollTop + el.clientHeight) {
      el.scrollTop = Math.max(0, y + h - el.clientHeight / 2);
    }
  }

  sized(cols, rows) {
    this.size = { cols, rows };
    if (this.xterm.cols !== cols || this.xterm.rows !== rows) {
      this.xterm.resize(cols, rows);
      // A reflow moves the view: back to the cursor, where the session's
      // new screen is.
      this.toCursor();
    }
    this.showSize();
  }

  // Ack once xterm has rendered a quarter window (render backpressure).
  written(seq, len) {
    this.unacked += len;
    if (this.unacked >= WINDOW / 4) {
      this.unacked = 0;
      send({ t: "ack", session: this.session, seq });
    }
  }

  onMessage(m) {
    if (m.t === "snapshot") {
      if (this.lastSeq === null || this.resetNext) {
        if (this.lastSeq !== null) this.resyncs++;
        this.xterm.reset();
      }
      this.resetNext = false;
      this.sized(m.cols, m.rows);
      this.xterm.write(m.data, () => {
        this.shownSeq = m.seq;
        this.toCursor();
      });
      this.lastSeq = m.seq;
    } else if (m.t === "output") {
      const len = m.data.length;
      this.lastSeq = m.seq;
      this.xterm.write(m.data, () => {
        this.shownSeq = m.seq;
        this.written(m.seq, len);
      });
    } else if (m.t === "resync_required") {
      this.resetNext = true;
    } else if (m.t === "event" && m.kind === "resized") {
      // After what xterm was given before it, as the session did.
      this.xterm.write("", () => this.sized(m.cols, m.rows));
    } else if (m.t === "event" && m.kind === "exited") {
      this.note(`session exited with code ${m.exit_code}`);
    } else if (m.t === "event" && m.kind === "unreachable") {
      this.tab.classList.add("stale-note");
    } else if (m.t === "event" && m.kind === "reachable") {
      this.tab.classList.remove("stale-note");
    }
  }

  // Every line of the buffer, scrollback first (for the tests, and copy);
  // trailing blanks trimmed.
  lines() {
    const b = this.xterm.buffer.active;
    const out = [];
    for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true).trimEnd());
    return out;
  }

  // The visible screen, row by row.
  screen() {
    const b = this.xterm.buffer.active;
    const out = [];
    for (let i = 0; i < this.xterm.rows; i++) out.push(b.getLine(b.viewportY + i).translateToString(true).trimEnd());
    return out;
  }

  showEvent(e) {
    this.eventIds.push(e.id);
    const line = document.createElement("div");
    const rest = Object.entries(e)
      .filter(([k, v]) => !["id", "ts", "kind", "session"].includes(k) && v !== null && v !== undefined)
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`)
      .join(" ");
    line.textContent = `${new Date(e.ts).toLocaleTimeString()} ${e.kind} ${rest}`;
    this.events.prepend(line);
  }

  close() {
    send({ t: "unsubscribe", session: this.session });
    this.eventStream.stop();
    this.xterm.dispose();
    this.pane.remove();
    this.tab.remove();
    state.terms.delete(this.session);
    const next = state.terms.values().next().value;
    if (state.active === this && next) show(next);
    if (!next) document.body.classList.remove("term-open");
  }
}

function show(term) {
  for (const t of state.terms.values()) {
    t.pane.classList.toggle("active", t === term);
    t.tab.classList.toggle("active", t === term);
  }
  state.active = term;
  // On a phone an open terminal takes the screen; "sessions" goes back.
  document.body.classList.add("term-open");
  term.relayout();
  term.xterm.focus();
}

// Back to the sessions from a terminal that took a phone's screen.
$("back").addEventListener("click", () => document.body.classList.remove("term-open"));

// Split: every open terminal side by side (one column on a phone).
$("split").addEventListener("click", () => {
  const on = $("panes").classList.toggle("split");
  $("split").classList.toggle("active", on);
  for (const t of state.terms.values()) t.relayout();
});

export function openTerm(session) {
  let term = state.terms.get(session);
  if (!term) {
    term = new Term(session);
    state.terms.set(session, term);
    term.subscribe();
  }
  show(term);
}

// ---- events over SSE (fetch, so the token goes in a header) --------------

class EventStream {
  constructor(session, onEvent) {
    this.session = session;
    this.onEvent = onEvent;
    this.last = 0;
    this.stopped = false;
    this.run();
  }

  async run() {
    while (!this.stopped) {
      try {
        const headers = auth();
        if (this.last) headers["Last-Event-ID"] = String(this.last);
        this.abort = new AbortController();
        const resp = await fetch(`/api/v1/sessions/${this.session}/events/stream`, { headers, signal: this.abort.signal });
        if (!resp.ok) return;
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let at;
          while ((at = buf.indexOf("\n\n")) >= 0) {
            const chunk = buf.slice(0, at);
            buf = buf.slice(at + 2);
            const data = chunk.split("\n").find((l) => l.startsWith("data: "));
            if (!data) continue;
            const e = JSON.parse(data.slice(6));
            if (e.id) this.last = e.id;
            this.onEvent(e);
          }
        }
      } catch (_) {
        // Reconnect below, with Last-Event-ID.
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  stop() {
    this.stopped = true;
    if (this.abort) this.abort.abort();
  }
}
