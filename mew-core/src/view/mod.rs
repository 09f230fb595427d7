//! The space view, sans-IO: the one model of what a person sees of a space. The terminal
//! interface (`mew client`) and the web page render it; neither holds a rule of its own.
//!
//! A [`View`] is fed the participant's [`Event`]s (every envelope arrives as
//! [`Event::Message`]), the history the gateway keeps (fetched after each join, when the view
//! asks with [`Action::FetchHistory`]) and the tools discovered; the person's [`Command`]s go
//! in through [`View::handle_command`]. Out come [`Action`]s for the participant (fulfil,
//! reject, grant, chat, send) and the [`ViewState`], whole or as [`Change`]s.
//!
//! | input | what it may queue |
//! |---|---|
//! | [`handle_event`](View::handle_event) | `Change`s; `Action::FetchHistory` on `Ready` |
//! | [`handle_history`](View::handle_history) | `Change`s |
//! | [`handle_tools`](View::handle_tools) | `Change::Members` |
//! | [`handle_command`](View::handle_command) | `Action`s, `Change`s; `Err` for a command refused |
//! | [`note`](View::note) | `Change::Item` |
//!
//! What it keeps, each bounded ([`ViewLimits`]):
//! - members: ourselves and the others as the participant SDK keeps them
//!   ([`Members`]: leavers dropped, at most `members`), with capabilities and tools;
//! - the review queue: proposals of others, oldest first; settled elsewhere (fulfilled,
//!   rejected, withdrawn, by anyone) they leave it;
//! - items: chats, notes, proposals and the record of each decision told with what it was
//!   (`proposal approved by human: agent's tools/call write_file on files: {args}`),
//!   reasoning folded into one item per sequence, and background items (discovery and its
//!   answers, [`chatter`]) counted and shown only when verbose;
//! - suggestions: grants the approvals seen would justify ([`crate::automation`]);
//! - open streams;
//! - after a join, envelopes arriving while the history is fetched are held, and shown after
//!   it; nothing is shown twice. Joins and leaves of the history are told, not applied (the
//!   welcome says who is here now); their live copy, held or arriving after the history,
//!   applies them without telling them again.

mod apply;
pub mod ask;
pub mod chatter;
mod command;
mod types;

#[cfg(test)]
mod tests;

pub use ask::{Choice, FORWARDED, Field, FieldKind, Notice, Question, Reply};
pub use command::{ALWAYS_ALLOW_REASON, HELP};
pub use types::{
    Action, Change, Command, ControlAction, Fold, Item, ItemKind, Member, Proposal, Stream,
    Suggestion, ViewError, ViewLimits, ViewState,
};

use crate::envelope::{Envelope, Kind};
use crate::participant::{AvailableTool, Event, Members};
use std::collections::{BTreeMap, VecDeque};

/// What a person sees of a space, fed by a participant's events and the person's commands.
#[derive(Debug)]
pub struct View {
    limits: ViewLimits,
    state: ViewState,
    seq: u64,
    /// The others, by the participant's own rule.
    others: Members,
    /// Our capabilities (labels) and whether we are a person, from the welcome.
    mine: Vec<String>,
    me_person: bool,
    /// Tools discovered, by participant.
    tools: BTreeMap<String, Vec<String>>,
    /// Proposals remembered for the record (more than can wait for review).
    proposals: VecDeque<Proposal>,
    /// Proposals and their outcomes, as JSON envelopes, for suggestions.
    observed: VecDeque<String>,
    /// Suggestions already made (by key), never made twice.
    suggested: VecDeque<String>,
    /// Ids of background requests, so that their answers are background too.
    background_ids: VecDeque<String>,
    /// Ids of the envelopes shown (in order, and by id: `true` while one told from the
    /// history waits for its live copy, which alone changes who is here).
    seen: VecDeque<String>,
    seen_set: BTreeMap<String, bool>,
    /// Where a history fetch resumes: the last envelope shown that the gateway keeps.
    last_seen: Option<String>,
    /// Envelopes held while the history is fetched; `None` when not fetching.
    held: Option<Vec<Envelope>>,
    /// Questions open, in step with `state.questions`.
    open: VecDeque<ask::Open>,
    /// Questions asked so far (their ids).
    asked: u64,
    actions: VecDeque<Action>,
    changes: VecDeque<Change>,
    /// Increments were dropped (or none was sent yet): the next change is a snapshot.
    snapshot_due: bool,
}

