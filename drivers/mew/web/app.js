// @ts-check
/**
 * The page: log in, open the page's session on the gateway (`/ui/session`), draw the view the
 * gateway sends (model.js keeps the copy) and send the person's clicks and keys back as
 * commands. The gateway runs the participant and the core's view for the session; nothing
 * here knows the protocol. The token lives in sessionStorage only (this tab), and reaches the
 * gateway in the session's first message (a browser cannot set headers on a WebSocket).
 */
import * as M from "./model.js";

const TOKEN_KEY = "mew.token";
/** Longest wait between reconnection attempts (ms). */
const MAX_BACKOFF = 30000;

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @param {new () => T} type
 * @returns {T}
 */
function el(id, type) {
  const e = document.getElementById(id);
  if (!(e instanceof type)) throw new Error(`#${id} is missing`);
  return e;
}

const ui = {
  login: el("login", HTMLElement),
  loginForm: el("login-form", HTMLFormElement),
  loginSpace: el("login-space", HTMLInputElement),
  loginToken: el("login-token", HTMLInputElement),
  loginError: el("login-error", HTMLElement),
  space: el("space", HTMLElement),
  title: el("space-title", HTMLElement),
  status: el("status", HTMLElement),
  reviewOpen: el("review-open", HTMLButtonElement),
  showDiscovery: el("show-discovery", HTMLInputElement),
  logout: el("logout", HTMLButtonElement),
  messages: el("messages", HTMLOListElement),
  chatForm: el("chat-form", HTMLFormElement),
  chatInput: el("chat-input", HTMLInputElement),
  suggestions: el("suggestions", HTMLUListElement),
  noSuggestions: el("no-suggestions", HTMLElement),
  grantWho: el("grant-who", HTMLSelectElement),
  grantCap: el("grant-cap", HTMLInputElement),
  grant: el("grant", HTMLButtonElement),
  revoke: el("revoke", HTMLButtonElement),
  participants: el("participants", HTMLUListElement),
  streams: el("streams", HTMLUListElement),
  dialog: el("review", HTMLDialogElement),
  dTitle: el("review-title", HTMLElement),
  dWhat: el("review-what", HTMLElement),
  dFrom: el("review-from", HTMLElement),
  dMethod: el("review-method", HTMLElement),
  dTool: el("review-tool", HTMLElement),
  dTo: el("review-to", HTMLElement),
  dArgs: el("review-args", HTMLElement),
  dReasonBox: el("review-reason-box", HTMLElement),
  dReason: el("review-reason", HTMLTextAreaElement),
  dGrantBox: el("review-grant-box", HTMLElement),
  dGrantWho: el("review-grant-who", HTMLElement),
  dGrant: el("review-grant", HTMLElement),
  approve: el("approve", HTMLButtonElement),
  reject: el("reject", HTMLButtonElement),
  always: el("always", HTMLButtonElement),
  later: el("later", HTMLButtonElement),
  notices: el("notices", HTMLUListElement),
  qDialog: el("question", HTMLDialogElement),
  qTitle: el("question-title", HTMLElement),
  qMessage: el("question-message", HTMLElement),
  qLinkBox: el("question-link-box", HTMLElement),
  qLink: el("question-link", HTMLAnchorElement),
  qForm: el("question-form", HTMLFormElement),
  qFields: el("question-fields", HTMLElement),
  qProblem: el("question-problem", HTMLElement),
  qDecline: el("question-decline", HTMLButtonElement),
  qCancel: el("question-cancel", HTMLButtonElement),
};

/** @type {M.State} */
let state = M.newState();
/** @type {WebSocket | null} */
let ws = null;
let space = "";
/** Whether the current session got its view (a close before that is a refusal). */
let joined = false;
/** Whether the current socket has not yet sent its first snapshot. */
let fresh = true;
let attempts = 0;
/** @type {"review" | "reason" | "confirm"} */
let mode = "review";
/** The proposal the dialog shows. */
let shown = "";
/** Proposals answered here whose answer the server has not yet reflected in the queue. */
const answered = new Set();
/** Proposal ids the queue has held: one never seen before opens the review (one put back
 * by "later" does not). */
