//! The view's vocabulary: what a person sees ([`ViewState`] and its parts), what they ask
//! ([`Command`]), what the participant must do about it ([`Action`]) and what changed for a
//! renderer that follows increments ([`Change`]). Every type is serde (snake_case), as the
//! web page receives and sends them as JSON.

use super::ask::{Notice, Question, Reply};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, VecDeque};

/// Bounds of a view: every list it keeps has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewLimits {
    /// Message items kept (the oldest go first).
    pub items: usize,
    /// Proposals waiting for review (the oldest is dropped beyond).
    pub queue: usize,
    /// Other members tracked (as the participant's `Bounds::max_participants`).
    pub members: usize,
    /// Open streams tracked.
    pub streams: usize,
    /// Proposals remembered, so that what becomes of one is told with what it was.
    pub proposals: usize,
    /// Envelope ids remembered, so that history fetched after a join repeats none.
    pub seen: usize,
    /// Envelopes held while the history is fetched (beyond, shown at once).
    pub held: usize,
    /// Ids of background requests remembered, so that their answers are background too.
    pub background_ids: usize,
    /// Proposals and outcomes remembered for suggestions.
    pub observed: usize,
    /// Changes waiting for [`super::View::poll_change`]; beyond, one snapshot replaces them.
    pub changes: usize,
    /// Approvals of one call shape before a grant is suggested.
    pub suggest_after: usize,
    /// Questions open at once (more are cancelled), and sign-in notices kept.
    #[serde(default = "default_questions")]
    pub questions: usize,
}

fn default_questions() -> usize {
    32
}

impl Default for ViewLimits {
    fn default() -> Self {
        ViewLimits {
            items: 2_000,
            queue: 256,
            members: 4_096,
            streams: 256,
            proposals: 1_024,
            seen: 4_096,
            held: 4_096,
            background_ids: 1_024,
            observed: 5_000,
            changes: 1_024,
            suggest_after: 3,
            questions: default_questions(),
        }
    }
}

/// Everything a person sees of a space.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ViewState {
    /// Our participant id.
    pub me: String,
    /// The connection, in a few words ("joined as human", "disconnected: ...").
    pub status: String,
    /// The message list, oldest first (bounded).
    pub items: VecDeque<Item>,
    /// Who is here, by id, ourselves included (bounded).
    pub members: Vec<Member>,
    /// Proposals of others waiting for review; the first is the one to review now.
    pub queue: VecDeque<Proposal>,
    /// Reasoning folds by context (the `reasoning/start` id), each drawn at its item.
    pub folds: BTreeMap<String, Fold>,
    /// Suggested grants waiting for a decision, strongest first.
    pub suggestions: VecDeque<Suggestion>,
    /// Open streams.
    pub streams: Vec<Stream>,
    /// Background items seen (discovery and its answers), shown only when `verbose`.
    pub background: u64,
    /// Whether background items are shown (`/verbose` toggles it).
    pub verbose: bool,
    /// Questions put to the person, oldest first; the first is the one to answer now.
    #[serde(default)]
    pub questions: VecDeque<Question>,
    /// Sign-in notices, one per participant that needs one.
    #[serde(default)]
    pub notices: Vec<Notice>,
}

/// What an item is, for how it is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A chat: `text` is what was said, `from` who said it.
    Chat,
    /// A note of the view or the program (joins, results, usage, outcomes).
    Note,
    /// A proposal made.
    Proposal,
    /// A proposal approved, with the arguments it ran with.
    Decision,
    /// Someone's request (a tool call, or discovery in the background).
    Request,
    /// An answer.
    Response,
    /// An error (the gateway's, or an answer that is an error).
    Error,
    /// A reasoning sequence: drawn from `folds[context]`.
    Reasoning,
    /// A thought or conclusion of a reasoning sequence not seen to start.
    Thought,
}

/// One entry of the message list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Increasing number, unique in this view.
    pub seq: u64,
    /// What it is.
    pub kind: ItemKind,
    /// Who it is from (empty for notes).
    pub from: String,
    /// The line: for a chat the text said, for anything else the whole line.
    pub text: String,
    /// A long text under the line (a few lines shown unless expanded); empty for none.
    pub body: Vec<String>,
    /// Machine-to-machine chatter (discovery and its answers): shown only when verbose.
    pub background: bool,
    /// The fold's context, for a [`ItemKind::Reasoning`] item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// Someone in the space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its participant id.
    pub id: String,
    /// Whether it is us.
    pub me: bool,
    /// Whether the gateway marks it as a person.
    pub person: bool,
    /// Its capabilities, each as its kind and its payload pattern (compact JSON, keys
    /// sorted) when it has one.
    pub capabilities: Vec<String>,
    /// The tools it offers, as discovered.
    pub tools: Vec<String>,
}

/// A proposal (someone else's, waiting for review, or any remembered one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// Its envelope id.
    pub id: String,
    /// Who proposed.
    pub from: String,
    /// Its addressees.
    pub to: Vec<String>,
    /// The proposed `mcp/request` payload.
    pub payload: Value,
    /// What it asks, in words: `tools/call write_file on files`.
    pub what: String,
    /// The narrowest capability allowing exactly this call: what "always allow" grants.
    pub capability: Value,
}

/// A reasoning sequence, folded into one line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fold {
    /// Its context (the `reasoning/start` envelope id).
    pub context: String,
    /// Who reasons.
    pub who: String,
    /// Thoughts so far.
    pub steps: u32,
    /// The latest thought (shortened).
    pub latest: String,
    /// The conclusion, once it came.
    pub conclusion: Option<String>,
    /// The fold's line: `agent is thinking (2 thought(s)): ...`.
    pub summary: String,
}

