//! What the interactive client shows, as a plain struct: envelopes in, keys in, actions and
//! a rendering out. Nothing here touches a terminal or a socket, so every screen is tested
//! with ratatui's test backend.

use std::collections::{BTreeMap, VecDeque};

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use super::chatter;
use mew_core::participant::{grant_envelope, revoke_envelope};
use serde_json::{Value, json};

/// Lines of the message pane kept.
const MAX_LINES: usize = 2_000;
/// Proposals waiting for review, at most (the oldest is dropped beyond).
const MAX_PENDING: usize = 256;
/// Input history kept.
const MAX_HISTORY: usize = 200;

/// What the screen asks the program to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send a chat (to everyone).
    Chat(String),
    /// Fulfil a proposal: the `mcp/request` to its addressees, correlated to it.
    Approve {
        /// The proposal's id.
        proposal: String,
    },
    /// Reject a proposal with a reason.
    Reject {
        /// The proposal's id.
        proposal: String,
        /// Why.
        reason: String,
    },
    /// Grant the proposer this capability, then approve.
    AlwaysAllow {
        /// The proposal's id.
        proposal: String,
        /// Who gets the grant.
        recipient: String,
        /// The capability.
        capability: Value,
    },
    /// Send this envelope draft (from a slash command).
    Send(Value),
    /// Leave.
    Quit,
}

/// A proposal waiting for review.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// Its id.
    pub id: String,
    /// Who proposed.
    pub from: String,
    /// Its addressees.
    pub to: Vec<String>,
    /// The proposed request.
    pub payload: Value,
}

impl Proposal {
    /// The narrowest capability that allows exactly this call: its method, tool and
    /// argument values.
    pub fn capability(&self) -> Value {
        mew_core::automation::narrowest(&self.payload)
    }