let queued = new Set();
/** Ids remembered in `queued` at most (beyond, only those waiting are kept). */
const MAX_QUEUED = 1024;
/** @type {number | undefined} */
let drawTimer;

/**
 * Sends a command to the session.
 * @param {M.Command} command
 */
function send(command) {
  if (!ws || ws.readyState !== WebSocket.OPEN || !joined) {
    note("not sent: not connected");
    return false;
  }
  ws.send(JSON.stringify({ command }));
  return true;
}

/**
 * A line of the page itself (not of the space) under the messages.
 * @param {string} text
 */
function note(text) {
  const e = document.createElement("li");
  e.className = "msg note local";
  e.textContent = text;
  ui.messages.append(e);
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

// ---- log in and out ------------------------------------------------------------------

function params() {
  const q = new URLSearchParams(location.search);
  const frag = new URLSearchParams(location.hash.replace(/^#/, ""));
  return { space: q.get("space") ?? "", token: frag.get("token") };
}

function start() {
  const p = params();
  if (p.token) {
    // Out of the address bar and the history at once; kept for this tab only.
    sessionStorage.setItem(TOKEN_KEY, p.token);
    history.replaceState(null, "", location.pathname + location.search);
  }
  ui.loginSpace.value = p.space;
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token && p.space) {
    connect(p.space, token);
  } else {
    showLogin("");
  }
}

/** Nothing of a space stays in the page. */
function clear() {
  state = M.newState();
  ui.messages.replaceChildren();
  drawn.clear();
  ui.participants.replaceChildren();
  ui.participants.dataset.sig = "";
  ui.streams.replaceChildren();
  ui.suggestions.replaceChildren();
  answered.clear();
  queued = new Set();
  shown = "";
  if (ui.dialog.open) ui.dialog.close();
  asking = "";
  if (ui.qDialog.open) ui.qDialog.close();
  ui.notices.replaceChildren();
  ui.notices.hidden = true;
}

/** @param {string} error */
function showLogin(error) {
  ui.space.hidden = true;
  ui.login.hidden = false;
  ui.loginError.textContent = error;
  clear();
  (ui.loginSpace.value ? ui.loginToken : ui.loginSpace).focus();
}

ui.loginForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const token = ui.loginToken.value.trim();
  const sp = ui.loginSpace.value.trim();
  if (!token || !sp) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.loginToken.value = "";
  const q = new URLSearchParams(location.search);
  q.set("space", sp);
  history.replaceState(null, "", `${location.pathname}?${q}`);
  connect(sp, token);
});

ui.logout.addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  const old = ws;
  ws = null;
  old?.close(1000, "logged out");
  showLogin("");
});

/**
 * Opens the page's session: the token goes in its first message.
 * @param {string} sp
 * @param {string} token
 */
function connect(sp, token) {
  space = sp;
  joined = false;
  fresh = true;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const sock = new WebSocket(`${scheme}://${location.host}/ui/session`);
  ws = sock;
  ui.status.textContent = "connecting…";
  sock.addEventListener("open", () => sock.send(JSON.stringify({ token, space: sp })));
  sock.addEventListener("message", (m) => {
    if (sock !== ws || typeof m.data !== "string") return;
    /** @type {M.Change} */
    let change;
    try {
      change = JSON.parse(m.data);
    } catch {
      return;
    }
    onChange(change);
  });
  sock.addEventListener("close", (e) => {
    if (sock !== ws) return;
    ws = null;
    if (!joined || e.code === 1000) {
      // Refused at the door (the token is wrong, or the space is not this one), or the
      // person left (`/quit`): logged out.
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(e.reason || `could not join (closed with ${e.code})`);
      return;
    }
    joined = false;
    attempts += 1;
    const wait = Math.min(MAX_BACKOFF, 500 * 2 ** Math.min(attempts, 6));
    state.status = `disconnected (${e.reason || e.code}); reconnecting in ${Math.round(wait / 1000)}s`;
    ui.status.textContent = state.status;
    setTimeout(() => {
      const t = sessionStorage.getItem(TOKEN_KEY);
      if (t && !ws) connect(space, t);
    }, wait);
  });
}

