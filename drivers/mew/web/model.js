// @ts-check
/**
 * The space as the page sees it: a plain state object fed with envelopes, with no DOM and
 * no socket, so it is tested under Node (`node --test`). It follows the terminal interface's
 * screen state (drivers/mew/src/tui/screen.rs): the same folding of reasoning, the same
 * review queue, the same narrowest grant (mew_core::automation::narrowest), the same slash
 * commands.
 *
 * @module model
 */

/** Lines of the message list kept. */
export const MAX_ITEMS = 2000;
/** Proposals waiting for review, at most (the oldest is dropped beyond). */
export const MAX_PENDING = 256;
/** Proposals and their outcomes remembered for suggestions. */
export const MAX_OBSERVED = 5000;
/** Approvals of one call shape before a grant is suggested (as in the terminal). */
export const SUGGEST_AFTER = 3;
/** Proposals remembered, so that what becomes of one is told with what it was. */
export const MAX_PROPOSALS = 4 * MAX_PENDING;
/** Envelope ids remembered, so that the history fetched after a join repeats none. */
export const MAX_SEEN = 4096;

/**
 * MCP methods a client sends to learn what a peer offers: hidden unless asked for. The same
 * list as the terminal's (drivers/mew/src/tui/chatter.rs).
 */
const DISCOVERY = new Set([
  "initialize",
  "ping",
  "tools/list",
  "resources/list",
  "resources/templates/list",
  "prompts/list",
  "completion/complete",
  "logging/setLevel",
]);

/**
 * Whether an answer's result is a discovery listing (its request may not have been seen).
 * @param {any} result
 */
export function isListing(result) {
  return ["tools", "resources", "resourceTemplates", "prompts"].some((k) => Array.isArray(result?.[k]));
}

/**
 * @typedef {{[k: string]: any}} Envelope  A MEW envelope as JSON.
 * @typedef {{id: string, from: string, to: string[], payload: any}} Proposal
 * @typedef {{online: boolean, capabilities: string[], tools: string[]}} Member
 * @typedef {{who: string, thoughts: string[], conclusion: (string|null)}} Fold
 * @typedef {{seq: number, type: string, from?: string, text: string, discovery?: boolean,
 *            context?: string}} Item
 * @typedef {{recipient: string, capability: any, approved: string[], approvers: string[],
 *            first: string, last: string, grant: any}} Suggestion
 * @typedef {{
 *   me: string,
 *   seq: number,
 *   items: Item[],
 *   reasoning: Map<string, Fold>,
 *   members: Map<string, Member>,
 *   pending: Proposal[],
 *   streams: Map<string, string>,
 *   observed: Envelope[],
 *   discoveryRequests: Set<string>,
 *   proposals: Map<string, Proposal>,
 *   seen: Set<string>,
 *   lastSeen: string,
 *   status: string,
 * }} State
 */

/**
 * A fresh state for participant `me`.
 * @param {string} me
 * @returns {State}
 */
export function newState(me) {
  return {
    me,
    seq: 0,
    items: [],
    reasoning: new Map(),
    members: new Map(),
    pending: [],
    streams: new Map(),
    observed: [],
    discoveryRequests: new Set(),
    proposals: new Map(),
    seen: new Set(),
    lastSeen: "",
    status: "connecting…",
  };
}

/**
 * The narrowest capability that allows exactly this proposed call: its method and its params
 * as proposed. The same rule as `mew_core::automation::narrowest` (the tests compare them).
 * @param {any} payload  the proposal's payload
 * @returns {any}
 */
export function narrowest(payload) {
  /** @type {any} */
  const p = { method: payload?.method ?? null };
  const params = payload?.params;
  if (params && typeof params === "object" && !Array.isArray(params)) {
    p.params = params;
  }
  return { kind: "mcp/request", payload: p };
}

/**
 * JSON with object keys sorted, as serde_json prints a `Value` (its maps are ordered), so
 * the page shows a capability byte for byte as the terminal does.
 * @param {any} v
 * @param {number} [indent]
 * @returns {string}
 */