impl View {
    /// A view for participant `me`.
    pub fn new(me: &str, limits: ViewLimits) -> View {
        let mut view = View {
            limits,
            state: ViewState {
                me: me.to_owned(),
                status: "connecting…".into(),
                ..ViewState::default()
            },
            seq: 0,
            others: Members::new(limits.members),
            mine: Vec::new(),
            me_person: false,
            tools: BTreeMap::new(),
            proposals: VecDeque::new(),
            observed: VecDeque::new(),
            suggested: VecDeque::new(),
            background_ids: VecDeque::new(),
            seen: VecDeque::new(),
            seen_set: BTreeMap::new(),
            last_seen: None,
            held: None,
            open: VecDeque::new(),
            asked: 0,
            actions: VecDeque::new(),
            changes: VecDeque::new(),
            snapshot_due: true,
        };
        view.refresh_members();
        view
    }

    /// Everything shown now.
    pub fn state(&self) -> &ViewState {
        &self.state
    }

    /// The next thing the participant must do, in order, until `None`.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next change, in order, until `None`; the first is a whole snapshot, and so is the
    /// next after more than `limits.changes` waited.
    pub fn poll_change(&mut self) -> Option<Change> {
        if self.snapshot_due {
            self.snapshot_due = false;
            self.changes.clear();
            return Some(Change::Snapshot(Box::new(self.state.clone())));
        }
        self.changes.pop_front()
    }

    /// The id of the last envelope shown that the gateway keeps: where the next history
    /// fetch starts.
    pub fn last_seen(&self) -> Option<&str> {
        self.last_seen.as_deref()
    }

    /// A proposal remembered (waiting or decided), by id.
    pub fn proposal(&self, id: &str) -> Option<&Proposal> {
        self.proposals.iter().find(|p| p.id == id)
    }

    /// One event of the participant.
    pub fn handle_event(&mut self, event: &Event) {
        match event {
            Event::Message(env) => self.on_message(env),
            Event::Ready { reconnected, .. } => {
                if *reconnected {
                    self.note("joined");
                }
                // What happened before this join (or while away), for the reviewer:
                // envelopes arriving meanwhile wait for it, so that the list reads in order.
                if self.held.is_none() {
                    self.held = Some(Vec::new());
                }
                self.actions.push_back(Action::FetchHistory {
                    since: self.last_seen.clone(),
                });
            }
            Event::Disconnected { reason } => {
                self.set_status(format!("disconnected: {reason}; reconnecting…"));
            }
            Event::Replaced { reason } => self.set_status(format!("replaced: {reason}")),
            Event::Forwarded {
                call_id,
                from,
                method,
                params,
                explicit,
            } => self.on_forwarded(call_id.0, from, method, params.as_ref(), *explicit),
            Event::GaveUp { attempts } => {
                self.set_status(format!(
                    "connection lost; gave up after {attempts} attempts"
                ));
            }
            _ => {}
        }
    }

