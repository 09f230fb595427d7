// @ts-check
/**
 * The page: log in, speak the MEW protocol over one WebSocket, draw the state of model.js.
 * The token lives in sessionStorage only (this tab), and reaches the gateway in the join
 * message (a browser cannot set headers on a WebSocket).
 */
import * as M from "./model.js";

const PROTOCOL = "mew/v0.4";
const TOKEN_KEY = "mew.token";
const ID_KEY = "mew.id";
/** Largest body sent for suggestions (bytes, under the gateway's default frame limit). */
const MAX_SUGGEST_BODY = 900_000;
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
  loginId: el("login-id", HTMLInputElement),
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
};

/** @type {M.State} */
let state = M.newState("");
/** @type {WebSocket | null} */
let ws = null;
let space = "";
let joined = false;
let attempts = 0;
/** @type {"review" | "reason" | "confirm"} */
let mode = "review";
/** The proposal the dialog shows. */
let shown = "";
/** @type {M.Suggestion[]} */
let suggestions = [];
/** Suggestions granted or dismissed (recipient + capability). */
const decidedSuggestions = new Set();
/** tools/list requests this page sent, by request id: the participant asked. */
const toolRequests = new Map();
/** @type {number | undefined} */
let suggestTimer;
/** @type {number | undefined} */
let drawTimer;

/** Random envelope ids from the CSPRNG (crypto.randomUUID needs a secure context). */
function newId() {
  const b = crypto.getRandomValues(new Uint8Array(12));
  return "web-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/**
 * Sends an envelope draft; returns the full envelope (or null when not connected).
 * @param {M.Envelope} draft
 */
function send(draft) {
  if (!ws || ws.readyState !== WebSocket.OPEN || !joined) {
    M.note(state, "not sent: not connected");
    draw();
    return null;
  }
  /** @type {M.Envelope} */
  const env = { protocol: PROTOCOL, id: newId(), ts: new Date().toISOString(), from: state.me, ...draft };
  if (Array.isArray(env.to) && env.to.length === 0) delete env.to;
  ws.send(JSON.stringify(env));
  return env;
}

/** Ids of envelopes this page sent and drew at once; their echoes are not drawn again. */
const applied = new Set();

/**
 * Sends an envelope and draws it at once (a gateway that delivers to everyone echoes it;
 * one that delivers only to addressees does not).
 * @param {M.Envelope} draft
 */
function sendShown(draft) {
  const env = send(draft);
  if (env) {
    applied.add(env.id);
    if (applied.size > 1000) applied.delete(applied.values().next().value);
    M.apply(state, env);
  }
  return env;
}

// ---- log in and out ------------------------------------------------------------------

function params() {
  const q = new URLSearchParams(location.search);
  const frag = new URLSearchParams(location.hash.replace(/^#/, ""));
  return { space: q.get("space") ?? "", token: frag.get("token"), id: frag.get("id") ?? q.get("id") };
}

function start() {
  const p = params();
  if (p.token) {
    // Out of the address bar and the history at once; kept for this tab only.
    sessionStorage.setItem(TOKEN_KEY, p.token);
    if (p.id) sessionStorage.setItem(ID_KEY, p.id);
    history.replaceState(null, "", location.pathname + location.search);
  }
  ui.loginSpace.value = p.space;
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token && p.space) {
    connect(p.space, token, sessionStorage.getItem(ID_KEY) ?? "");
  } else {
    showLogin("");
  }
}

/** @param {string} error */
function showLogin(error) {
  ui.space.hidden = true;
  ui.login.hidden = false;
  ui.loginError.textContent = error;
  // Nothing of a space stays in the page behind the form.
  ui.messages.replaceChildren();
  drawn.clear();
  ui.participants.replaceChildren();
  ui.participants.dataset.sig = "";
  suggestions = [];
  state = M.newState("");
  ui.streams.replaceChildren();
  ui.suggestions.replaceChildren();
  if (ui.dialog.open) ui.dialog.close();
  (ui.loginSpace.value ? ui.loginToken : ui.loginSpace).focus();
}

ui.loginForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const token = ui.loginToken.value.trim();
  const sp = ui.loginSpace.value.trim();
  if (!token || !sp) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  if (ui.loginId.value.trim()) sessionStorage.setItem(ID_KEY, ui.loginId.value.trim());
  else sessionStorage.removeItem(ID_KEY);
  ui.loginToken.value = "";
  const q = new URLSearchParams(location.search);
  q.set("space", sp);
  history.replaceState(null, "", `${location.pathname}?${q}`);
  connect(sp, token, ui.loginId.value.trim());
});