export function canonical(v, indent) {
  /** @param {any} x @returns {any} */
  const sort = (x) => {
    if (Array.isArray(x)) return x.map(sort);
    if (x && typeof x === "object") {
      /** @type {{[k: string]: any}} */
      const o = {};
      for (const k of Object.keys(x).sort()) o[k] = sort(x[k]);
      return o;
    }
    return x;
  };
  return JSON.stringify(sort(v), null, indent);
}

/**
 * Shortens a value for one line.
 * @param {any} v
 * @param {number} max
 */
export function short(v, max) {
  const s = typeof v === "string" ? v : JSON.stringify(v ?? null);
  return [...s].length > max ? [...s].slice(0, max - 1).join("") + "…" : s;
}

/**
 * What a proposal asks for, in words: "tools/call write_file on fs".
 * @param {Proposal} p
 */
export function describe(p) {
  const method = p.payload?.method ?? "?";
  const tool = p.payload?.params?.name;
  return `${method}${typeof tool === "string" ? " " + tool : ""} on ${p.to.join(", ")}`;
}

/**
 * A capability as the page shows it: its kind, and its payload pattern as compact JSON (keys
 * sorted) when it has one, as the terminal shows it: an `mcp/request` limited to
 * `tools/list` must not read as "may call anything".
 * @param {any} c
 */
export function capLabel(c) {
  const kind = typeof c?.kind === "string" ? c.kind : canonical(c?.kind ?? null);
  return c?.payload === undefined || c?.payload === null ? kind : `${kind} ${canonical(c.payload)}`;
}

/**
 * Applies one join or leave (an announcement's payload, or a change of a batch).
 * @param {State} s
 * @param {any} c
 * @returns {"join" | "leave" | null}
 */
function presence(s, c) {
  const p = c?.participant ?? {};
  if (typeof p.id !== "string") return null;
  if (c.event === "join") {
    const m = memberOf(p);
    m.tools = s.members.get(p.id)?.tools ?? [];
    s.members.set(p.id, m);
    return "join";
  }
  if (c.event === "leave") {
    const m = s.members.get(p.id);
    if (m) m.online = false;
    return "leave";
  }
  return null;
}

/**
 * @param {any} p  a participant entry of a welcome or presence
 * @returns {Member}
 */
function memberOf(p) {
  const caps = Array.isArray(p?.capabilities) ? p.capabilities : [];
  return { online: true, capabilities: caps.map(capLabel), tools: [] };
}

/**
 * @param {State} s
 * @param {Omit<Item, "seq">} item
 */
function push(s, item) {
  s.seq += 1;
  s.items.push({ seq: s.seq, ...item });
  while (s.items.length > MAX_ITEMS) {
    const gone = s.items.shift();
    if (gone?.type === "reasoning" && gone.context) s.reasoning.delete(gone.context);
  }
}

/**
 * Adds a note (a result, an error of the page itself).
 * @param {State} s
 * @param {string} text
 */
export function note(s, text) {
  push(s, { type: "note", text });
}

/** @param {State} s @param {Envelope} env */
function observe(s, env) {
  s.observed.push(env);
  if (s.observed.length > MAX_OBSERVED) s.observed.shift();
}

/**
 * The ids an envelope correlates to.
 * @param {Envelope} env
 * @returns {string[]}
 */
function correlated(env) {
  const c = env.correlation_id;
  if (typeof c === "string") return [c];
  return Array.isArray(c) ? c.filter((x) => typeof x === "string") : [];
}

/**
 * Whether an MCP method is discovery (listing what a peer offers).
 * @param {unknown} method
 */
export function isDiscovery(method) {
  return typeof method === "string" && (DISCOVERY.has(method) || method.startsWith("notifications/"));
}

/**
 * Whether this envelope was applied already (the history repeats what arrived live).
 * @param {State} s
 * @param {Envelope} env
 */
export function seenBefore(s, env) {
  return typeof env.id === "string" && s.seen.has(env.id);
}

/**
 * Applies the recent history the gateway keeps (`GET /participants/{id}/messages`, oldest
 * first), or says why there is none. Envelopes already applied are skipped; joins and leaves
 * of the past are told, not applied (the welcome says who is here now). Returns how many
 * were applied.
 * @param {State} s
 * @param {Envelope[] | string} history  the envelopes, or why they could not be had
 */