/** @param {M.Change} change */
function onChange(change) {
  if (change.snapshot !== undefined && fresh) {
    // A new session's view replaces whatever the page drew of an earlier one (its items
    // are numbered afresh); a later snapshot of the same session is reconciled by number.
    fresh = false;
    clear();
  }
  const t = M.apply(state, change);
  if (t.error !== undefined) note(t.error);
  if (!joined && state.me) {
    joined = true;
    attempts = 0;
    ui.login.hidden = true;
    ui.space.hidden = false;
    ui.title.textContent = `Space ${space}`;
    document.title = `MEW: ${space}`;
  }
  if (t.all || t.queue) onQueue();
  if (t.all || t.questions) onQuestions();
  if (t.all || t.notices) drawNotices();
  scheduleDraw();
}

// ---- questions and sign-in notices ----------------------------------------------------------

/** The question the question dialog shows. */
let asking = "";

/** The questions changed: the dialog shows the first, keeping what was typed into it. */
function onQuestions() {
  const q = state.questions[0];
  if (!q) {
    asking = "";
    if (ui.qDialog.open) {
      ui.qDialog.close();
      // The keyboard back to the chat box, ready to type (as after a review).
      ui.chatInput.blur();
      ui.chatInput.focus();
    }
    return;
  }
  if (q.id !== asking) {
    asking = q.id;
    fillQuestion(q);
  }
  ui.qProblem.textContent = q.problem ?? "";
  const more = state.questions.length - 1;
  ui.qTitle.textContent = more > 0 ? `Question from ${q.from} (${more} more waiting)` : `Question from ${q.from}`;
  if (!ui.qDialog.open && joined) {
    ui.qDialog.showModal();
    const first = ui.qFields.querySelector("input, select");
    (first instanceof HTMLElement ? first : ui.qCancel).focus();
  }
}

/**
 * The question's form, one control per field as the core describes it.
 * @param {M.Question} q
 */
function fillQuestion(q) {
  ui.qMessage.textContent = q.message;
  ui.qLinkBox.hidden = !q.url;
  ui.qLink.href = q.url ?? "";
  ui.qLink.textContent = q.url ?? "";
  ui.qFields.replaceChildren(...q.fields.map(fieldControl));
}

/**
 * @param {M.Field} f
 * @returns {HTMLElement}
 */
function fieldControl(f) {
  const box = document.createElement("div");
  box.className = "field";
  box.dataset.name = f.name;
  box.dataset.kind = f.kind;
  const id = `q-${f.name}`;
  const label = `${f.title}${f.required ? " (required)" : ""}`;
  const notes = [f.format ?? "", f.hint, f.description].filter((t) => t).join("; ");
  if (f.kind === "choices") {
    const set = document.createElement("fieldset");
    const legend = document.createElement("legend");
    legend.textContent = label;
    set.append(legend);
    const chosen = Array.isArray(f.default) ? f.default.map(String) : [];
    for (const o of f.options) {
      const l = document.createElement("label");
      l.className = "choice";
      const c = document.createElement("input");
      c.type = "checkbox";
      c.value = o.value;
      c.checked = chosen.includes(o.value);
      l.append(c, o.title);
      set.append(l);
    }
    box.append(set);
  } else {
    const l = document.createElement("label");
    l.htmlFor = id;
    l.textContent = label;
    /** @type {HTMLInputElement | HTMLSelectElement} */
    let control;
    if (f.kind === "boolean") {
      const c = document.createElement("input");
      c.type = "checkbox";
      c.checked = f.default === true;
      control = c;
      l.className = "choice";
    } else if (f.kind === "choice") {
      const sel = document.createElement("select");
      const none = document.createElement("option");
      none.value = "";
      none.textContent = "(none)";
      sel.append(none);
      for (const o of f.options) {
        const opt = document.createElement("option");
        opt.value = o.value;
        opt.textContent = o.title;
        sel.append(opt);
      }
      sel.value = f.text;
      control = sel;
    } else {
      // Plain text for numbers too: what was typed reaches the core, which says what is wrong.
      const c = document.createElement("input");
      c.value = f.text;
      if (f.kind === "number" || f.kind === "integer") c.inputMode = f.kind === "integer" ? "numeric" : "decimal";
      if (f.format) c.placeholder = f.format;
      control = c;
    }
    control.id = id;
    if (f.required) control.setAttribute("aria-required", "true");
    if (f.kind === "boolean") {
      l.prepend(control);
      box.append(l);
    } else {
      box.append(l, control);
    }
  }
  if (notes) box.append(small(notes));
  return box;
}