ui.logout.addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(ID_KEY);
  const old = ws;
  ws = null;
  old?.close(1000, "logged out");
  state = M.newState("");
  showLogin("");
});

/**
 * @param {string} sp
 * @param {string} token
 * @param {string} id
 */
function connect(sp, token, id) {
  space = sp;
  joined = false;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const sock = new WebSocket(`${scheme}://${location.host}/ws?space=${encodeURIComponent(sp)}`);
  ws = sock;
  state.status = "connecting…";
  /** @type {string} */
  let refusal = "";
  sock.addEventListener("open", () => {
    /** @type {{[k: string]: string}} */
    const join = { type: "join", space: sp, token };
    if (id) join.participantId = id;
    sock.send(JSON.stringify(join));
  });
  sock.addEventListener("message", (m) => {
    if (sock !== ws || typeof m.data !== "string") return;
    let env;
    try {
      env = JSON.parse(m.data);
    } catch {
      return;
    }
    if (!joined && env.kind === "system/error") {
      refusal = `${env.payload?.error ?? "refused"}: ${env.payload?.message ?? ""}`;
      return;
    }
    if (held && env.kind !== "system/welcome") {
      // The history is on its way: this comes after it.
      if (held.length < MAX_HELD) {
        held.push(env);
        return;
      }
      flushHeld();
    }
    if (env.kind === "system/welcome") {
      joined = true;
      attempts = 0;
      ui.login.hidden = true;
      ui.space.hidden = false;
      ui.title.textContent = `Space ${space}`;
      document.title = `MEW: ${space}`;
    }
    onEnvelope(env);
    if (env.kind === "system/welcome") fetchHistory(token);
  });
  sock.addEventListener("close", (e) => {
    if (sock !== ws) return;
    ws = null;
    if (!joined) {
      // Refused at the door: the token is wrong, or the space is not this one.
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(refusal || `could not join (${e.reason || "connection closed"})`);
      return;
    }
    joined = false;
    attempts += 1;
    const wait = Math.min(MAX_BACKOFF, 500 * 2 ** Math.min(attempts, 6));
    state.status = `disconnected (${e.reason || e.code}); reconnecting in ${Math.round(wait / 1000)}s`;
    draw();
    setTimeout(() => {
      const t = sessionStorage.getItem(TOKEN_KEY);
      if (t && !ws) connect(space, t, sessionStorage.getItem(ID_KEY) ?? "");
    }, wait);
  });
}

// ---- envelopes -------------------------------------------------------------------------

/** Envelopes held at most while the history is fetched (beyond, shown at once). */
const MAX_HELD = 4096;
/** Envelopes that arrived while the history was fetched, or null when not fetching. */
/** @type {M.Envelope[] | null} */
let held = null;

/** Shows what was held while the history was fetched. */
function flushHeld() {
  const list = held ?? [];
  held = null;
  for (const env of list) onEnvelope(env);
}

/**
 * Fetches what the gateway kept of the space (since the last envelope seen, after a
 * rejoin), so that a reviewer sees what led to a proposal: `GET /participants/{id}/messages`
 * of the gateway that serves this page, with the participant's token.
 * @param {string} token
 */
async function fetchHistory(token) {
  if (held) return;
  held = [];
  const since = state.lastSeen ? `?since=${encodeURIComponent(state.lastSeen)}` : "";
  /** @type {M.Envelope[] | string} */
  let history;
  try {
    const r = await fetch(`/participants/${encodeURIComponent(state.me)}/messages${since}`, {
      headers: { Authorization: `Bearer ${token}` },
      cache: "no-store",
    });
    const body = r.ok ? await r.json() : null;
    history = Array.isArray(body) ? body : `the gateway answered ${r.status}`;
  } catch (e) {
    history = e instanceof Error ? e.message : String(e);
  }
  if (M.applyHistory(state, history) > 0) scheduleSuggest();
  flushHeld();
  if (state.pending.length > 0 && !ui.dialog.open) openReview();
  scheduleDraw();
}

/** @param {M.Envelope} env */
function onEnvelope(env) {
  // Before the check for envelopes already shown: the answer to this page's own discovery,
  // or a request to it, may have reached the history fetched after the join, which shows it
  // but neither records tools nor answers.
  if (env.kind === "mcp/response") {
    for (const c of [env.correlation_id].flat()) {
      const who = toolRequests.get(c);
      if (who !== undefined) {
        toolRequests.delete(c);
        M.setTools(state, who, env.payload?.result);
        scheduleDraw();
      }
    }
  }
  // Each live envelope comes here once, so each request is answered once.
  if (env.kind === "mcp/request" && Array.isArray(env.to) && env.to.includes(state.me)) answer(env);
  if (applied.delete(env.id)) return;
  if (M.seenBefore(state, env)) return;
  const out = M.apply(state, env);
  if (env.kind === "system/welcome") discover([...state.members.keys()]);
  if (env.kind === "system/presence" && env.payload?.event === "join") discover([env.payload?.participant?.id]);
  if (out.decided) scheduleSuggest();
  if (out.settled.includes(shown)) closeOrNext();
  if (out.proposal && !ui.dialog.open) openReview();
  scheduleDraw();
}

