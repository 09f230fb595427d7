// @ts-check
// Unit tests of the page's state model (node --test); the browser tests in
// drivers/mew/tests/web.rs drive the whole page.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as M from "./model.js";

const welcome = {
  kind: "system/welcome",
  payload: {
    you: { id: "human", capabilities: [{ kind: "*" }] },
    participants: [
      { id: "agent", capabilities: [{ kind: "mcp/proposal" }] },
      { id: "fs", capabilities: [{ kind: "mcp/response" }] },
    ],
  },
};

const write = {
  method: "tools/call",
  params: { name: "write_file", arguments: { path: "/a", content: "x" } },
};

test("the narrowest grant is the call's method and params, as the core gives it", () => {
  // The same cases as mew-core's automation::tests::the_narrowest_grant_allows_exactly_the_proposed_call.
  assert.deepEqual(M.narrowest(write), { kind: "mcp/request", payload: write });
  assert.deepEqual(M.narrowest({ method: "tools/list" }), {
    kind: "mcp/request",
    payload: { method: "tools/list" },
  });
  // Keys sorted as serde_json prints them.
  assert.equal(
    M.canonical(M.narrowest(write)),
    '{"kind":"mcp/request","payload":{"method":"tools/call","params":{"arguments":{"content":"x","path":"/a"},"name":"write_file"}}}',
  );
});

test("a welcome lists the members with their capabilities", () => {
  const s = M.newState("");
  M.apply(s, welcome);
  assert.equal(s.me, "human");
  assert.deepEqual([...s.members.keys()].sort(), ["agent", "fs", "human"]);
  assert.deepEqual(s.members.get("agent")?.capabilities, ["mcp/proposal"]);
  M.apply(s, { kind: "system/presence", payload: { event: "leave", participant: { id: "agent" } } });
  assert.equal(s.members.get("agent")?.online, false);
  M.setTools(s, "fs", { tools: [{ name: "read_file" }, { name: "write_file" }] });
  assert.deepEqual(s.members.get("fs")?.tools, ["read_file", "write_file"]);
});

test("a crowded space's batched presence updates the members in one line", () => {
  const s = M.newState("");
  M.apply(s, welcome);
  M.apply(s, {
    kind: "system/presence",
    payload: {
      event: "batch",
      online: 1204,
      omitted: 7,
      changes: [
        { event: "join", participant: { id: "newcomer", capabilities: [{ kind: "chat" }] } },
        { event: "leave", participant: { id: "fs" } },
        { event: "join" },
      ],
    },
  });
  assert.equal(s.members.get("newcomer")?.online, true);
  assert.deepEqual(s.members.get("newcomer")?.capabilities, ["chat"]);
  assert.equal(s.members.get("fs")?.online, false);
  assert.equal(s.items.at(-1)?.text, "1 joined, 1 left (7 more not listed; 1204 online)");
});

test("proposals of others wait for review until settled anywhere", () => {
  const s = M.newState("");
  M.apply(s, welcome);
  const out = M.apply(s, { kind: "mcp/proposal", id: "p1", from: "agent", to: ["fs"], payload: write });
  assert.equal(out.proposal?.id, "p1");
  M.apply(s, { kind: "mcp/proposal", id: "p2", from: "agent", to: ["fs"], payload: write });
  // Its own proposals are not for the human to review.
  M.apply(s, { kind: "mcp/proposal", id: "p3", from: "human", to: ["fs"], payload: write });
  assert.deepEqual(s.pending.map((p) => p.id), ["p1", "p2"]);
  const w = M.apply(s, { kind: "mcp/withdraw", from: "agent", correlation_id: ["p1"], payload: { reason: "no" } });
  assert.deepEqual(w.settled, ["p1"]);
  assert.equal(w.decided, false);
  const f = M.apply(s, { kind: "mcp/request", id: "r", from: "other", to: ["fs"], correlation_id: ["p2"], payload: write });
  assert.deepEqual(f.settled, ["p2"]);
  assert.equal(f.decided, true);
  assert.equal(s.pending.length, 0);
  const texts = s.items.map((i) => i.text);
  assert.ok(texts.includes("proposal withdrawn by agent: no (its tools/call write_file on fs)"), texts.join("\n"));
  assert.ok(
    texts.includes('proposal approved by other: agent\'s tools/call write_file on fs: {"content":"x","path":"/a"}'),
    texts.join("\n"),
  );
});

test("discovery is marked, with its answers, and hidden by the page unless asked", () => {
  const s = M.newState("human");
  M.apply(s, { kind: "mcp/request", id: "q", from: "agent", to: ["fs"], payload: { method: "tools/list" } });
  M.apply(s, { kind: "mcp/response", id: "a", from: "fs", correlation_id: ["q"], payload: { result: { tools: [] } } });
  M.apply(s, { kind: "mcp/request", id: "c", from: "agent", to: ["fs"], payload: write });
  // A listing whose request was not seen; a fulfilment that happens to list: shown.
  M.apply(s, { kind: "mcp/response", id: "b", from: "fs", correlation_id: ["unseen"], payload: { result: { prompts: [] } } });
  M.apply(s, { kind: "mcp/request", id: "f", from: "human", to: ["fs"], correlation_id: ["p"], payload: { method: "tools/list" } });
  assert.deepEqual(
    s.items.map((i) => Boolean(i.discovery)),
    [true, true, false, true, false],
  );
});