    fn what(&self) -> String {
        let method = self.payload["method"].as_str().unwrap_or("?");
        match self.payload["params"]["name"].as_str() {
            Some(tool) => format!("{method} {tool} on {}", self.to.join(", ")),
            None => format!("{method} on {}", self.to.join(", ")),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Dialog {
    /// A suggested grant from the approvals seen (progressive automation).
    Suggest,
    /// The first pending proposal, awaiting a key.
    Review,
    /// Typing a reason to reject it.
    Reason(String),
    /// Confirming the grant of "always allow".
    Confirm,
}

/// One entry of the message pane.
#[derive(Debug, Clone)]
enum Item {
    Line(Line<'static>),
    /// A reasoning sequence, drawn folded from [`Screen::reasoning`].
    Reasoning(String),
    /// A heading and a long text under it: a few lines unless expanded (Ctrl-O).
    Long(Line<'static>, Vec<String>),
    /// Machine-to-machine chatter: drawn only with `/verbose`.
    Chatter(Box<Item>),
}

/// A reasoning sequence: its thoughts as they come, then its conclusion.
#[derive(Debug, Clone, Default)]
struct Fold {
    who: String,
    thoughts: u32,
    latest: String,
    conclusion: Option<String>,
}

/// Who is in the space.
#[derive(Debug, Clone, Default, PartialEq)]
struct Member {
    online: bool,
    capabilities: Vec<String>,
    tools: Vec<String>,
}

/// The screen's state.
#[derive(Debug, Default)]
pub struct Screen {
    me: String,
    lines: VecDeque<Item>,
    /// Reasoning sequences by context, folded into one line each.
    reasoning: BTreeMap<String, Fold>,
    input: String,
    history: Vec<String>,
    history_at: Option<usize>,
    members: BTreeMap<String, Member>,
    pending: VecDeque<Proposal>,
    dialog: Option<Dialog>,
    status: String,
    /// Proposals and their outcomes seen, for suggestions (bounded).
    observed: VecDeque<String>,
    /// Suggestions waiting for a decision, and the capabilities already shown.
    suggestions: VecDeque<mew_core::automation::Suggestion>,
    shown: std::collections::BTreeSet<String>,
    /// Open streams: id, owner.
    streams: BTreeMap<String, String>,
    /// Show chatter (`/verbose`).
    verbose: bool,
    /// Chatter entries seen (hidden unless verbose).
    chatter: u64,
    /// Ids of chatter requests, so that their answers are chatter too (bounded).
    chatter_ids: VecDeque<String>,
    /// Long texts shown whole (Ctrl-O).
    expanded: bool,
    /// Proposals seen, so that what becomes of one is told with what it was (bounded).
    proposals: VecDeque<Proposal>,
    /// Ids of the envelopes shown, so that history fetched after a join repeats none
    /// (bounded).
    seen: VecDeque<String>,
    /// Envelopes held while the history is fetched, shown after it; `None` when not
    /// fetching.
    held: Option<Vec<Value>>,
}

/// Proposals remembered for the record (more than can wait for review).
const MAX_PROPOSALS: usize = 4 * MAX_PENDING;
/// Envelope ids remembered against repeats.
const MAX_SEEN: usize = 4_096;
/// Envelopes held while the history is fetched, at most (beyond, shown at once).
const MAX_HELD: usize = 4_096;

/// Chatter request ids remembered.
const MAX_CHATTER_IDS: usize = 1_024;

/// Decided proposals remembered for suggestions.
const MAX_OBSERVED: usize = 5_000;
/// Approvals before a grant is suggested.
const SUGGEST_AFTER: usize = 3;

fn short(v: &Value, max: usize) -> String {
    let mut s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > max {
        s = s.chars().take(max.saturating_sub(1)).collect::<String>() + "…";
    }
    s
}

impl Screen {
    /// A screen for participant `me`.
    pub fn new(me: &str) -> Screen {
        Screen {
            me: me.to_owned(),
            status: "connecting…".into(),
            ..Screen::default()
        }
    }

    /// Proposals waiting, the one under review first.
    #[cfg(test)]
    pub fn pending(&self) -> impl Iterator<Item = &Proposal> {
        self.pending.iter()
    }

    /// The tools discovered, as (participant, tool) pairs.
    pub fn set_tools(&mut self, tools: Vec<(String, String)>) {
        for m in self.members.values_mut() {
            m.tools.clear();
        }
        for (p, t) in tools {
            if let Some(m) = self.members.get_mut(&p) {
                m.tools.push(t);
            }
        }
    }

    /// Sets the status line.
    pub fn set_status(&mut self, s: impl Into<String>) {
        self.status = s.into();
    }

    fn push(&mut self, line: Line<'static>) {
        self.push_item(Item::Line(line));
    }

    fn push_item(&mut self, item: Item) {
        if self.lines.len() >= MAX_LINES
            && let Some(Item::Reasoning(ctx)) = self.lines.pop_front()
        {
            self.reasoning.remove(&ctx);
        }
        self.lines.push_back(item);
    }

    /// Adds machine-to-machine chatter: counted, and drawn only with `/verbose`.
    fn push_chatter(&mut self, item: Item) {
        self.chatter += 1;
        self.push_item(Item::Chatter(Box::new(item)));
    }

    /// Adds a heading with a text under it, folded to a few lines when long.
    fn push_long(&mut self, head: Line<'static>, text: &str) {
        let body = chatter::text_lines(text);
        if body.len() <= 1 && text.chars().count() <= 160 {
            let mut spans = head.spans;
            spans.push(Span::raw(format!(
                " {}",
                body.first().map_or("", |s| s.as_str())
            )));
            self.push(Line::from(spans));
        } else {
            self.push_item(Item::Long(head, body));
        }
    }

    /// The display lines of an entry.
    fn draw_item(&self, item: &Item, out: &mut Vec<Line<'static>>) {
        match item {
            Item::Line(l) => out.push(l.clone()),
            Item::Reasoning(ctx) => out.push(self.fold_line(ctx)),
            Item::Long(head, body) => {
                out.push(head.clone());
                let shown = if self.expanded {
                    body.len()
                } else {
                    body.len().min(chatter::FOLDED_LINES)
                };
                for l in &body[..shown] {
                    out.push(Line::from(format!("    {l}")));
                }
                if shown < body.len() {
                    out.push(Line::from(Span::styled(
                        format!("    … {} more line(s): Ctrl-O expands", body.len() - shown),
                        Style::new().add_modifier(Modifier::DIM),
                    )));
                }
            }
            Item::Chatter(inner) if self.verbose => {
                let mut lines = Vec::new();
                self.draw_item(inner, &mut lines);
                for l in lines {
                    out.push(l.style(Style::new().add_modifier(Modifier::DIM)));
                }
            }
            Item::Chatter(_) => {}
        }
    }

    fn fold_line(&self, ctx: &str) -> Line<'static> {
        let Some(f) = self.reasoning.get(ctx) else {
            return Line::from("");
        };
        let text = match &f.conclusion {
            Some(c) => format!("  ▸ {} reasoned in {} step(s): {c}", f.who, f.thoughts),
            None if f.thoughts == 0 => format!("  ▸ {} is thinking…", f.who),
            None => format!(
                "  ▸ {} is thinking ({} thought(s)): {}",
                f.who, f.thoughts, f.latest
            ),
        };
        Line::from(Span::styled(
            text,
            Style::new().add_modifier(Modifier::ITALIC),
        ))
    }

    /// Applies one join or leave (an announcement's payload, or a change of a batch):
    /// `Some(true)` for a join, `Some(false)` for a leave.
    fn presence(&mut self, p: &Value) -> Option<bool> {
        let who = &p["participant"];
        let pid = who["id"].as_str()?.to_owned();
        match p["event"].as_str()? {
            "join" => {
                self.members.insert(pid, member_of(who));
                Some(true)
            }
            "leave" => {
                if let Some(m) = self.members.get_mut(&pid) {
                    m.online = false;
                }
                Some(false)
            }
            _ => None,
        }
    }

    /// Adds a note from the program (a result, an error).
    pub fn note(&mut self, text: impl Into<String>) {
        let t: String = text.into();
        self.push(Line::from(vec![
            Span::styled("* ", Style::new().add_modifier(Modifier::DIM)),
            Span::raw(t),
        ]));
    }

    /// The history is being fetched: envelopes arriving meanwhile wait for it, so that the
    /// screen reads in order.
    pub fn begin_history(&mut self) {
        if self.held.is_none() {
            self.held = Some(Vec::new());
        }
    }

    /// The id of the last envelope shown: where the next history starts (after a rejoin).
    pub fn last_seen(&self) -> Option<&str> {
        self.seen.back().map(String::as_str)
    }

    /// The recent history the gateway keeps (`GET /participants/{id}/messages`), oldest
    /// first, or why it could not be had; then what arrived while it was fetched. Envelopes
    /// already shown are not shown again; joins and leaves of the past are told, not applied
    /// (the welcome says who is here now).
    pub fn on_history(&mut self, history: Result<Vec<Value>, String>) {
        let held = self.held.take().unwrap_or_default();
        match history {
            Ok(list) => {
                let fresh: Vec<&Value> = list
                    .iter()
                    .filter(|e| e["kind"] != "system/welcome" && !self.was_seen(e))
                    .collect();
                if !fresh.is_empty() {
                    self.note(format!("earlier in the space ({}):", fresh.len()));
                    for e in fresh {
                        self.apply(e, true);
                    }
                    self.note("now:");
                }
            }
            Err(why) => self.note(format!("no history: {why}")),
        }
        for e in held {
            self.on_envelope(&e);
        }
    }

    fn was_seen(&self, env: &Value) -> bool {
        env["id"]
            .as_str()
            .is_some_and(|id| self.seen.iter().any(|s| s == id))
    }

    /// An envelope seen in the space.
    pub fn on_envelope(&mut self, env: &Value) {
        if let Some(held) = &mut self.held {
            if held.len() < MAX_HELD {
                held.push(env.clone());
                return;
            }
            // Too long a wait: show what is held now, and the history when it comes.
            for e in std::mem::take(held) {
                self.apply(&e, false);
            }
        }
        if self.was_seen(env) {
            return;
        }
        self.apply(env, false);
    }

    /// Shows one envelope; `past` for one of the history.
    fn apply(&mut self, env: &Value, past: bool) {
        if let Some(id) = env["id"].as_str() {
            if self.seen.len() >= MAX_SEEN {
                self.seen.pop_front();
            }
            self.seen.push_back(id.to_owned());
        }
        let kind = env["kind"].as_str().unwrap_or_default();
        let from = env["from"].as_str().unwrap_or("?").to_owned();
        let id = env["id"].as_str().unwrap_or_default().to_owned();
        let payload = &env["payload"];
        match kind {
            "system/welcome" => {
                let old = std::mem::take(&mut self.members);
                for p in payload["participants"].as_array().into_iter().flatten() {
                    if let Some(pid) = p["id"].as_str() {
                        let mut m = member_of(p);
                        // Tools outlive a rejoin's welcome until the next discovery.
                        if let Some(o) = old.get(pid) {
                            m.tools = o.tools.clone();
                        }
                        self.members.insert(pid.to_owned(), m);
                    }
                }
                let you = &payload["you"];
                self.me = you["id"].as_str().unwrap_or(&self.me).to_owned();
                self.members.insert(self.me.clone(), member_of(you));
                self.status = format!("joined as {}", self.me);
            }
            "system/presence" if past => {
                if let Some(pid) = payload["participant"]["id"].as_str() {
                    let what = if payload["event"] == "leave" {
                        "left"
                    } else {
                        "joined"
                    };
                    self.note(format!("{pid} {what}"));
                }
            }
            "system/presence" => {
                if payload["event"] == "batch" {
                    // A crowded space's joins and leaves, gathered: one line for all of them.
                    let changes = payload["changes"].as_array().map(Vec::as_slice);
                    let (mut joined, mut left) = (0, 0);
                    for c in changes.unwrap_or_default() {
                        match self.presence(c) {
                            Some(true) => joined += 1,
                            Some(false) => left += 1,
                            None => {}
                        }
                    }
                    let omitted = payload["omitted"].as_u64().unwrap_or(0);
                    self.note(format!(
                        "{joined} joined, {left} left ({omitted} more not listed; {} online)",
                        payload["online"]
                    ));
                } else if let Some(joined) = self.presence(payload) {
                    let pid = payload["participant"]["id"].as_str().unwrap_or_default();
                    let what = if joined { "joined" } else { "left" };
                    self.note(format!("{pid} {what}"));
                }
            }
            "chat" => {
                let text = payload["text"].as_str().unwrap_or_default().to_owned();
                self.push(Line::from(vec![
                    Span::styled(
                        format!("{from}: "),
                        Style::new().add_modifier(Modifier::BOLD),
                    ),
                    Span::raw(text),
                ]));
            }
            "mcp/proposal" => {
                self.observe(env);
                let to = env["to"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let p = Proposal {
                    id,
                    from: from.clone(),
                    to,
                    payload: payload.clone(),
                };
                if self.proposals.len() >= MAX_PROPOSALS {
                    self.proposals.pop_front();
                }
                self.proposals.push_back(p.clone());
                let args = &p.payload["params"]["arguments"];
                if args.is_null() {
                    self.push(Line::from(format!("{from} proposes {}", p.what())));
                } else {
                    let head = Line::from(format!("{from} proposes {}:", p.what()));
                    self.push_long(head, &chatter::value_text(args));
                }
                if from != self.me {
                    if self.pending.len() >= MAX_PENDING {
                        self.pending.pop_front();
                    }
                    self.pending.push_back(p);
                    if self.dialog.is_none() {
                        self.dialog = Some(Dialog::Review);
                    }
                }
            }
            "mcp/withdraw" | "mcp/reject" | "mcp/request" => {
                if kind != "mcp/withdraw" && env.get("correlation_id").is_some() {
                    self.observe(env);
                    self.refresh_suggestions();
                }
                // Settled elsewhere: its dialog closes.
                let settled: Vec<String> = env["correlation_id"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.as_str().map(str::to_owned))
                    .collect();
                let before = self.pending.len();
                self.pending.retain(|p| !settled.contains(&p.id));
                let closed = self.pending.len() < before;
                if closed {
                    if self.pending.is_empty() {
                        self.dialog = None;
                    } else if self.dialog != Some(Dialog::Review) {
                        self.dialog = Some(Dialog::Review);
                    }
                }
                let known = settled
                    .iter()
                    .find_map(|c| self.proposals.iter().find(|p| &p.id == c))
                    .cloned();
                match known {
                    // What became of a proposal, whoever decided (this screen, another
                    // screen of the same person, someone else), with what it was.
                    Some(p) => self.decided(kind, &from, &p, env),
                    None if closed => self.note(format!("proposal settled by {from}")),
                    None if kind == "mcp/request" && from != self.me => {
                        self.on_request(&from, &id, env);
                    }
                    None => {}
                }
            }
            "mcp/response" => self.on_response(&from, env),
            "reasoning/start" => {
                self.reasoning.insert(
                    id.clone(),
                    Fold {
                        who: from.clone(),
                        ..Fold::default()
                    },
                );
                self.push_item(Item::Reasoning(id));
            }
            "reasoning/thought" | "reasoning/conclusion" => {
                let text = short(&payload["message"], 200);
                let ctx = env["context"].as_str().unwrap_or_default();
                match self.reasoning.get_mut(ctx) {
                    Some(f) if kind == "reasoning/thought" => {
                        f.thoughts += 1;
                        f.latest = text;
                    }
                    Some(f) => f.conclusion = Some(text),
                    None => self.push(Line::from(Span::styled(
                        format!("  {from}: {text}"),
                        Style::new().add_modifier(Modifier::ITALIC),
                    ))),
                }
            }
            "system/error" => {
                self.note(format!(
                    "error: {} {}",
                    payload["error"].as_str().unwrap_or_default(),
                    payload["message"].as_str().unwrap_or_default()
                ));
            }
            "stream/open" => {
                if let Some(sid) = payload["stream_id"].as_str() {
                    self.streams.insert(sid.to_owned(), from.clone());
                }
            }
            "stream/close" => {
                if let Some(sid) = payload["stream_id"].as_str() {
                    self.streams.remove(sid);
                }
            }
            "capability/grant" | "capability/revoke" => {
                self.note(format!("{from} {}: {}", kind, short(payload, 120)));
            }
            _ => {}
        }
    }

    /// A proposal's outcome: approved (its fulfilling request, with the arguments it was
    /// called with), rejected (with the reason) or withdrawn.
    fn decided(&mut self, kind: &str, from: &str, p: &Proposal, env: &Value) {
        let whose = if p.from == from {
            "its".to_owned()
        } else {
            format!("{}'s", p.from)
        };
        match kind {
            "mcp/request" => {
                let what = format!("proposal approved by {from}: {whose} {}", p.what());
                let args = &env["payload"]["params"]["arguments"];
                if args.is_null() {
                    self.push(Line::from(what));
                } else {
                    self.push_long(Line::from(what + ":"), &chatter::value_text(args));
                }
            }
            _ => {
                let how = if kind == "mcp/reject" {
                    "rejected"
                } else {
                    "withdrawn"
                };
                let reason = env["payload"]["reason"]
                    .as_str()
                    .map(|r| format!(": {}", short(&Value::from(r), 200)))
                    .unwrap_or_default();
                self.note(format!(
                    "proposal {how} by {from}{reason} ({whose} {})",
                    p.what()
                ));
            }
        }
    }

    /// Someone else's request: discovery is chatter; a tool call shows its arguments.
    fn on_request(&mut self, from: &str, id: &str, env: &Value) {
        let payload = &env["payload"];
        let method = payload["method"].as_str().unwrap_or("?");
        let to = env["to"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let head = Line::from(format!(
            "{from} calls {} on {to}",
            short(&payload["method"], 40)
        ));
        // A request that fulfils a proposal was asked for by a person: never chatter.
        if chatter::is_discovery(method) && env.get("correlation_id").is_none() {
            if self.chatter_ids.len() >= MAX_CHATTER_IDS {
                self.chatter_ids.pop_front();
            }
            self.chatter_ids.push_back(id.to_owned());
            self.push_chatter(Item::Line(head));
            return;
        }
        match payload["params"]["name"].as_str() {
            Some(tool) => {
                let head = Line::from(format!("{from} calls {tool} on {to}:"));
                let args = chatter::value_text(&payload["params"]["arguments"]);
                self.push_long(head, &args);
            }
            None => self.push(head),
        }
    }

    /// An answer: to chatter it is chatter; a long result is folded.
    fn on_response(&mut self, from: &str, env: &Value) {
        let payload = &env["payload"];
        let r = &payload["result"];
        let answers = |id: &Value| id.as_str().map(str::to_owned);
        let to_chatter = env["correlation_id"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(answers)
            .any(|c| self.chatter_ids.contains(&c));
        let text = match r["content"].as_array() {
            Some(items) => items
                .iter()
                .map(|i| {
                    i["text"]
                        .as_str()
                        .map_or_else(|| i.to_string(), str::to_owned)
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None if r.is_null() => chatter::value_text(&payload["error"]),
            None => chatter::value_text(r),
        };
        let head = Line::from(format!("{from} answers:"));
        // A listing is chatter even when it answers this participant's own discovery.
        if to_chatter || chatter::is_listing(r) {
            let body = chatter::text_lines(&text);
            self.push_chatter(Item::Long(head, body));
            return;
        }
        self.push_long(head, &text);
    }

    fn observe(&mut self, env: &Value) {
        if self.observed.len() >= MAX_OBSERVED {
            self.observed.pop_front();
        }
        self.observed.push_back(env.to_string());
    }

    /// New suggestions from what was seen; shown when no review is waiting.
    fn refresh_suggestions(&mut self) {
        let d = mew_core::automation::decisions(self.observed.iter().map(String::as_str));
        for s in mew_core::automation::suggest(&d, SUGGEST_AFTER, &BTreeMap::new()) {
            let key = format!("{}{}", s.recipient, s.capability);
            if self.shown.insert(key) {
                self.suggestions.push_back(s);
            }
        }
        if self.dialog.is_none() && !self.suggestions.is_empty() {
            self.dialog = Some(Dialog::Suggest);
        }
    }

    /// A key; what to do about it.
    pub fn on_key(&mut self, key: KeyEvent) -> Vec<Action> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return vec![Action::Quit];
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('o') {
            self.expanded = !self.expanded;
            return Vec::new();
        }
        match self.dialog.clone() {
            Some(Dialog::Suggest) => {
                let act = match key.code {
                    KeyCode::Char('g') => self
                        .suggestions
                        .pop_front()
                        .map(|s| Action::Send(s.grant_envelope())),
                    KeyCode::Char('d') | KeyCode::Esc => {
                        self.suggestions.pop_front();
                        None
                    }
                    _ => return Vec::new(),
                };
                self.dialog = if !self.pending.is_empty() {
                    Some(Dialog::Review)
                } else if !self.suggestions.is_empty() {
                    Some(Dialog::Suggest)
                } else {
                    None
                };
                act.into_iter().collect()
            }
            Some(Dialog::Review) => self.review_key(key.code),
            Some(Dialog::Reason(mut reason)) => match key.code {
                KeyCode::Enter => self.settle(|p| Action::Reject {
                    proposal: p.id.clone(),
                    reason: if reason.trim().is_empty() {
                        "rejected".into()
                    } else {
                        reason.clone()
                    },
                }),
                KeyCode::Esc => {
                    self.dialog = Some(Dialog::Review);
                    Vec::new()
                }
                KeyCode::Backspace => {
                    reason.pop();
                    self.dialog = Some(Dialog::Reason(reason));
                    Vec::new()
                }
                KeyCode::Char(c) => {
                    reason.push(c);
                    self.dialog = Some(Dialog::Reason(reason));
                    Vec::new()
                }
                _ => Vec::new(),
            },
            Some(Dialog::Confirm) => match key.code {
                KeyCode::Enter | KeyCode::Char('y') => self.settle(|p| Action::AlwaysAllow {
                    proposal: p.id.clone(),
                    recipient: p.from.clone(),
                    capability: p.capability(),
                }),
                KeyCode::Esc | KeyCode::Char('n') => {
                    self.dialog = Some(Dialog::Review);
                    Vec::new()
                }
                _ => Vec::new(),
            },
            None => self.input_key(key.code),
        }
    }

    fn review_key(&mut self, code: KeyCode) -> Vec<Action> {
        match code {
            KeyCode::Char('y') => self.settle(|p| Action::Approve {
                proposal: p.id.clone(),
            }),
            KeyCode::Char('n') => {
                self.dialog = Some(Dialog::Reason(String::new()));
                Vec::new()
            }
            KeyCode::Char('a') => {
                self.dialog = Some(Dialog::Confirm);
                Vec::new()
            }
            KeyCode::Esc => {
                // Deferred: to the back of the queue, and the keyboard back to the input.
                if let Some(p) = self.pending.pop_front() {
                    self.pending.push_back(p);
                }
                self.dialog = None;
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Takes the proposal under review out of the queue with the action for it.
    fn settle(&mut self, f: impl FnOnce(&Proposal) -> Action) -> Vec<Action> {
        let Some(p) = self.pending.pop_front() else {
            self.dialog = None;
            return Vec::new();
        };
        self.dialog = if !self.pending.is_empty() {
            Some(Dialog::Review)
        } else if !self.suggestions.is_empty() {
            Some(Dialog::Suggest)
        } else {
            None
        };
        vec![f(&p)]
    }

    fn input_key(&mut self, code: KeyCode) -> Vec<Action> {
        match code {
            KeyCode::Enter => {
                let line = std::mem::take(&mut self.input);
                self.history_at = None;
                if line.trim().is_empty() {
                    // Enter on an empty line brings deferred proposals back.
                    if !self.pending.is_empty() {
                        self.dialog = Some(Dialog::Review);
                    }
                    return Vec::new();
                }
                if self.history.len() >= MAX_HISTORY {
                    self.history.remove(0);
                }
                self.history.push(line.clone());
                self.command(&line)
            }
            KeyCode::Backspace => {
                self.input.pop();
                Vec::new()
            }
            KeyCode::Up => {
                let at = self
                    .history_at
                    .map_or(self.history.len(), |a| a)
                    .saturating_sub(1);
                if let Some(h) = self.history.get(at) {
                    self.input = h.clone();
                    self.history_at = Some(at);
                }
                Vec::new()
            }
            KeyCode::Char(c) => {
                self.input.push(c);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// A typed line: a chat, or a slash command.
    fn command(&mut self, line: &str) -> Vec<Action> {
        let Some(rest) = line.strip_prefix('/') else {
            return vec![Action::Chat(line.to_owned())];
        };
        let (cmd, args) = rest.split_once(' ').unwrap_or((rest, ""));
        let args = args.trim();
        let to = |ids: &str| -> Vec<String> { ids.split(',').map(str::to_owned).collect() };
        let draft = |kind: &str, to: Vec<String>, payload: Value| {
            Action::Send(json!({"kind": kind, "to": to, "payload": payload}))
        };
        match cmd {
            "quit" | "exit" => vec![Action::Quit],
            "streams" => {
                if self.streams.is_empty() {
                    self.note("no open streams");
                }
                let lines: Vec<String> = self
                    .streams
                    .iter()
                    .map(|(id, owner)| format!("stream {id} of {owner}"))
                    .collect();
                for l in lines {
                    self.note(l);
                }
                Vec::new()
            }
            "verbose" => {
                self.verbose = !self.verbose;
                self.note(if self.verbose {
                    "showing background messages (discovery and other chatter); /verbose hides them"
                } else {
                    "hiding background messages; /verbose shows them"
                });
                Vec::new()
            }
            "help" => {
                for h in HELP {
                    self.note(*h);
                }
                Vec::new()
            }
            "json" => match serde_json::from_str::<Value>(args) {
                Ok(v @ Value::Object(_)) => vec![Action::Send(v)],
                _ => {
                    self.note("usage: /json {\"kind\": ..., \"payload\": ...}");
                    Vec::new()
                }
            },
            "grant" | "revoke" => {
                let mut parts = args.splitn(2, ' ');
                let (Some(who), Some(cap)) = (parts.next(), parts.next()) else {
                    self.note(format!(
                        "usage: /{cmd} <participant> <capability JSON or kind>"
                    ));
                    return Vec::new();
                };
                let cap =
                    serde_json::from_str::<Value>(cap).unwrap_or_else(|_| json!({"kind": cap}));
                let envelope = if cmd == "grant" {
                    grant_envelope(who, vec![cap], "")
                } else {
                    revoke_envelope(who, vec![cap], "")
                };
                vec![Action::Send(envelope)]
            }
            "pause" | "resume" | "forget" | "compact" | "clear" | "restart" | "shutdown" => {
                if args.is_empty() {
                    self.note(format!("usage: /{cmd} <participant>"));
                    return Vec::new();
                }
                vec![draft(&format!("participant/{cmd}"), to(args), json!({}))]
            }
            "status" => {
                if args.is_empty() {
                    self.note("usage: /status <participant>");
                    return Vec::new();
                }
                vec![draft("participant/request-status", to(args), json!({}))]
            }
            "kick" => {
                if args.is_empty() {
                    self.note("usage: /kick <participant>");
                    return Vec::new();
                }
                vec![draft(
                    "space/kick",
                    Vec::new(),
                    json!({"participant_id": args, "reason": "kicked"}),
                )]
            }
            "cancel" => {
                if args.is_empty() {
                    self.note("usage: /cancel <reasoning context id>");
                    return Vec::new();
                }
                vec![Action::Send(
                    json!({"kind": "reasoning/cancel", "context": args, "payload": {"reason": "cancelled"}}),
                )]
            }
            other => {
                self.note(format!("unknown command /{other} (try /help)"));
                Vec::new()
            }
        }
    }

    /// Draws the whole screen.
    pub fn render(&self, f: &mut Frame) {
        let area = f.area();
        let [main, input, status] = Layout::vertical([
            Constraint::Min(3),
            Constraint::Length(3),
            Constraint::Length(1),
        ])
        .areas(area);
        let side = if main.width >= 70 { 24 } else { 0 };
        let [messages, panel] =
            Layout::horizontal([Constraint::Min(20), Constraint::Length(side)]).areas(main);
        let inner_h = messages.height.saturating_sub(2) as usize;
        // The newest entries that can fill the pane (hidden chatter draws nothing).
        let mut shown: Vec<Line> = Vec::new();
        let want = inner_h.max(1) * 4;
        for i in self.lines.iter().rev() {
            let mut lines = Vec::new();
            self.draw_item(i, &mut lines);
            lines.reverse();
            shown.extend(lines);
            if shown.len() >= want {
                break;
            }
        }
        shown.reverse();
        // Keep the newest lines in view: scroll past what does not fit once wrapped.
        let inner_w = usize::from(messages.width.saturating_sub(2)).max(1);
        let total: usize = shown
            .iter()
            .map(|l| l.width().div_ceil(inner_w).max(1))
            .sum();
        let text = Text::from(shown);
        let para = Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .scroll((total.saturating_sub(inner_h) as u16, 0))
            .block(Block::bordered().title(" messages "));
        f.render_widget(para, messages);
        if side > 0 {
            let mut lines: Vec<Line> = Vec::new();
            for (id, m) in &self.members {
                let mark = if m.online { "●" } else { "○" };
                lines.push(Line::from(format!("{mark} {id}")));
                for t in m.tools.iter().take(5) {
                    lines.push(Line::from(format!("  · {t}")));
                }
                if m.tools.len() > 5 {
                    lines.push(Line::from(format!("  · +{} tools", m.tools.len() - 5)));
                }
                // Each with its payload pattern: `mcp/request` limited to `tools/list` must
                // not read as "may call anything".
                for c in m.capabilities.iter().take(MAX_CAPS_SHOWN) {
                    lines.push(Line::from(Span::styled(
                        format!("  {c}"),
                        Style::new().add_modifier(Modifier::DIM),
                    )));
                }
                if m.capabilities.len() > MAX_CAPS_SHOWN {
                    lines.push(Line::from(Span::styled(
                        format!("  +{} more", m.capabilities.len() - MAX_CAPS_SHOWN),
                        Style::new().add_modifier(Modifier::DIM),
                    )));
                }
            }
            f.render_widget(
                Paragraph::new(lines)
                    .wrap(Wrap { trim: false })
                    .block(Block::bordered().title(" participants ")),
                panel,
            );
        }
        let pending = if self.pending.is_empty() {
            String::new()
        } else {
            format!(" ({} to review: Enter) ", self.pending.len())
        };
        f.render_widget(
            Paragraph::new(format!("> {}", self.input))
                .block(Block::bordered().title(format!(" {}{pending}", self.me))),
            input,
        );
        f.render_widget(
            Paragraph::new(format!(
                "{}{}   /help for commands, Ctrl-C to quit",
                self.status,
                match (self.chatter, self.verbose) {
                    (0, _) => String::new(),
                    (n, false) => format!("   {n} background message(s) hidden: /verbose"),
                    (n, true) => format!("   {n} background message(s) shown"),
                }
            )),
            status,
        );
        match (&self.dialog, self.pending.front(), self.suggestions.front()) {
            (Some(Dialog::Suggest), _, Some(s)) => self.render_suggestion(f, area, s),
            (Some(d), Some(p), _) if *d != Dialog::Suggest => self.render_dialog(f, area, d, p),
            _ => {}
        }
    }

    fn render_suggestion(&self, f: &mut Frame, area: Rect, s: &mew_core::automation::Suggestion) {
        let r = centered(area, 76, 10);
        let lines = vec![
            Line::from(format!(
                "{} was approved {} times by {} ({} to {})",
                s.recipient,
                s.approved.len(),
                s.approvers.join(", "),
                s.first,
                s.last
            )),
            Line::from(""),
            Line::from(format!("grant {}", short(&s.capability, 300))),
            Line::from(""),
            Line::from(Span::styled(
                "g grant   d dismiss",
                Style::new().add_modifier(Modifier::BOLD),
            )),
        ];
        f.render_widget(Clear, r);
        f.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: false })
                .block(Block::bordered().title(" suggestion ")),
            r,
        );
    }

    fn render_dialog(&self, f: &mut Frame, area: Rect, d: &Dialog, p: &Proposal) {
        let r = centered(area, 76, 14);
        let args =
            serde_json::to_string_pretty(&p.payload["params"]["arguments"]).unwrap_or_default();
        let mut lines = vec![
            Line::from(format!("{} proposes {}", p.from, p.what())),
            Line::from(""),
        ];
        lines.extend(args.lines().take(6).map(|l| Line::from(format!("  {l}"))));
        lines.push(Line::from(""));
        match d {
            Dialog::Review => lines.push(Line::from(Span::styled(
                "y approve once   n reject   a always allow   Esc later",
                Style::new().add_modifier(Modifier::BOLD),
            ))),
            Dialog::Reason(reason) => {
                lines.push(Line::from(format!("reason: {reason}_")));
                lines.push(Line::from("Enter reject   Esc back"));
            }
            Dialog::Suggest => {}
            Dialog::Confirm => {
                lines.push(Line::from(format!(
                    "grant {}: {}",
                    p.from,
                    short(&p.capability(), 200)
                )));
                lines.push(Line::from("Enter grant and approve   Esc back"));
            }
        }
        let more = if self.pending.len() > 1 {
            format!(" review ({} more waiting) ", self.pending.len() - 1)
        } else {
            " review ".to_owned()
        };
        f.render_widget(Clear, r);
        f.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: false })
                .block(Block::bordered().title(more)),
            r,
        );
    }
}

/// A box of at most `w` x `h` in the middle of `area`.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = area.width.saturating_sub(4).min(w);
    let h = area.height.saturating_sub(4).min(h);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn member_of(p: &Value) -> Member {
    Member {
        tools: Vec::new(),
        online: true,
        capabilities: p["capabilities"]
            .as_array()
            .into_iter()
            .flatten()
            .map(capability_label)
            .collect(),
    }
}

/// Capabilities listed per participant, at most.
const MAX_CAPS_SHOWN: usize = 6;

/// A capability as the participants panel shows it: its kind, and its payload pattern as
/// compact JSON (keys sorted) when it has one, as the web page shows it.
fn capability_label(c: &Value) -> String {
    let kind = c["kind"]
        .as_str()
        .map_or_else(|| c["kind"].to_string(), str::to_owned);
    match c.get("payload") {
        Some(p) if !p.is_null() => format!("{kind} {p}"),
        _ => kind,
    }
}

/// `/help`.
const HELP: &[&str] = &[
    "type a line and Enter to chat; Enter on an empty line reviews waiting proposals",
    "/grant <id> <kind or capability JSON>   /revoke <id> <kind or capability JSON>",
    "/pause /resume /forget /compact /clear /restart /shutdown /status <id>",
    "/kick <id>   /cancel <reasoning context>   /streams   /json <envelope>   /quit",
    "/verbose shows or hides background messages (discovery); Ctrl-O expands long texts",
    "after 3 approvals of the same call shape a grant is suggested: g grant, d dismiss",
];

#[cfg(test)]
mod tests;