/**
 * Asks each participant for its tools (the terminal's runtime does the same discovery).
 * @param {any[]} ids
 */
function discover(ids) {
  const me = state.members.get(state.me);
  const may = me?.capabilities.some((c) => c === "*" || c.startsWith("mcp/request") || c === "mcp/*");
  if (!may) return;
  for (const who of ids) {
    if (typeof who !== "string" || who === state.me) continue;
    const env = send({ kind: "mcp/request", to: [who], payload: { jsonrpc: "2.0", id: 1, method: "tools/list", params: {} } });
    if (env) {
      toolRequests.set(env.id, who);
      state.discoveryRequests.add(env.id);
      if (toolRequests.size > 1000) toolRequests.delete(toolRequests.keys().next().value);
    }
  }
}

/**
 * A request to this page: it offers no tools.
 * @param {M.Envelope} env
 */
function answer(env) {
  const method = env.payload?.method;
  const payload =
    method === "tools/list"
      ? { jsonrpc: "2.0", id: env.payload?.id ?? 1, result: { tools: [] } }
      : { jsonrpc: "2.0", id: env.payload?.id ?? 1, error: { code: -32601, message: `${method} is not offered by a web page` } };
  send({ kind: "mcp/response", to: [env.from], correlation_id: [env.id], payload });
}

// ---- review ----------------------------------------------------------------------------

function current() {
  return state.pending.find((p) => p.id === shown) ?? null;
}

function openReview() {
  const p = state.pending[0];
  if (!p) return;
  shown = p.id;
  setMode("review");
  fillDialog(p);
  if (!ui.dialog.open) ui.dialog.showModal();
  ui.approve.focus();
}

/** @param {M.Proposal} p */
function fillDialog(p) {
  const waiting = state.pending.length - 1;
  ui.dTitle.textContent = waiting > 0 ? `Review proposal (${waiting} more waiting)` : "Review proposal";
  ui.dWhat.textContent = `${p.from} proposes ${M.describe(p)}`;
  ui.dFrom.textContent = p.from;
  ui.dMethod.textContent = String(p.payload?.method ?? "?");
  ui.dTool.textContent = typeof p.payload?.params?.name === "string" ? p.payload.params.name : "(none)";
  ui.dTo.textContent = p.to.join(", ");
  const args = p.payload?.params?.arguments ?? p.payload?.params ?? {};
  ui.dArgs.textContent = JSON.stringify(args, null, 2);
  ui.dGrantWho.textContent = p.from;
  ui.dGrant.textContent = M.canonical(M.narrowest(p.payload), 2);
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
  if (state.pending.length > 0) openReview();
  else if (ui.dialog.open) ui.dialog.close();
  scheduleDraw();
}

/** Takes the proposal under review out of the queue. */
function settle() {
  const p = current();
  if (!p) {
    closeOrNext();
    return null;
  }
  state.pending = state.pending.filter((x) => x.id !== p.id);
  return p;
}

/** @param {M.Proposal} p */
function approve(p) {
  if (sendShown({ kind: "mcp/request", to: p.to, correlation_id: [p.id], payload: p.payload })) scheduleSuggest();
}

ui.approve.addEventListener("click", () => {
  const p = settle();
  if (p) approve(p);
  closeOrNext();
});

ui.reject.addEventListener("click", () => {
  if (mode !== "reason") {
    setMode("reason");
    return;
  }
  const p = settle();
  if (p) {
    const reason = ui.dReason.value.trim() || "rejected";
    if (sendShown({ kind: "mcp/reject", to: [p.from], correlation_id: [p.id], payload: { reason } })) scheduleSuggest();
  }
  closeOrNext();
});

ui.always.addEventListener("click", () => {
  if (mode !== "confirm") {
    setMode("confirm");
    return;
  }
  const p = settle();
  if (p) {
    sendShown({
      kind: "capability/grant",
      to: [p.from],
      payload: { recipient: p.from, capabilities: [M.narrowest(p.payload)], reason: "always allowed from the review dialog" },
    });
    approve(p);
  }
  closeOrNext();
});