export function applyHistory(s, history) {
  if (typeof history === "string") {
    note(s, `no history: ${history}`);
    return 0;
  }
  const fresh = history.filter((e) => e && typeof e === "object" && e.kind !== "system/welcome" && !seenBefore(s, e));
  if (fresh.length === 0) return 0;
  note(s, `earlier in the space (${fresh.length}):`);
  for (const e of fresh) apply(s, e, true);
  note(s, "now:");
  return fresh.length;
}

/**
 * What became of a proposal, told with what it was: approved (with the arguments the
 * fulfilling request ran with), rejected or withdrawn (with the reason).
 * @param {State} s
 * @param {string} kind
 * @param {string} from
 * @param {Proposal} p
 * @param {any} payload  the deciding envelope's payload
 */
function decided(s, kind, from, p, payload) {
  const whose = p.from === from ? "its" : `${p.from}'s`;
  if (kind === "mcp/request") {
    const args = payload.params?.arguments;
    const shown = args === undefined || args === null ? "" : `: ${short(canonical(args), 400)}`;
    push(s, { type: "decision", from, text: `proposal approved by ${from}: ${whose} ${describe(p)}${shown}` });
    return;
  }
  const how = kind === "mcp/reject" ? "rejected" : "withdrawn";
  const why = typeof payload.reason === "string" ? `: ${short(payload.reason, 200)}` : "";
  note(s, `proposal ${how} by ${from}${why} (${whose} ${describe(p)})`);
}

/**
 * Applies an envelope seen in the space (`past`: one of the history). Returns what the page
 * must do beyond redrawing: `settled` lists proposals closed by someone else (their dialogs
 * close), `decided` is true when a proposal was fulfilled or rejected (suggestions may
 * change).
 * @param {State} s
 * @param {Envelope} env
 * @param {boolean} [past]
 * @returns {{settled: string[], decided: boolean, proposal: (Proposal|null)}}
 */
