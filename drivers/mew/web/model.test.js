// @ts-check
// Unit tests of the page's copy of the served view (node --test); the browser tests in
// drivers/mew/tests/web.rs drive the whole page against a real gateway.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as M from "./model.js";

/** @param {number} seq @param {string} text @returns {M.Item} */
const item = (seq, text, background = false) => ({
  seq,
  kind: "note",
  from: "",
  text,
  body: [],
  background,
});

/** @param {string} id @returns {M.Proposal} */
const proposal = (id) => ({
  id,
  from: "agent",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "/a" } } },
  what: "tools/call write_file on fs",
  capability: { kind: "mcp/request", payload: { method: "tools/call" } },
});

const snapshot = {
  me: "human",
  status: "joined as human",
  items: [item(1, "joined")],
  members: [
    { id: "human", me: true, person: true, capabilities: ["*"], tools: [] },
    { id: "fs", me: false, person: false, capabilities: ["mcp/response"], tools: ["read_file"] },
  ],
  queue: [proposal("p1")],
  folds: {},
  suggestions: [],
  streams: [],
  background: 0,
  verbose: false,
};

test("a snapshot replaces everything; increments follow it in order", () => {
  const s = M.newState();
  assert.deepEqual(M.apply(s, { item: item(9, "stale") }), { items: true });
  assert.deepEqual(M.apply(s, { snapshot }), { all: true });
  assert.equal(s.me, "human");
  assert.equal(s.status, "joined as human");
  assert.deepEqual(
    s.items.map((i) => i.text),
    ["joined"],
  );
  assert.deepEqual(
    s.members.map((m) => m.id),
    ["human", "fs"],
  );
  M.apply(s, { item: item(2, "said") });
  M.apply(s, { status: "disconnected: gone; reconnecting…" });
  M.apply(s, { members: [snapshot.members[0]] });
  assert.deepEqual(
    s.items.map((i) => i.seq),
    [1, 2],
  );
  assert.equal(s.status, "disconnected: gone; reconnecting…");
  assert.deepEqual(
    s.members.map((m) => m.id),
    ["human"],
  );
  // The snapshot given was not changed by what followed.
  assert.equal(snapshot.items.length, 1);
});

test("the item list stays bounded", () => {
  const s = M.newState();
  M.apply(s, { snapshot });
  for (let i = 0; i < M.MAX_ITEMS + 10; i++) M.apply(s, { item: item(100 + i, `n${i}`) });
  assert.equal(s.items.length, M.MAX_ITEMS);
  assert.equal(s.items.at(-1)?.text, `n${M.MAX_ITEMS + 9}`);
  assert.equal(s.items[0].seq, 110);
});

test("folds are replaced by context; background counts and errors pass through", () => {
  const s = M.newState();
  M.apply(s, { snapshot });
  const fold = { context: "r1", who: "agent", steps: 1, latest: "look", conclusion: null, summary: "agent is thinking (1 thought(s)): look" };
  assert.deepEqual(M.apply(s, { fold }), { folds: true });
  M.apply(s, { fold: { ...fold, steps: 2, conclusion: "done", summary: "agent reasoned in 2 step(s): done" } });
  assert.equal(s.folds.r1.summary, "agent reasoned in 2 step(s): done");
  M.apply(s, { background: { count: 3, verbose: true } });
  assert.deepEqual([s.background, s.verbose], [3, true]);
  assert.deepEqual(M.apply(s, { error: "no proposal x waits for review" }), { error: "no proposal x waits for review" });
  // Something a newer server sends is ignored.
  assert.deepEqual(M.apply(s, /** @type {any} */ ({ novelty: 1 })), {});
});

test("the review follows the server's queue, skipping what the page already answered", () => {
  const s = M.newState();
  M.apply(s, { snapshot });
  M.apply(s, { queue: [proposal("p1"), proposal("p2")] });
  const answered = new Set(["p1"]);
  assert.equal(M.next(s, answered)?.id, "p2");
  // Still waiting at the server: remembered; gone from the queue: forgotten.
  M.prune(s, answered);
  assert.deepEqual([...answered], ["p1"]);
  M.apply(s, { queue: [proposal("p2")] });
  M.prune(s, answered);
  assert.deepEqual([...answered], []);
  answered.add("p2");
  assert.equal(M.next(s, answered), null);
});

test("questions and sign-in notices are replaced whole, and come with a snapshot", () => {
  const s = M.newState();
  /** @type {M.Question} */
  const q = { id: "q1", from: "files", message: "Seats?", fields: [], problem: "Seats is required" };
  M.apply(s, { snapshot: { ...snapshot, questions: [q], notices: [] } });
  assert.deepEqual(s.questions.map((q) => q.problem), ["Seats is required"]);
  assert.deepEqual(M.apply(s, { questions: [] }), { questions: true });
  assert.deepEqual(s.questions, []);
  const n = { participant: "files", host: "auth.example.com", url: "https://auth.example.com/a", text: "files needs you to sign in to auth.example.com" };
  assert.deepEqual(M.apply(s, { notices: [n] }), { notices: true });
  assert.equal(s.notices[0].text, "files needs you to sign in to auth.example.com");
  // An older server's snapshot has neither: empty lists, not undefined.
  M.apply(s, { snapshot });
  assert.deepEqual([s.questions, s.notices], [[], []]);
});

test("JSON is shown as the server wrote it, indented", () => {
  const cap = JSON.parse('{"kind":"mcp/request","payload":{"method":"tools/call","params":{"arguments":{"path":"/a"},"name":"write_file"}}}');
  assert.equal(
    M.pretty(cap),
    '{\n  "kind": "mcp/request",\n  "payload": {\n    "method": "tools/call",\n    "params": {\n      "arguments": {\n        "path": "/a"\n      },\n      "name": "write_file"\n    }\n  }\n}',
  );
});

test("the page's own code holds no protocol rule", async () => {
  const { readFile } = await import("node:fs/promises");
  for (const f of ["app.js", "model.js"]) {
    const src = await readFile(new URL(f, import.meta.url), "utf8");
    for (const rule of ["startsWith(\"mcp/", "tools/list", "capability/grant", "mcp/proposal", "system/presence", "narrowest"]) {
      assert.ok(!src.includes(rule), `${f} mentions ${rule}`);
    }
  }
});