    /// The history the gateway keeps (`GET /participants/{id}/messages`), oldest first, or
    /// why it could not be had; then what was held while it was fetched. Envelopes already
    /// shown are not shown again.
    pub fn handle_history(&mut self, history: Result<Vec<Envelope>, String>) {
        let held = self.held.take().unwrap_or_default();
        match history {
            Ok(list) => {
                let fresh: Vec<&Envelope> = list
                    .iter()
                    .filter(|e| e.kind != Kind::SystemWelcome && !self.seen_set.contains_key(&e.id))
                    .collect();
                // Told, whether its live copy came already (held), comes later or never:
                // the live copy alone changes who is here ([`View::live`]).
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
            self.on_message(&e);
        }
    }

    /// The tools discovered on the others (the participant's `available_tools`); those of
    /// a member outlive a rejoin's welcome until the next discovery.
    pub fn handle_tools(&mut self, tools: &[AvailableTool]) {
        self.tools.clear();
        for t in tools {
            if self.others.contains(&t.participant) {
                let list = self.tools.entry(t.participant.clone()).or_default();
                list.push(t.tool.name.clone());
            }
        }
        self.refresh_members();
    }

    /// A note of the program (a result, an error), appended to the items.
    pub fn note(&mut self, text: impl Into<String>) {
        self.push(ItemKind::Note, "", text.into(), Vec::new(), false);
    }

    /// An envelope seen live: held while a history is fetched, skipped when already shown.
    fn on_message(&mut self, env: &Envelope) {
        // Who is here now is not history: a welcome applies at once.
        if env.kind == Kind::SystemWelcome {
            return self.apply(env, false);
        }
        if let Some(held) = &mut self.held {
            if held.len() < self.limits.held {
                held.push(env.clone());
                return;
            }
            // Too long a wait: show what is held now, and the history when it comes.
            for e in std::mem::take(held) {
                self.live(&e);
            }
        }
        self.live(env);
    }

    /// The one rule for an envelope's live copy, in whatever order it and the history come:
    /// it is shown unless it was, and it changes who is here (and their status) exactly
    /// once, even when the history told it first (the gateway may keep an envelope before
    /// its live copy arrives, so a join told from the history would otherwise never apply).
    fn live(&mut self, env: &Envelope) {
        match self.seen_set.get_mut(&env.id) {
            None => self.apply(env, false),
            Some(told) if *told => {
                *told = false;
                self.take_effect(env);
            }
            Some(_) => {}
        }
    }

    fn set_status(&mut self, status: String) {
        self.state.status = status;
        self.changed(|s| Change::Status(s.status.clone()));
    }

    /// Queues a change for [`View::poll_change`]; too many waiting become one snapshot.
    /// The change is made only when it will be read: a renderer that reads the state and
    /// never polls changes pays nothing for them.
    fn changed(&mut self, make: impl FnOnce(&ViewState) -> Change) {
        if self.snapshot_due {
            return;
        }
        if self.changes.len() >= self.limits.changes {
            self.changes.clear();
            self.snapshot_due = true;
            return;
        }
        let change = make(&self.state);
        self.changes.push_back(change);
    }

    /// Appends an item (the oldest goes beyond the bound, with its fold).
    fn push(&mut self, kind: ItemKind, from: &str, text: String, body: Vec<String>, bg: bool) {
        self.push_item(kind, from, text, body, bg, None);
    }

    fn push_item(
        &mut self,
        kind: ItemKind,
        from: &str,
        text: String,
        body: Vec<String>,
        background: bool,
        context: Option<String>,
    ) {
        while self.state.items.len() >= self.limits.items.max(1) {
            if let Some(gone) = self.state.items.pop_front()
                && let Some(ctx) = gone.context
            {
                self.state.folds.remove(&ctx);
            }
        }
        self.seq += 1;
        let item = Item {
            seq: self.seq,
            kind,
            from: from.to_owned(),
            text,
            body,
            background,
            context,
        };
        if background {
            self.state.background += 1;
            self.changed(|s| Change::Background {
                count: s.background,
                verbose: s.verbose,
            });
        }
        self.changed(|_| Change::Item(item.clone()));
        self.state.items.push_back(item);
    }

    /// Rebuilds the member list: ourselves and the others, by id.
    fn refresh_members(&mut self) {
        let me = &self.state.me;
        let mut list: Vec<Member> = self
            .others
            .iter()
            .map(|(id, caps)| Member {
                id: id.to_owned(),
                me: false,
                person: self.others.is_person(id),
                capabilities: caps
                    .to_json()
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(chatter::capability_label)
                    .collect(),
                tools: self.tools.get(id).cloned().unwrap_or_default(),
            })
            .collect();
        if !me.is_empty() {
            list.push(Member {
                id: me.clone(),
                me: true,
                person: self.me_person,
                capabilities: self.mine.clone(),
                tools: Vec::new(),
            });
            list.sort_by(|a, b| a.id.cmp(&b.id));
        }
        if list != self.state.members {
            self.state.members = list;
            self.changed(|s| Change::Members(s.members.clone()));
        }
    }

    fn queue_changed(&mut self) {
        self.changed(|s| Change::Queue(s.queue.iter().cloned().collect()));
    }
}

/// Remembers `id` in a bounded list (the oldest forgotten beyond `max`).
fn remember(list: &mut VecDeque<String>, id: String, max: usize) {
    if list.len() >= max.max(1) {
        list.pop_front();
    }
    list.push_back(id);
}
