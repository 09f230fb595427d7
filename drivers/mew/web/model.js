// @ts-check
/**
 * The page's copy of the space view the gateway serves for its session (`/ui/session`):
 * the core's `mew_core::view::ViewState`, kept up to date by applying each change the server
 * sends, in order. No DOM and no socket, so it is tested under Node (`node --test`).
 *
 * Nothing here decides anything about the protocol: who is a member, what waits for review,
 * what is background chatter, what a grant would be and what is suggested all come from the
 * core. The page only draws them and sends the person's commands back.
 *
 * @module model
 */

/** Message items kept (the server keeps as many; a snapshot brings them back). */
export const MAX_ITEMS = 2000;

/**
 * @typedef {"chat" | "note" | "proposal" | "decision" | "request" | "response" | "error" |
 *           "reasoning" | "thought"} ItemKind
 * @typedef {{seq: number, kind: ItemKind, from: string, text: string, body: string[],
 *            background: boolean, context?: string}} Item
 * @typedef {{id: string, me: boolean, person: boolean, capabilities: string[], tools: string[]}} Member
 * @typedef {{id: string, from: string, to: string[], payload: any, what: string, capability: any}} Proposal
 * @typedef {{context: string, who: string, steps: number, latest: string,
 *            conclusion: (string | null), summary: string}} Fold
 * @typedef {{key: string, recipient: string, capability: any, approved: string[],
 *            approvers: string[], first: string, last: string, summary: string}} Suggestion
 * @typedef {{id: string, owner: string}} Stream
 * @typedef {{value: string, title: string}} Choice
 * @typedef {"text" | "number" | "integer" | "boolean" | "choice" | "choices"} FieldKind
 * @typedef {{name: string, title: string, description: string, kind: FieldKind, format?: string,
 *            required: boolean, options: Choice[], default?: any, text: string, hint: string}} Field
 * @typedef {{id: string, from: string, message: string, url?: string, fields: Field[],
 *            problem?: string}} Question
 * @typedef {{participant: string, host: string, url: string, text: string}} Notice
 * @typedef {{
 *   me: string,
 *   status: string,
 *   items: Item[],
 *   members: Member[],
 *   queue: Proposal[],
 *   folds: {[context: string]: Fold},
 *   suggestions: Suggestion[],
 *   streams: Stream[],
 *   background: number,
 *   verbose: boolean,
 *   questions: Question[],
 *   notices: Notice[],
 *   notes: string[],
 * }} State
 *
 * One change from the server: exactly one of these keys.
 * @typedef {{snapshot?: any, item?: Item, members?: Member[], queue?: Proposal[], fold?: Fold,
 *            suggestions?: Suggestion[], streams?: Stream[], status?: string,
 *            background?: {count: number, verbose: boolean}, questions?: Question[],
 *            notices?: Notice[], error?: string}} Change
 *
 * What the page asks (the core's `mew_core::view::Command`).
 * @typedef {{line: string} | {approve: string} | {reject: {proposal: string, reason: string}} |
 *           {always_allow: string} | {later: string} | {grant_suggestion: string} |
 *           {dismiss_suggestion: string} |
 *           {control: {target: string, action: ControlAction}} |
 *           {answer: {question: string, reply: Reply, values: {[name: string]: any}}}} Command
 * @typedef {"accept" | "decline" | "cancel"} Reply
 * @typedef {"pause" | "resume" | "forget" | "compact" | "clear" | "restart" | "shutdown"} ControlAction
 */

/** The participant controls, in the order the page shows them. */
/** @type {ControlAction[]} */
export const CONTROLS = ["pause", "resume", "forget", "compact", "clear", "restart", "shutdown"];

/**
 * An empty view (before the server's first snapshot).
 * @returns {State}
 */
export function newState() {
  return {
    me: "",
    status: "",
    items: [],
    members: [],
    queue: [],
    folds: {},
    suggestions: [],
    streams: [],
    background: 0,
    verbose: false,
    questions: [],
    notices: [],
    notes: [],
  };
}

/**
 * @param {any} v
 * @returns {any[]}
 */
const list = (v) => (Array.isArray(v) ? v : []);

/**
 * What a change touched, so the page redraws only that.
 * @typedef {{all?: boolean, items?: boolean, members?: boolean, queue?: boolean,
 *            folds?: boolean, suggestions?: boolean, streams?: boolean, status?: boolean,
 *            questions?: boolean, notices?: boolean, error?: string}} Touched
 */

/**
 * Applies one change of the server to `s`; returns what it touched. Unknown changes are
 * ignored (a newer server may send more).
 * @param {State} s
 * @param {Change} c
 * @returns {Touched}
 */
export function apply(s, c) {
  if (c.snapshot !== undefined) {
    const v = c.snapshot ?? {};
    s.me = String(v.me ?? "");
    s.status = String(v.status ?? "");
    s.items = list(v.items).slice(-MAX_ITEMS);
    s.members = list(v.members);
    s.queue = list(v.queue);
    s.folds = v.folds && typeof v.folds === "object" ? { ...v.folds } : {};
    s.suggestions = list(v.suggestions);
    s.streams = list(v.streams);
    s.background = Number(v.background ?? 0);
    s.verbose = Boolean(v.verbose);
    s.questions = list(v.questions);
    s.notices = list(v.notices);
    return { all: true };
  }
  if (c.item !== undefined) {
    s.items.push(c.item);
    if (s.items.length > MAX_ITEMS) s.items.splice(0, s.items.length - MAX_ITEMS);
    return { items: true };
  }
  if (c.members !== undefined) {
    s.members = list(c.members);
    const mine = s.members.find((m) => m.me);
    if (mine) s.me = mine.id;
    return { members: true };
  }
  if (c.queue !== undefined) {
    s.queue = list(c.queue);
    return { queue: true };
  }
  if (c.fold !== undefined) {
    s.folds[c.fold.context] = c.fold;
    return { folds: true };
  }
  if (c.suggestions !== undefined) {
    s.suggestions = list(c.suggestions);
    return { suggestions: true };
  }
  if (c.streams !== undefined) {
    s.streams = list(c.streams);
    return { streams: true };
  }
  if (c.status !== undefined) {
    s.status = String(c.status);
    return { status: true };
  }
  if (c.background !== undefined) {
    s.background = Number(c.background.count ?? 0);
    s.verbose = Boolean(c.background.verbose);
    return { items: true };
  }
  if (c.questions !== undefined) {
    s.questions = list(c.questions);
    return { questions: true };
  }
  if (c.notices !== undefined) {
    s.notices = list(c.notices);
    return { notices: true };
  }
  if (c.error !== undefined) {
    return { error: String(c.error) };
  }
  return {};
}

/**
 * The proposal to review now: the first of the queue that the page has not already answered
 * (an answer is on its way to the server; the queue it sends next no longer holds it).
 * @param {State} s
 * @param {Set<string>} answered
 * @returns {Proposal | null}
 */
export function next(s, answered) {
  return s.queue.find((p) => !answered.has(p.id)) ?? null;
}

/**
 * Forgets answers the server has acted on (their proposals left the queue).
 * @param {State} s
 * @param {Set<string>} answered
 */
export function prune(s, answered) {
  const waiting = new Set(s.queue.map((p) => p.id));
  for (const id of answered) if (!waiting.has(id)) answered.delete(id);
}

/**
 * JSON as the page shows it: indented, in the order the server wrote it.
 * @param {any} v
 */
export function pretty(v) {
  return JSON.stringify(v, null, 2) ?? "";
}