/// A suggested grant (progressive automation), with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    /// Names it in [`Command::GrantSuggestion`] and [`Command::DismissSuggestion`].
    pub key: String,
    /// Who would receive it.
    pub recipient: String,
    /// The capability (an `mcp/request` pattern).
    pub capability: Value,
    /// The approved proposals it is drawn from.
    pub approved: Vec<String>,
    /// Who approved them.
    pub approvers: Vec<String>,
    /// First approval time.
    pub first: String,
    /// Last approval time.
    pub last: String,
    /// The grant's reason: `approved 3 times by human`.
    pub reason: String,
    /// The evidence in words: `agent was approved 3 times by human (... to ...)`.
    pub summary: String,
}

/// An open stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// The stream id.
    pub id: String,
    /// Who opened it.
    pub owner: String,
}

/// A control of a participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    /// `participant/pause`.
    Pause,
    /// `participant/resume`.
    Resume,
    /// `participant/forget`.
    Forget,
    /// `participant/compact`.
    Compact,
    /// `participant/clear`.
    Clear,
    /// `participant/restart`.
    Restart,
    /// `participant/shutdown`.
    Shutdown,
}

/// What the person asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// A typed line: a chat, or a slash command (`/help` lists them).
    Line(String),
    /// Approve a proposal once (fulfil it).
    Approve(String),
    /// Reject a proposal.
    Reject {
        /// The proposal's id.
        proposal: String,
        /// Why (empty: "rejected").
        reason: String,
    },
    /// Grant the proposer exactly this call, then approve.
    AlwaysAllow(String),
    /// Review this proposal later: to the back of the queue.
    Later(String),
    /// Grant a suggestion (by its key).
    GrantSuggestion(String),
    /// Dismiss a suggestion (by its key).
    DismissSuggestion(String),
    /// Control a participant.
    Control {
        /// The participant.
        target: String,
        /// What to do.
        action: ControlAction,
    },
    /// Answer a question: accept with the form's values (field name to what was typed or
    /// chosen), decline or cancel.
    Answer {
        /// The question's id.
        question: String,
        /// Accept, decline or cancel.
        reply: Reply,
        /// The form's values (ignored unless accepting).
        #[serde(default)]
        values: Map<String, Value>,
    },
}

/// What the participant must do for the person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Send a chat to everyone.
    Chat {
        /// The text.
        text: String,
    },
    /// Fulfil a proposal (`Participant::fulfil`).
    Fulfil {
        /// The proposal's id.
        proposal: String,
    },
    /// Reject a proposal (`Participant::reject`).
    Reject {
        /// The proposal's id.
        proposal: String,
        /// Why.
        reason: String,
    },
    /// Grant capabilities (`Participant::grant`).
    Grant {
        /// Who gets them.
        recipient: String,
        /// The capability patterns.
        capabilities: Vec<Value>,
        /// Why (empty: none given).
        reason: String,
    },
    /// Revoke capabilities by pattern (`Participant::revoke`).
    Revoke {
        /// From whom.
        recipient: String,
        /// The capability patterns.
        capabilities: Vec<Value>,
        /// Why (empty: none given).
        reason: String,
    },
    /// Send this envelope (`kind`, `to`, `payload`, maybe `context`; the rest filled in).
    Send(Value),
    /// Fetch the history the gateway keeps for us (after `since`, an envelope id, when
    /// given) and hand it to [`super::View::handle_history`].
    FetchHistory {
        /// Where to start.
        since: Option<String>,
    },
    /// Answer a forwarded request (`Participant::complete_call` with `CallId(call)`).
    Answer {
        /// The call.
        call: u64,
        /// The result sent.
        result: Value,
    },
    /// Answer a forwarded request with an error.
    Refuse {
        /// The call.
        call: u64,
        /// The JSON-RPC error code.
        code: i64,
        /// Why.
        message: String,
    },
    /// Drop a forwarded request unanswered (`Participant::decline_call`): meant for another.
    Ignore {
        /// The call.
        call: u64,
    },
    /// Leave.
    Quit,
}

/// What changed, for a renderer that follows increments; applied in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Everything (first, and whenever increments were dropped).
    Snapshot(Box<ViewState>),
    /// An item appended (the list is bounded on both sides).
    Item(Item),
    /// The whole member list.
    Members(Vec<Member>),
    /// The whole review queue, first = the one to review now.
    Queue(Vec<Proposal>),
    /// A fold created or updated.
    Fold(Fold),
    /// The whole list of suggestions.
    Suggestions(Vec<Suggestion>),
    /// The whole list of open streams.
    Streams(Vec<Stream>),
    /// The status line.
    Status(String),
    /// The background count, and whether background items are shown.
    Background {
        /// Background items seen.
        count: u64,
        /// Whether they are shown.
        verbose: bool,
    },
    /// The whole list of open questions.
    Questions(Vec<Question>),
    /// The whole list of sign-in notices.
    Notices(Vec<Notice>),
    /// A command refused (the serving side makes it from a [`super::ViewError`]).
    Error(String),
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// No such proposal waits for review.
    #[error("no proposal {0} waits for review")]
    UnknownProposal(String),
    /// No such suggestion waits.
    #[error("no suggestion {0}")]
    UnknownSuggestion(String),
    /// A slash command used wrongly: its usage.
    #[error("usage: {0}")]
    Usage(String),
    /// No such slash command.
    #[error("unknown command /{0} (try /help)")]
    UnknownCommand(String),
    /// No such question is open.
    #[error("no question {0} is open")]
    UnknownQuestion(String),
    /// An answer that does not fit its question (the question stays open).
    #[error("{0}")]
    Invalid(String),
}