/** What the form holds: for each field what was typed or chosen, as the core reads it. */
function questionValues() {
  /** @type {{[name: string]: any}} */
  const values = {};
  for (const box of ui.qFields.querySelectorAll(".field")) {
    if (!(box instanceof HTMLElement) || !box.dataset.name) continue;
    const kind = box.dataset.kind;
    if (kind === "choices") {
      values[box.dataset.name] = [...box.querySelectorAll("input:checked")].map((c) => /** @type {HTMLInputElement} */ (c).value);
    } else if (kind === "boolean") {
      values[box.dataset.name] = /** @type {HTMLInputElement} */ (box.querySelector("input")).checked;
    } else {
      const c = box.querySelector("input, select");
      if (c instanceof HTMLInputElement || c instanceof HTMLSelectElement) values[box.dataset.name] = c.value;
    }
  }
  return values;
}

/** @param {M.Reply} reply */
function reply(reply) {
  if (!asking) return;
  const values = reply === "accept" ? questionValues() : {};
  send({ answer: { question: asking, reply, values } });
}

ui.qForm.addEventListener("submit", (e) => {
  e.preventDefault();
  reply("accept");
});
ui.qDecline.addEventListener("click", () => reply("decline"));
ui.qCancel.addEventListener("click", () => reply("cancel"));
ui.qDialog.addEventListener("cancel", (e) => {
  e.preventDefault();
  reply("cancel");
});

function drawNotices() {
  ui.notices.hidden = state.notices.length === 0;
  ui.notices.replaceChildren(
    ...state.notices.map((n) => {
      const e = document.createElement("li");
      const a = document.createElement("a");
      a.href = n.url;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      a.textContent = `Sign in to ${n.host}`;
      e.append(n.text, a);
      return e;
    }),
  );
}

/** The queue changed: the dialog follows it. */
function onQueue() {
  M.prune(state, answered);
  const ids = new Set(state.queue.map((p) => p.id));
  const arrived = [...ids].some((id) => !queued.has(id));
  for (const id of ids) queued.add(id);
  if (queued.size > MAX_QUEUED) queued = new Set(ids);
  if (ui.dialog.open) {
    // Settled anywhere (here, at another screen, withdrawn): the next one, or closed.
    if (!ids.has(shown) || answered.has(shown)) closeOrNext();
  } else if (arrived && joined) {
    openReview();
  }
}

// ---- review ----------------------------------------------------------------------------

function current() {
  return state.queue.find((p) => p.id === shown) ?? null;
}

function openReview() {
  const p = M.next(state, answered);
  if (!p) return;
  shown = p.id;
  setMode("review");
  fillDialog(p);
  if (!ui.dialog.open) ui.dialog.showModal();
  ui.approve.focus();
}