export function apply(s, env, past = false) {
  if (typeof env.id === "string") {
    s.seen.add(env.id);
    // A welcome on a socket is not kept in the gateway's history: no place to resume from.
    if (env.kind !== "system/welcome") s.lastSeen = env.id;
    if (s.seen.size > MAX_SEEN) {
      const first = s.seen.values().next().value;
      if (first !== undefined) s.seen.delete(first);
    }
  }
  const kind = typeof env.kind === "string" ? env.kind : "";
  const from = typeof env.from === "string" ? env.from : "?";
  const id = typeof env.id === "string" ? env.id : "";
  const payload = env.payload && typeof env.payload === "object" ? env.payload : {};
  /** @type {{settled: string[], decided: boolean, proposal: (Proposal|null)}} */
  const out = { settled: [], decided: false, proposal: null };
  switch (kind) {
    case "system/welcome": {
      const old = s.members;
      s.members = new Map();
      for (const p of Array.isArray(payload.participants) ? payload.participants : []) {
        if (typeof p?.id !== "string") continue;
        const m = memberOf(p);
        // Tools outlive a rejoin's welcome until the next discovery.
        m.tools = old.get(p.id)?.tools ?? [];
        s.members.set(p.id, m);
      }
      const you = payload.you ?? {};
      if (typeof you.id === "string") s.me = you.id;
      s.members.set(s.me, memberOf(you));
      s.status = `joined as ${s.me}`;
      break;
    }
    case "system/presence": {
      if (past) {
        const who = payload.participant?.id;
        if (typeof who === "string") note(s, `${who} ${payload.event === "leave" ? "left" : "joined"}`);
        break;
      }
      if (payload.event === "batch") {
        // A crowded space's joins and leaves, gathered: one line for all of them.
        const changes = Array.isArray(payload.changes) ? payload.changes : [];
        let joined = 0;
        let left = 0;
        for (const c of changes) {
          const r = presence(s, c);
          if (r === "join") joined += 1;
          if (r === "leave") left += 1;
        }
        const omitted = typeof payload.omitted === "number" ? payload.omitted : 0;
        note(s, `${joined} joined, ${left} left (${omitted} more not listed; ${payload.online} online)`);
      } else {
        const r = presence(s, payload);
        if (r) note(s, `${payload.participant.id} ${r === "join" ? "joined" : "left"}`);
      }
      break;
    }
    case "chat":
      push(s, { type: "chat", from, text: typeof payload.text === "string" ? payload.text : "" });
      break;
    case "mcp/proposal": {
      observe(s, env);
      const to = Array.isArray(env.to) ? env.to.filter((x) => typeof x === "string") : [];
      /** @type {Proposal} */
      const p = { id, from, to, payload };
      s.proposals.set(id, p);
      if (s.proposals.size > MAX_PROPOSALS) {
        const first = s.proposals.keys().next().value;
        if (first !== undefined) s.proposals.delete(first);
      }
      push(s, { type: "proposal", from, text: `${from} proposes ${describe(p)}` });
      if (from !== s.me) {
        s.pending.push(p);
        if (s.pending.length > MAX_PENDING) s.pending.shift();
        out.proposal = p;
      }
      break;
    }
    case "mcp/withdraw":
    case "mcp/reject":
    case "mcp/request": {
      const ids = correlated(env);
      if (kind !== "mcp/withdraw" && ids.length > 0) {
        observe(s, env);
        out.decided = true;
      }
      const before = s.pending.length;
      s.pending = s.pending.filter((p) => !ids.includes(p.id));
      if (s.pending.length < before) out.settled = ids;
      const known = ids.map((c) => s.proposals.get(c)).find((p) => p !== undefined);
      if (known) {
        // Whoever decided (this page, another screen of the same person, someone else).
        decided(s, kind, from, known, payload);
      } else if (out.settled.length > 0) {
        note(s, `proposal settled by ${from}`);
      } else if (kind === "mcp/request") {
        // A request that fulfils a proposal was asked for by a person: never chatter.
        const discovery = isDiscovery(payload.method) && ids.length === 0;
        if (discovery) s.discoveryRequests.add(id);
        if (s.discoveryRequests.size > MAX_OBSERVED) {
          const first = s.discoveryRequests.values().next().value;
          if (first !== undefined) s.discoveryRequests.delete(first);
        }
        const tool = payload.params?.name;
        const what = `${short(payload.method, 40)}${typeof tool === "string" ? " " + tool : ""}`;
        push(s, { type: "request", from, discovery, text: `${from} calls ${what} on ${(env.to ?? []).join(", ")}` });
      } else if (kind === "mcp/reject") {
        push(s, { type: "error", from, text: `${from} rejects: ${short(payload.reason ?? "", 200)}` });
      }
      break;
    }
    case "mcp/response": {
      const r = payload.result;
      const discovery = correlated(env).some((c) => s.discoveryRequests.has(c)) || isListing(r);
      const text =
        typeof r?.content?.[0]?.text === "string"
          ? r.content[0].text
          : short(r === undefined || r === null ? payload.error : r, 200);
      const failed = payload.error !== undefined && payload.error !== null;
      push(s, { type: failed ? "error" : "response", from, discovery, text: `${from} answers: ${text}` });
      break;
    }
    case "reasoning/start":
      s.reasoning.set(id, { who: from, thoughts: [], conclusion: null });
      push(s, { type: "reasoning", from, context: id, text: "" });
      break;
    case "reasoning/thought":
    case "reasoning/conclusion": {
      const text = short(payload.message ?? payload.reasoning ?? "", 400);
      const ctx = typeof env.context === "string" ? env.context : "";
      const f = s.reasoning.get(ctx);
      if (f && kind === "reasoning/thought") f.thoughts.push(text);
      else if (f) f.conclusion = text;
      else push(s, { type: "thought", from, text: `${from}: ${text}` });
      break;
    }
    case "system/error":
      push(s, {
        type: "error",
        from,
        text: `error: ${payload.error ?? ""} ${payload.message ?? ""}`.trim(),
      });
      break;
    case "stream/open":
      if (typeof payload.stream_id === "string") s.streams.set(payload.stream_id, from);
      break;
    case "stream/close":
      if (typeof payload.stream_id === "string") s.streams.delete(payload.stream_id);
      break;
    case "capability/grant":
    case "capability/revoke":
      note(s, `${from} ${kind}: ${short(payload, 160)}`);
      break;
    default:
      break;
  }
  return out;
}