function later() {
  if (mode !== "review") {
    setMode("review");
    ui.approve.focus();
    return;
  }
  // Deferred: to the back of the queue, the keyboard back to the chat box.
  const i = state.pending.findIndex((x) => x.id === shown);
  if (i >= 0) state.pending.push(...state.pending.splice(i, 1));
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
  const r = M.command(state, line);
  for (const n of r.notes) M.note(state, n);
  for (const d of r.send) sendShown(d);
  draw();
});

/**
 * @param {"grant" | "revoke"} what
 */
function grantOrRevoke(what) {
  const who = ui.grantWho.value;
  const text = ui.grantCap.value.trim();
  if (!who || !text) {
    M.note(state, `${what}: choose a participant and a capability`);
    draw();
    return;
  }
  const r = M.command(state, `/${what} ${who} ${text}`);
  for (const d of r.send) sendShown(d);
  ui.grantCap.value = "";
  draw();
}
ui.grant.addEventListener("click", () => grantOrRevoke("grant"));
ui.revoke.addEventListener("click", () => grantOrRevoke("revoke"));
ui.showDiscovery.addEventListener("change", () => draw());

document.addEventListener("keydown", (e) => {
  if (ui.dialog.open || ui.space.hidden || e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  if (t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement) {
    if (e.key === "Escape") /** @type {HTMLElement} */ (t).blur();
    return;
  }
  if (e.key === "r" && state.pending.length > 0) openReview();
  else if (e.key === "/") ui.chatInput.focus();
  else return;
  e.preventDefault();
});

// ---- suggestions -------------------------------------------------------------------------

function scheduleSuggest() {
  clearTimeout(suggestTimer);
  suggestTimer = window.setTimeout(refreshSuggestions, 200);
}

async function refreshSuggestions() {
  try {
    // The newest decisions that fit the gateway's body limit (1 MiB by default).
    let observed = state.observed;
    let body = JSON.stringify({ observed, min: M.SUGGEST_AFTER });
    while (body.length > MAX_SUGGEST_BODY && observed.length > 1) {
      observed = observed.slice(Math.floor(observed.length / 2));
      body = JSON.stringify({ observed, min: M.SUGGEST_AFTER });
    }
    const r = await fetch("api/suggest", { method: "POST", headers: { "Content-Type": "application/json" }, body });
    if (!r.ok) return;
    const v = await r.json();
    suggestions = Array.isArray(v.suggestions) ? v.suggestions : [];
    drawSuggestions();
  } catch {
    // The gateway is away: the card keeps what it had.
  }
}

/** @param {M.Suggestion} s */
const suggestionKey = (s) => s.recipient + M.canonical(s.capability);

function drawSuggestions() {
  const open = suggestions.filter((s) => !decidedSuggestions.has(suggestionKey(s)));
  ui.noSuggestions.hidden = open.length > 0;
  ui.suggestions.replaceChildren(
    ...open.map((s) => {
      const li = document.createElement("li");
      li.className = "card";
      const title = document.createElement("p");
      const tool = s.capability?.payload?.params?.name;
      title.textContent = `Let ${s.recipient} call ${s.capability?.payload?.method ?? "?"}${tool ? " " + tool : ""} directly`;
      title.className = "card-title";
      const evidence = document.createElement("p");
      evidence.textContent = `approved ${s.approved.length} times by ${s.approvers.join(", ")} (${s.first} to ${s.last}), never rejected`;
      const pre = document.createElement("pre");
      pre.textContent = M.canonical(s.capability, 2);
      pre.tabIndex = 0;
      pre.setAttribute("aria-label", `capability for ${s.recipient}`);
      const row = document.createElement("div");
      row.className = "row";
      const g = button("Grant", `Grant suggested capability to ${s.recipient}`, () => {
        decidedSuggestions.add(suggestionKey(s));
        sendShown({ kind: "capability/grant", to: [s.recipient], payload: s.grant });
        drawSuggestions();
        draw();
      });
      const d = button("Dismiss", `Dismiss suggestion for ${s.recipient}`, () => {
        decidedSuggestions.add(suggestionKey(s));
        drawSuggestions();
      });
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

// ---- drawing -----------------------------------------------------------------------------

function scheduleDraw() {
  if (drawTimer !== undefined) return;
  // Envelopes arriving in a burst are drawn once.
  drawTimer = window.setTimeout(() => {
    drawTimer = undefined;
    draw();
  }, 16);
}

/** Message elements by item sequence number, so a redraw only adds what is new. */
const drawn = new Map();

function draw() {
  ui.status.textContent = state.status;
  const n = state.pending.length;
  ui.reviewOpen.disabled = n === 0;
  ui.reviewOpen.textContent = n === 0 ? "No proposals waiting" : `Review ${n} waiting proposal${n === 1 ? "" : "s"}`;
  if (ui.dialog.open) {
    const p = current();
    if (p) {
      const waiting = n - 1;
      ui.dTitle.textContent = waiting > 0 ? `Review proposal (${waiting} more waiting)` : "Review proposal";
    }
  }
  drawMessages();
  drawParticipants();
  ui.streams.replaceChildren(
    ...(state.streams.size === 0
      ? [li("no open streams")]
      : [...state.streams].map(([id, owner]) => li(`${id} of ${owner}`))),
  );
}

/** @param {string} text */
function li(text) {
  const e = document.createElement("li");
  e.textContent = text;
  return e;
}

function drawMessages() {
  const showDiscovery = ui.showDiscovery.checked;
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
      e.className = `msg ${item.type}`;
      if (item.type === "chat") {
        const b = document.createElement("strong");
        b.textContent = `${item.from}: `;
        const span = document.createElement("span");
        span.textContent = item.text;
        e.append(b, span);
      } else if (item.type !== "reasoning") {
        e.textContent = item.text;
      }
      ui.messages.append(e);
      drawn.set(item.seq, e);
    }
    e.hidden = Boolean(item.discovery) && !showDiscovery;
    if (item.type === "reasoning" && item.context) drawFold(e, item.context);
  }
  if (atBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
}

/**
 * A reasoning sequence: one summary line, its thoughts folded below, followed live.
 * @param {HTMLElement} e
 * @param {string} ctx
 */
function drawFold(e, ctx) {
  const f = state.reasoning.get(ctx);
  if (!f) return;
  let details = e.querySelector("details");
  if (!details) {
    details = document.createElement("details");
    const summary = document.createElement("summary");
    const list = document.createElement("ol");
    details.append(summary, list);
    e.append(details);
  }
  const summary = /** @type {HTMLElement} */ (details.querySelector("summary"));
  const list = /** @type {HTMLElement} */ (details.querySelector("ol"));
  summary.textContent = M.foldSummary(f);
  while (list.children.length < f.thoughts.length) list.append(li(f.thoughts[list.children.length]));
}

function drawParticipants() {
  const ids = [...state.members.keys()];
  const selected = ui.grantWho.value;
  ui.grantWho.replaceChildren(
    ...ids.filter((id) => id !== state.me).map((id) => {
      const o = document.createElement("option");
      o.value = id;
      o.textContent = id;
      return o;
    }),
  );
  if (ids.includes(selected)) ui.grantWho.value = selected;
  // Redrawn only when what they show changed, so focus inside the list is not lost.
  const sig = JSON.stringify([...state.members]);
  if (ui.participants.dataset.sig === sig) return;
  ui.participants.dataset.sig = sig;
  ui.participants.replaceChildren(
    ...[...state.members].map(([id, m]) => {
      const e = document.createElement("li");
      e.className = m.online ? "member online" : "member offline";
      const name = document.createElement("p");
      name.className = "member-name";
      name.textContent = `${m.online ? "●" : "○"} ${id}${id === state.me ? " (you)" : ""}`;
      name.setAttribute("aria-label", `${id}${id === state.me ? " (you)" : ""}, ${m.online ? "online" : "offline"}`);
      e.append(name);
      if (m.tools.length > 0) e.append(small(`tools: ${m.tools.join(", ")}`));
      if (m.capabilities.length > 0) e.append(small(`capabilities: ${m.capabilities.join(", ")}`));
      if (id !== state.me) {
        const row = document.createElement("div");
        row.className = "row controls";
        row.setAttribute("role", "group");
        row.setAttribute("aria-label", `Controls for ${id}`);
        for (const c of ["pause", "resume", "forget", "compact", "clear", "restart", "shutdown"]) {
          const text = c[0].toUpperCase() + c.slice(1);
          row.append(
            button(text, `${text} ${id}`, () => {
              if (sendShown({ kind: `participant/${c}`, to: [id], payload: {} })) M.note(state, `sent ${c} to ${id}`);
              draw();
            }),
          );
        }
        e.append(row);
      }
      return e;
    }),
  );
}

/** @param {string} text */
function small(text) {
  const e = document.createElement("p");
  e.className = "small";
  e.textContent = text;
  return e;
}

// A fault of the page shows in the messages rather than silently stopping it.
window.addEventListener("error", (e) => {
  M.note(state, `page error: ${e.message}`);
  scheduleDraw();
});

start();