function waitingTitle() {
  const waiting = state.queue.filter((p) => !answered.has(p.id)).length - 1;
  return waiting > 0 ? `Review proposal (${waiting} more waiting)` : "Review proposal";
}

/** @param {M.Proposal} p */
function fillDialog(p) {
  ui.dTitle.textContent = waitingTitle();
  ui.dWhat.textContent = `${p.from} proposes ${p.what}`;
  ui.dFrom.textContent = p.from;
  ui.dMethod.textContent = String(p.payload?.method ?? "?");
  ui.dTool.textContent = typeof p.payload?.params?.name === "string" ? p.payload.params.name : "(none)";
  ui.dTo.textContent = p.to.join(", ");
  ui.dArgs.textContent = M.pretty(p.payload?.params?.arguments ?? p.payload?.params ?? {});
  ui.dGrantWho.textContent = p.from;
  // What "always allow" grants, as the core gives it.
  ui.dGrant.textContent = M.pretty(p.capability);
}

/** @param {"review" | "reason" | "confirm"} m */
function setMode(m) {
  mode = m;
  ui.dReasonBox.hidden = m !== "reason";
  ui.dGrantBox.hidden = m !== "confirm";
  ui.approve.hidden = m !== "review";
  ui.reject.hidden = m === "confirm";
  ui.always.hidden = m === "reason";
  ui.always.textContent = m === "confirm" ? "Grant and approve" : "Always allow";
  ui.later.textContent = m === "review" ? "Later" : "Back";
  if (m === "reason") {
    ui.dReason.value = "";
    ui.dReason.focus();
  } else if (m === "confirm") {
    ui.always.focus();
  }
}

/** The dialog shows the next waiting proposal, or closes. */
function closeOrNext() {
  shown = "";
  if (M.next(state, answered)) openReview();
  else if (ui.dialog.open) ui.dialog.close();
  scheduleDraw();
}

/**
 * Answers the proposal under review with `command`, then moves on.
 * @param {(id: string) => M.Command} command
 */
function answer(command) {
  const p = current();
  if (p && send(command(p.id))) answered.add(p.id);
  closeOrNext();
}

ui.approve.addEventListener("click", () => answer((id) => ({ approve: id })));

ui.reject.addEventListener("click", () => {
  if (mode !== "reason") {
    setMode("reason");
    return;
  }
  const reason = ui.dReason.value.trim() || "rejected";
  answer((id) => ({ reject: { proposal: id, reason } }));
});

ui.always.addEventListener("click", () => {
  if (mode !== "confirm") {
    setMode("confirm");
    return;
  }
  answer((id) => ({ always_allow: id }));
});

function later() {
  if (mode !== "review") {
    setMode("review");
    ui.approve.focus();
    return;
  }
  // Deferred: to the back of the queue (the server's), the keyboard back to the chat box.
  if (shown) send({ later: shown });
  shown = "";
  ui.dialog.close();
  ui.chatInput.focus();
  scheduleDraw();
}

ui.later.addEventListener("click", later);
ui.dialog.addEventListener("cancel", (e) => {
  e.preventDefault();
  later();
});
ui.dialog.addEventListener("close", () => {
  // Closed by the browser itself (a repeated Esc): the proposal stays waiting.
  if (shown) {
    shown = "";
    scheduleDraw();
  }
});
ui.dialog.addEventListener("keydown", (e) => {
  if (ui.qDialog.open) return;
  if (e.target instanceof HTMLTextAreaElement) {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      ui.reject.click();
    }
    return;
  }
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const k = e.key.toLowerCase();
  if (mode === "review" && k === "y") ui.approve.click();
  else if (mode === "review" && k === "n") ui.reject.click();
  else if (mode === "review" && k === "a") ui.always.click();
  else if (mode === "confirm" && k === "y") ui.always.click();
  else if (mode === "confirm" && k === "n") later();
  else return;
  e.preventDefault();
});
ui.reviewOpen.addEventListener("click", openReview);