/**
 * A reasoning fold's one-line summary, as the terminal draws it.
 * @param {Fold} f
 */
export function foldSummary(f) {
  if (f.conclusion !== null) return `${f.who} reasoned in ${f.thoughts.length} step(s): ${f.conclusion}`;
  if (f.thoughts.length === 0) return `${f.who} is thinking…`;
  return `${f.who} is thinking (${f.thoughts.length} thought(s)): ${f.thoughts[f.thoughts.length - 1]}`;
}

/**
 * Sets the tools of each member from a `tools/list` answer.
 * @param {State} s
 * @param {string} who
 * @param {any} result
 */
export function setTools(s, who, result) {
  const m = s.members.get(who);
  if (!m || !Array.isArray(result?.tools)) return;
  m.tools = result.tools.map((/** @type {any} */ t) => String(t?.name ?? "?"));
}

/**
 * A typed line: a chat or a slash command, as in the terminal (`/help` lists them).
 * Returns the envelope drafts to send (`kind`, `to`, `payload`, maybe `context`), or a
 * usage note.
 * @param {State} s
 * @param {string} line
 * @returns {{send: Envelope[], notes: string[]}}
 */
export function command(s, line) {
  if (!line.startsWith("/")) return { send: [{ kind: "chat", payload: { text: line, format: "plain" } }], notes: [] };
  const rest = line.slice(1);
  const sp = rest.indexOf(" ");
  const cmd = sp < 0 ? rest : rest.slice(0, sp);
  const args = sp < 0 ? "" : rest.slice(sp + 1).trim();
  /** @param {string} kind @param {string[]} to @param {any} payload */
  const draft = (kind, to, payload) => ({ send: [{ kind, to, payload }], notes: [] });
  /** @param {string} n */
  const usage = (n) => ({ send: [], notes: [n] });
  switch (cmd) {
    case "help":
      return { send: [], notes: HELP };
    case "streams":
      return {
        send: [],
        notes: s.streams.size === 0 ? ["no open streams"] : [...s.streams].map(([i, o]) => `stream ${i} of ${o}`),
      };
    case "json":
      try {
        const v = JSON.parse(args);
        if (v && typeof v === "object" && !Array.isArray(v)) return { send: [v], notes: [] };
      } catch {
        // falls through to the usage
      }
      return usage('usage: /json {"kind": ..., "payload": ...}');
    case "grant":
    case "revoke": {
      const m = /^(\S+)\s+(.+)$/.exec(args);
      if (!m) return usage(`usage: /${cmd} <participant> <capability JSON or kind>`);
      let cap;
      try {
        cap = JSON.parse(m[2]);
      } catch {
        cap = { kind: m[2] };
      }
      return draft(`capability/${cmd}`, [m[1]], { recipient: m[1], capabilities: [cap] });
    }
    case "pause":
    case "resume":
    case "forget":
    case "compact":
    case "clear":
    case "restart":
    case "shutdown":
      if (!args) return usage(`usage: /${cmd} <participant>`);
      return draft(`participant/${cmd}`, args.split(","), {});
    case "status":
      if (!args) return usage("usage: /status <participant>");
      return draft("participant/request-status", args.split(","), {});
    case "kick":
      if (!args) return usage("usage: /kick <participant>");
      return draft("space/kick", [], { participant_id: args, reason: "kicked" });
    case "cancel":
      if (!args) return usage("usage: /cancel <reasoning context id>");
      return { send: [{ kind: "reasoning/cancel", context: args, payload: { reason: "cancelled" } }], notes: [] };
    default:
      return usage(`unknown command /${cmd} (try /help)`);
  }
}

/** `/help`. */
export const HELP = [
  "type a line and Enter to chat; r reviews waiting proposals",
  "/grant <id> <kind or capability JSON>   /revoke <id> <kind or capability JSON>",
  "/pause /resume /forget /compact /clear /restart /shutdown /status <id>",
  "/kick <id>   /cancel <reasoning context>   /streams   /json <envelope>",
  "after 3 approvals of the same call shape a grant is suggested in the automation card",
];