test("reasoning folds into one item followed live", () => {
  const s = M.newState("human");
  M.apply(s, { kind: "chat", from: "agent", payload: { text: "hi" } });
  M.apply(s, { kind: "reasoning/start", id: "r1", from: "agent", payload: {} });
  M.apply(s, { kind: "reasoning/thought", context: "r1", from: "agent", payload: { message: "first" } });
  M.apply(s, { kind: "reasoning/thought", context: "r1", from: "agent", payload: { message: "second" } });
  const fold = s.reasoning.get("r1");
  assert.ok(fold);
  assert.equal(M.foldSummary(fold), "agent is thinking (2 thought(s)): second");
  M.apply(s, { kind: "reasoning/conclusion", context: "r1", from: "agent", payload: { message: "done" } });
  assert.equal(M.foldSummary(fold), "agent reasoned in 2 step(s): done");
  assert.deepEqual(s.items.map((i) => i.type), ["chat", "reasoning"]);
});

test("slash commands give the terminal's envelopes", () => {
  const s = M.newState("human");
  assert.deepEqual(M.command(s, "hello").send, [{ kind: "chat", payload: { text: "hello", format: "plain" } }]);
  assert.deepEqual(M.command(s, "/pause agent").send, [{ kind: "participant/pause", to: ["agent"], payload: {} }]);
  assert.deepEqual(M.command(s, "/grant agent chat").send, [
    { kind: "capability/grant", to: ["agent"], payload: { recipient: "agent", capabilities: [{ kind: "chat" }] } },
  ]);
  assert.deepEqual(M.command(s, "/pause").notes, ["usage: /pause <participant>"]);
  assert.match(M.command(s, "/nope").notes[0], /unknown command/);
});

test("the message list is bounded", () => {
  const s = M.newState("human");
  for (let i = 0; i < M.MAX_ITEMS + 10; i++) M.apply(s, { kind: "chat", from: "a", payload: { text: String(i) } });
  assert.equal(s.items.length, M.MAX_ITEMS);
  assert.equal(s.items[0].text, "10");
});

test("capabilities show their payload patterns", () => {
  const s = M.newState("");
  M.apply(s, {
    kind: "system/welcome",
    payload: {
      you: { id: "human", capabilities: [{ kind: "*" }] },
      participants: [{ id: "agent", capabilities: [{ kind: "chat" }, { kind: "mcp/request", payload: { method: "tools/list" } }] }],
    },
  });
  assert.deepEqual(s.members.get("agent")?.capabilities, ["chat", 'mcp/request {"method":"tools/list"}']);
  // The same text as the terminal's panel (keys sorted).
  assert.equal(
    M.capLabel({ kind: "mcp/request", payload: { params: { name: "read_*" }, method: "tools/call" } }),
    'mcp/request {"method":"tools/call","params":{"name":"read_*"}}',
  );
});

test("this page's own approval is recorded as an approval of the proposal, with its arguments", () => {
  const s = M.newState("");
  M.apply(s, welcome);
  M.apply(s, { kind: "mcp/proposal", id: "p1", from: "agent", to: ["fs"], payload: write });
  // The dialog took it out of the queue, then the request went out.
  s.pending = [];
  M.apply(s, { kind: "mcp/request", id: "f1", from: "human", to: ["fs"], correlation_id: ["p1"], payload: write });
  const last = s.items.at(-1);
  assert.equal(last?.text, 'proposal approved by human: agent\'s tools/call write_file on fs: {"content":"x","path":"/a"}');
  assert.ok(!s.items.some((i) => i.text.includes("human calls")));
  // Rejected on another screen of the same person: settled here, with the reason.
  M.apply(s, { kind: "mcp/proposal", id: "p2", from: "agent", to: ["fs"], payload: write });
  const out = M.apply(s, { kind: "mcp/reject", id: "r1", from: "human", to: ["agent"], correlation_id: ["p2"], payload: { reason: "not now" } });
  assert.deepEqual(out.settled, ["p2"]);
  assert.equal(s.pending.length, 0);
  assert.equal(s.items.at(-1)?.text, "proposal rejected by human: not now (agent's tools/call write_file on fs)");
});

test("the history comes first, tells past presence without applying it, and repeats nothing", () => {
  const s = M.newState("");
  M.apply(s, { ...welcome, id: "w1" });
  const live = { kind: "chat", id: "c9", from: "agent", payload: { text: "live" } };
  M.apply(s, live);
  const n = M.applyHistory(s, [
    { kind: "chat", id: "c0", from: "human", payload: { text: "please write /a" } },
    { kind: "system/presence", id: "g1", from: "system:gateway", payload: { event: "leave", participant: { id: "agent" } } },
    { kind: "mcp/proposal", id: "p0", from: "agent", to: ["fs"], payload: write },
    live,
  ]);
  assert.equal(n, 3);
  const texts = s.items.map((i) => i.text);
  assert.deepEqual(texts, ["live", "earlier in the space (3):", "please write /a", "agent left", "agent proposes tools/call write_file on fs", "now:"]);
  assert.equal(s.members.get("agent")?.online, true, "a leave of the past does not make a present participant absent");
  assert.deepEqual(s.pending.map((p) => p.id), ["p0"]);
  assert.ok(M.seenBefore(s, live));
  assert.equal(s.lastSeen, "p0");
  assert.equal(M.applyHistory(s, "the gateway answered 403"), 0);
  assert.equal(s.items.at(-1)?.text, "no history: the gateway answered 403");
});