// ---- chat, controls, grants --------------------------------------------------------------

ui.chatForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const line = ui.chatInput.value;
  ui.chatInput.value = "";
  if (!line.trim()) {
    // As in the terminal: Enter on an empty line brings deferred proposals back.
    openReview();
    return;
  }
  send({ line });
});

/**
 * The grant form is the chat's `/grant` and `/revoke`, which the core reads.
 * @param {"grant" | "revoke"} what
 */
function grantOrRevoke(what) {
  const who = ui.grantWho.value;
  const text = ui.grantCap.value.trim();
  if (!who || !text) {
    note(`${what}: choose a participant and a capability`);
    return;
  }
  if (send({ line: `/${what} ${who} ${text}` })) ui.grantCap.value = "";
}
ui.grant.addEventListener("click", () => grantOrRevoke("grant"));
ui.revoke.addEventListener("click", () => grantOrRevoke("revoke"));
ui.showDiscovery.addEventListener("change", () => draw());

document.addEventListener("keydown", (e) => {
  if (ui.dialog.open || ui.qDialog.open || ui.space.hidden || e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  if (t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement) {
    if (e.key === "Escape") /** @type {HTMLElement} */ (t).blur();
    return;
  }
  if (e.key === "r" && state.queue.length > 0) openReview();
  else if (e.key === "/") ui.chatInput.focus();
  else return;
  e.preventDefault();
});

// ---- drawing -----------------------------------------------------------------------------

function scheduleDraw() {
  if (drawTimer !== undefined) return;
  // Changes arriving in a burst are drawn once.
  drawTimer = window.setTimeout(() => {
    drawTimer = undefined;
    draw();
  }, 16);
}

/** Message elements by item sequence number, so a redraw only adds what is new. */
const drawn = new Map();

function draw() {
  ui.status.textContent = state.status;
  const n = state.queue.filter((p) => !answered.has(p.id)).length;
  ui.reviewOpen.disabled = n === 0;
  ui.reviewOpen.textContent = n === 0 ? "No proposals waiting" : `Review ${n} waiting proposal${n === 1 ? "" : "s"}`;
  if (ui.dialog.open && current()) ui.dTitle.textContent = waitingTitle();
  drawMessages();
  drawParticipants();
  drawSuggestions();
  ui.streams.replaceChildren(
    ...(state.streams.length === 0 ? [li("no open streams")] : state.streams.map((s) => li(`${s.id} of ${s.owner}`))),
  );
}

/** @param {string} text */
function li(text) {
  const e = document.createElement("li");
  e.textContent = text;
  return e;
}

function drawMessages() {
  const showBackground = ui.showDiscovery.checked;
  const atBottom = ui.messages.scrollHeight - ui.messages.scrollTop - ui.messages.clientHeight < 40;
  const keep = new Set(state.items.map((i) => i.seq));
  for (const [seq, e] of drawn) {
    if (!keep.has(seq)) {
      e.remove();
      drawn.delete(seq);
    }
  }
  for (const item of state.items) {
    let e = drawn.get(item.seq);
    if (!e) {
      e = document.createElement("li");
      e.className = `msg ${item.kind}`;
      if (item.kind === "chat") {
        const b = document.createElement("strong");
        b.textContent = `${item.from}: `;
        const span = document.createElement("span");
        span.textContent = item.text;
        e.append(b, span);
      } else if (item.kind !== "reasoning") {
        e.append(item.text);
      }
      if (item.body.length > 0) {
        const pre = document.createElement("pre");
        pre.className = "body";
        pre.textContent = item.body.join("\n");
        e.append(pre);
      }
      // Before the first local note, so the page's own lines stay last.
      ui.messages.append(e);
      drawn.set(item.seq, e);
    }
    e.hidden = item.background && !showBackground;
    if (item.kind === "reasoning" && item.context) drawFold(e, item.context);
  }
  if (atBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
}

/**
 * A reasoning sequence: the core's one-line summary, the latest thought below, followed live.
 * @param {HTMLElement} e
 * @param {string} ctx
 */
function drawFold(e, ctx) {
  const f = state.folds[ctx];
  if (!f) return;
  let details = e.querySelector("details");
  if (!details) {
    details = document.createElement("details");
    details.append(document.createElement("summary"), document.createElement("p"));
    e.append(details);
  }
  const summary = /** @type {HTMLElement} */ (details.querySelector("summary"));
  const latest = /** @type {HTMLElement} */ (details.querySelector("p"));
  summary.textContent = f.summary;
  latest.textContent = f.conclusion ?? f.latest;
}

function drawParticipants() {
  const selected = ui.grantWho.value;
  const others = state.members.filter((m) => !m.me);
  ui.grantWho.replaceChildren(
    ...others.map((m) => {
      const o = document.createElement("option");
      o.value = m.id;
      o.textContent = m.id;
      return o;
    }),
  );
  if (others.some((m) => m.id === selected)) ui.grantWho.value = selected;
  // Redrawn only when what they show changed, so focus inside the list is not lost.
  const sig = JSON.stringify(state.members);
  if (ui.participants.dataset.sig === sig) return;
  ui.participants.dataset.sig = sig;
  ui.participants.replaceChildren(
    ...state.members.map((m) => {
      const e = document.createElement("li");
      e.className = "member online";
      const name = document.createElement("p");
      name.className = "member-name";
      const you = m.me ? " (you)" : "";
      name.textContent = `● ${m.id}${you}`;
      name.setAttribute("aria-label", `${m.id}${you}, online`);
      e.append(name);
      if (m.tools.length > 0) e.append(small(`tools: ${m.tools.join(", ")}`));
      if (m.capabilities.length > 0) e.append(small(`capabilities: ${m.capabilities.join(", ")}`));
      if (!m.me) {
        const row = document.createElement("div");
        row.className = "row controls";
        row.setAttribute("role", "group");
        row.setAttribute("aria-label", `Controls for ${m.id}`);
        for (const action of M.CONTROLS) {
          const text = action[0].toUpperCase() + action.slice(1);
          row.append(button(text, `${text} ${m.id}`, () => send({ control: { target: m.id, action } })));
        }
        e.append(row);
      }
      return e;
    }),
  );
}

function drawSuggestions() {
  ui.noSuggestions.hidden = state.suggestions.length > 0;
  const sig = JSON.stringify(state.suggestions);
  if (ui.suggestions.dataset.sig === sig) return;
  ui.suggestions.dataset.sig = sig;
  ui.suggestions.replaceChildren(
    ...state.suggestions.map((s) => {
      const li = document.createElement("li");
      li.className = "card";
      const title = document.createElement("p");
      title.textContent = `Let ${s.recipient} act directly`;
      title.className = "card-title";
      const evidence = document.createElement("p");
      evidence.textContent = s.summary;
      const pre = document.createElement("pre");
      pre.textContent = M.pretty(s.capability);
      pre.tabIndex = 0;
      pre.setAttribute("aria-label", `capability for ${s.recipient}`);
      const row = document.createElement("div");
      row.className = "row";
      const g = button("Grant", `Grant suggested capability to ${s.recipient}`, () => send({ grant_suggestion: s.key }));
      const d = button("Dismiss", `Dismiss suggestion for ${s.recipient}`, () => send({ dismiss_suggestion: s.key }));
      row.append(g, d);
      li.append(title, evidence, pre, row);
      return li;
    }),
  );
}

/**
 * @param {string} text
 * @param {string} label
 * @param {() => void} onClick
 */
function button(text, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (label !== text) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

/** @param {string} text */
function small(text) {
  const e = document.createElement("p");
  e.className = "small";
  e.textContent = text;
  return e;
}

// A fault of the page shows in the messages rather than silently stopping it.
window.addEventListener("error", (e) => note(`page error: ${e.message}`));

start();
