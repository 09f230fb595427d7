//! The space as an MCP server, sans-IO: one [`HostSession`] per MCP host, wrapping the
//! [`Participant`] the host is in the space.
//!
//! A host speaks MCP (2025-11-25 and older with `initialize` and a session, or the
//! stateless 2026-07-28 with `_meta` on every request); the session answers what is its
//! own (`initialize`, `server/discover`, `ping`, `logging/setLevel`) and turns the rest into
//! envelopes under the participant's capabilities:
//!
//! - The lists (`tools/list`, `resources/list`, `resources/templates/list`, `prompts/list`)
//!   are asked of every member that may answer MCP requests and that the participant may
//!   ask directly, and merged: tools and prompts under their own names when no other member
//!   has the same name, else `participant__name` (one rule with an agent's,
//!   [`ToolNames::preferring_own`]); resources and templates as listed.
//! - A call (`tools/call`, `prompts/get`, `resources/read`, `resources/subscribe`,
//!   `resources/unsubscribe`, `completion/complete`) goes to the member that listed its
//!   target, as a smart request ([`Participant::mcp_request`]): an `mcp/request` when
//!   allowed, an `mcp/proposal` when only that is. A proposal keeps the host's request open;
//!   a host that gave a progress token gets `notifications/progress` every
//!   [`FrontConfig::progress_every`] while people review it. The result comes back as the
//!   member sent it; a rejection, withdrawal or expiry (the participant's
//!   `proposal_timeout`) ends the request with [`REFUSED`] and the reason; a call the
//!   participant may neither request nor propose gets [`FORBIDDEN`], naming the capability
//!   it lacks.
//! - A member's questions about a call (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`, correlated to the call's request) go to the host as its own requests on
//!   the call's stream; the host's answer goes back as the `mcp/response`. Progress and log
//!   notifications of a call go to the host on the call's stream (logs at or above the
//!   host's level).
//! - Members coming and going send `notifications/*/list_changed` on the standalone stream,
//!   and so does a member in the host's view that announces its list changed (a bridge
//!   whose server said so).
//!
//! What the driver does: it carries HTTP (headers by [`http`]), feeds each JSON-RPC message
//! of the host with [`HostSession::handle_host`] and the gateway connection's inputs with
//! [`GatewayInputs::handle_input`](crate::participant::GatewayInputs::handle_input), and
//! carries out [`HostSession::poll_output`]: frames to the gateway, and messages to the host,
//! each naming the host request it belongs to ([`HostMessage::about`]) so that it goes on
//! that request's stream.
//!
//! Choices where MCP is silent: lists are one page (members' lists are merged whole, bounded
//! by [`FrontConfig::max_listed`]); a call naming something no list has shown is preceded by
//! one fresh listing; a resource whose URI no member listed goes to the member whose
//! template's literal prefix matches it, else to the only member offering resources.

pub mod http;
pub mod sessions;

#[cfg(test)]
mod tests;

use crate::agent::toolname::ToolNames;
use crate::capability::Precheck;
use crate::envelope::Kind;
use crate::mcp::jsonrpc::{RpcError, RpcId, RpcMessage, codes};
use crate::mcp::stateless::{META_PROTOCOL_VERSION, META_SERVER_INFO};
use crate::mcp::{ProtocolVersion, server::LOG_LEVELS};
use crate::participant::{
    self, AroundParticipant, CallId, Event, Participant, RequestError, RequestId, RequestOptions,
    RequestRoute, ToolError,
};
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// JSON-RPC error of a call the host's participant may neither request nor propose.
pub const FORBIDDEN: i64 = -32003;
/// JSON-RPC error of a proposal that was rejected, withdrawn or expired.
pub const REFUSED: i64 = -32004;

/// The methods a member of the space serves that a host may call.
pub const ROUTED_METHODS: [&str; 6] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
];

/// Methods of the session revisions that the stateless revision does not have.
pub const STATELESS_REMOVED: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The questions a member may put to the host about its call.
pub const HOST_QUESTIONS: [&str; 3] =
    ["elicitation/create", "sampling/createMessage", "roots/list"];

/// Settings of a host session.
#[derive(Debug, Clone)]
pub struct FrontConfig {
    /// `serverInfo.name` (the space's id).
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// Host requests open at once; more are answered with an error.
    pub max_open: usize,
    /// How often a host waiting on a proposal hears progress.
    pub progress_every: Duration,
    /// Entries of one merged list at most.
    pub max_listed: usize,
}

impl Default for FrontConfig {
    fn default() -> Self {
        FrontConfig {
            name: "mew".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            max_open: 64,
            progress_every: Duration::from_secs(5),
            max_listed: 10_000,
        }
    }
}

/// A JSON-RPC message for the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostMessage {
    /// The host request it belongs to ([`rpc_key`] of its id); `None`: the standalone
    /// stream.
    pub about: Option<String>,
    /// The message.
    pub message: Value,
    /// It answers `about`: that request is done.
    pub last: bool,
}

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A gateway-side action of the participant (`Connect`, `Transmit`, `Ping`,
    /// `Disconnect`).
    Gateway(participant::Output),
    /// A message for the host.
    Host(HostMessage),
    /// Something the participant reported (for logs).
    Event(Event),
    /// The session cannot go on (the participant was refused or removed): close it.
    End(String),
}

/// The key of a host request id, as [`HostMessage::about`] names it.
pub fn rpc_key(id: &RpcId) -> String {
    match id {
        RpcId::Number(n) => n.to_string(),
        RpcId::String(s) => format!("{s:?}"),
    }
}

fn id_value(id: &RpcId) -> Value {
    match id {
        RpcId::Number(n) => Value::Number(n.clone()),
        RpcId::String(s) => Value::String(s.clone()),
    }
}

/// The four lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum List {
    Tools,
    Resources,
    Templates,
    Prompts,
}

impl List {
    const ALL: [List; 4] = [List::Tools, List::Resources, List::Templates, List::Prompts];
    fn method(self) -> &'static str {
        match self {
            List::Tools => "tools/list",
            List::Resources => "resources/list",
            List::Templates => "resources/templates/list",
            List::Prompts => "prompts/list",
        }
    }
    fn field(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Resources => "resources",
            List::Templates => "resourceTemplates",
            List::Prompts => "prompts",
        }
    }
    fn of(method: &str) -> Option<List> {
        List::ALL.into_iter().find(|l| l.method() == method)
    }
}

/// What the host sees: the merged lists and where each entry lives.
#[derive(Debug, Default)]
struct Catalog {
    /// Per list: each member's entries, as listed.
    entries: BTreeMap<List, Vec<(String, Value)>>,
    tools: ToolNames,
    prompts: ToolNames,
}

impl Catalog {
    fn set(&mut self, list: List, entries: Vec<(String, Value)>) {
        let names = |key: &str| {
            ToolNames::preferring_own(
                entries
                    .iter()
                    .filter_map(|(p, v)| Some((p.as_str(), v.get(key)?.as_str()?))),
            )
        };
        match list {
            List::Tools => self.tools = names("name"),
            List::Prompts => self.prompts = names("name"),
            _ => {}
        }
        self.entries.insert(list, entries);
    }

    /// The merged list as the host sees it.
    fn shown(&self, list: List) -> Vec<Value> {
        let entries = self.entries.get(&list).map(Vec::as_slice).unwrap_or(&[]);
        entries
            .iter()
            .map(|(p, v)| {
                let names = match list {
                    List::Tools => &self.tools,
                    List::Prompts => &self.prompts,
                    _ => return v.clone(),
                };
                let mut v = v.clone();
                if let Some(n) = v
                    .get("name")
                    .and_then(Value::as_str)
                    .and_then(|t| names.name_of(p, t))
                {
                    v["name"] = json!(n);
                }
                v
            })
            .collect()
    }

    fn known(&self, list: List) -> bool {
        self.entries.contains_key(&list)
    }

    /// Who serves a resource URI.
    fn resource_owner(&self, uri: &str) -> Option<String> {
        let listed = self.entries.get(&List::Resources).into_iter().flatten();
        if let Some((p, _)) = listed
            .clone()
            .find(|(_, v)| v.get("uri").and_then(Value::as_str) == Some(uri))
        {
            return Some(p.clone());
        }
        let templates = self.entries.get(&List::Templates).into_iter().flatten();
        let matching = templates.clone().find(|(_, v)| {
            v.get("uriTemplate")
                .and_then(Value::as_str)
                .map(|t| t.split('{').next().unwrap_or(t))
                .is_some_and(|prefix| !prefix.is_empty() && uri.starts_with(prefix))
        });
        if let Some((p, _)) = matching {
            return Some(p.clone());
        }
        let mut owners: Vec<&String> = listed.chain(templates).map(|(p, _)| p).collect();
        owners.dedup();
        (owners.len() == 1).then(|| owners[0].clone())
    }
}

/// Where a routed request goes: the member and the params it gets (names translated).
type Target = (String, Value);

/// An open host request.
#[derive(Debug)]
enum Open {
    /// Lists being asked of members.
    Listing {
        id: RpcId,
        list: List,
        waiting: BTreeMap<RequestId, String>,
        got: Vec<(String, Value)>,
        /// The request to serve once the list is known, instead of answering the list.
        then: Option<(String, Option<Value>)>,
        stateless: bool,
    },
    /// A routed request in the space.
    Call {
        id: RpcId,
        request: RequestId,
        progress: Option<Value>,
        /// Waiting on people: the next progress notification is due then.
        next_progress: Option<Time>,
        beats: u64,
        stateless: bool,
    },
}

/// A question of a member put to the host, waiting for its answer.
#[derive(Debug)]
struct Question {
    call: CallId,
}

/// The session machine. See the module documentation.
#[derive(Debug)]
pub struct HostSession {
    p: Participant,
    config: FrontConfig,
    /// The revision agreed by `initialize` (session revisions).
    version: Option<ProtocolVersion>,
    /// The host's log level (`logging/setLevel`); `None`: everything.
    level: Option<usize>,
    catalog: Catalog,
    /// Open host requests by [`rpc_key`].
    open: BTreeMap<String, Open>,
    /// Our requests in the space -> the host request they serve.
    ours: BTreeMap<RequestId, String>,
    /// Questions sent to the host, by the id we gave them.
    questions: BTreeMap<String, Question>,
    /// Questions whose envelope we have not seen yet (its correlation names the call).
    unplaced: Vec<(CallId, String, Option<Value>)>,
    /// Request envelope ids of members' questions -> the envelope they are about.
    about: BTreeMap<String, String>,
    next_question: u64,
    /// Stateless hosts: questions of a call being gathered into one `input_required` round,
    /// by the open call's key.
    rounds: BTreeMap<String, Round>,
    /// Stateless hosts: calls whose round went to the host, by the `requestState` given.
    parked: BTreeMap<String, Parked>,
    next_state: u64,
    out: VecDeque<Output>,
    ended: bool,
}

/// Questions of one call gathered for one `input_required` result.
#[derive(Debug)]
struct Round {
    due: Time,
    questions: Vec<(CallId, String, Option<Value>)>,
}

/// A call waiting for its host to retry with the answers of a round.
#[derive(Debug)]
struct Parked {
    /// The open call's key.
    key: String,
    /// Each question's key in `inputRequests` and the member's question it stands for.
    questions: Vec<(String, CallId)>,
    /// The call's outcome, when it ended before the retry came.
    done: Option<Result<Value, RpcError>>,
}

/// How long questions of one call are gathered before they go to a stateless host as one
/// round (a member sends a round's questions one envelope each).
pub const GATHER: Duration = Duration::from_millis(30);

impl HostSession {
    /// A session around this participant (not yet started).
    pub fn new(mut p: Participant, config: FrontConfig) -> HostSession {
        for m in HOST_QUESTIONS {
            p.forward_method(m);
        }
        HostSession {
            p,
            config,
            version: None,
            level: None,
            catalog: Catalog::default(),
            open: BTreeMap::new(),
            ours: BTreeMap::new(),
            questions: BTreeMap::new(),
            unplaced: Vec::new(),
            about: BTreeMap::new(),
            next_question: 0,
            rounds: BTreeMap::new(),
            parked: BTreeMap::new(),
            next_state: 0,
            out: VecDeque::new(),
            ended: false,
        }
    }

    /// The participant.
    pub fn participant(&self) -> &Participant {
        &self.p
    }

    /// Starts the participant (it asks to connect).
    pub fn start(&mut self, now: Time) {
        self.p.start(now);
        self.pump(now);
    }

    /// Whether the participant was welcomed.
    pub fn is_ready(&self) -> bool {
        self.p.client().is_ready()
    }

    /// The revision `initialize` agreed, if any.
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    /// Host requests open.
    pub fn open_requests(&self) -> usize {
        self.open.len()
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`Input::Timeout`](participant::Input::Timeout) is due next.
    pub fn poll_timeout(&self) -> Option<Time> {
        let beats = self.open.values().filter_map(|o| match o {
            Open::Call { next_progress, .. } => *next_progress,
            Open::Listing { .. } => None,
        });
        beats
            .chain(self.rounds.values().map(|r| r.due))
            .chain(self.p.poll_timeout())
            .min()
    }

    /// The host is gone: its participant leaves, its open requests are withdrawn.
    pub fn close(&mut self, now: Time, reason: &str) {
        let proposals: Vec<RequestId> = self
            .p
            .pending_requests()
            .map(|(id, _)| id.clone())
            .collect();
        for id in proposals {
            let _ = self.p.withdraw(now, &id, reason);
        }
        self.p.close(now, reason);
        self.pump(now);
    }

    /// One JSON-RPC message of the host.
    pub fn handle_host(&mut self, now: Time, message: RpcMessage) {
        match message {
            RpcMessage::Request { id, method, params } => self.request(now, id, &method, params),
            RpcMessage::Notification { method, params } => {
                if method == "notifications/cancelled" {
                    let target = params.as_ref().and_then(|p| p.get("requestId"));
                    let key = target.and_then(|t| {
                        serde_json::from_value::<Value>(t.clone())
                            .ok()
                            .and_then(|v| match v {
                                Value::Number(n) => Some(n.to_string()),
                                Value::String(s) => Some(format!("{s:?}")),
                                _ => None,
                            })
                    });
                    if let Some(key) = key {
                        self.cancel(now, &key);
                    }
                }
            }
            RpcMessage::Response { id, outcome } => self.answered(now, &id, outcome),
        }
        self.pump(now);
    }

    // ---- host requests ----

    fn reply(&mut self, id: &RpcId, outcome: Result<Value, RpcError>) {
        let message = match outcome {
            Ok(r) => json!({"jsonrpc": "2.0", "id": id_value(id), "result": r}),
            Err(e) => {
                let mut err = json!({"code": e.code, "message": e.message});
                if let Some(d) = e.data {
                    err["data"] = d;
                }
                json!({"jsonrpc": "2.0", "id": id_value(id), "error": err})
            }
        };
        self.out.push_back(Output::Host(HostMessage {
            about: Some(rpc_key(id)),
            message,
            last: true,
        }));
    }

    fn send_host(&mut self, about: Option<String>, message: Value) {
        self.out.push_back(Output::Host(HostMessage {
            about,
            message,
            last: false,
        }));
    }

    fn request(&mut self, now: Time, id: RpcId, method: &str, params: Option<Value>) {
        let key = rpc_key(&id);
        if self.open.contains_key(&key) {
            return self.reply(
                &id,
                Err(RpcError::new(
                    codes::INVALID_REQUEST,
                    format!("request id {id} is already in use by an open request"),
                )),
            );
        }
        let stateless = is_stateless(params.as_ref());
        if stateless && STATELESS_REMOVED.contains(&method) {
            return self.reply(
                &id,
                Err(RpcError::new(
                    codes::METHOD_NOT_FOUND,
                    format!("Method not found: {method} is not part of the stateless revision"),
                )),
            );
        }
        match method {
            "initialize" => {
                let r = self.initialize(params.as_ref());
                return self.reply(&id, Ok(r));
            }
            "server/discover" => {
                let r = self.discover();
                return self.reply(&id, Ok(r));
            }
            "ping" => return self.reply(&id, Ok(complete(json!({}), stateless))),
            "logging/setLevel" => {
                let level = params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str)
                    .and_then(|l| LOG_LEVELS.iter().position(|x| *x == l));
                let r = match level {
                    Some(rank) => {
                        self.level = Some(rank);
                        Ok(json!({}))
                    }
                    None => Err(RpcError::new(codes::INVALID_PARAMS, "unknown log level")),
                };
                return self.reply(&id, r);
            }
            _ => {}
        }
        if !stateless && self.version.is_none() {
            return self.reply(
                &id,
                Err(RpcError::new(
                    codes::INVALID_REQUEST,
                    format!("`{method}` before `initialize`: initialize first"),
                )),
            );
        }
        if self.open.len() >= self.config.max_open {
            return self.reply(
                &id,
                Err(RpcError::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "{} requests are already open; try again when one ends",
                        self.config.max_open
                    ),
                )),
            );
        }
        if let Some(list) = List::of(method) {
            return self.list(now, id, list, None, stateless);
        }
        if stateless
            && let Some(state) = params
                .as_ref()
                .and_then(|p| p.get("requestState"))
                .and_then(Value::as_str)
        {
            let state = state.to_owned();
            return self.retry(now, id, &state, params);
        }
        if !ROUTED_METHODS.contains(&method) {
            return self.reply(
                &id,
                Err(RpcError::new(
                    codes::METHOD_NOT_FOUND,
                    format!("Method not found: {method}"),
                )),
            );
        }
        self.route(now, id, method, params, true);
    }

    fn initialize(&mut self, params: Option<&Value>) -> Value {
        let asked = params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = asked
            .and_then(ProtocolVersion::parse_session)
            .unwrap_or(ProtocolVersion::LATEST);
        self.version = Some(version);
        json!({
            "protocolVersion": version.as_str(),
            "capabilities": capabilities(),
            "serverInfo": {"name": self.config.name, "version": self.config.version},
        })
    }

    fn discover(&self) -> Value {
        let versions: Vec<&str> = ProtocolVersion::ALL
            .iter()
            .rev()
            .map(|v| v.as_str())
            .collect();
        json!({
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "private",
            "supportedVersions": versions,
            // No `subscriptions/listen` here yet: a stateless host is promised no
            // notifications.
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}, "completions": {}},
            "_meta": {META_SERVER_INFO: {"name": self.config.name, "version": self.config.version}},
        })
    }

    /// Asks every member that may answer for `list`; `then` is a request to route once the
    /// list is known.
    fn list(
        &mut self,
        now: Time,
        id: RpcId,
        list: List,
        then: Option<(String, Option<Value>)>,
        stateless: bool,
    ) {
        let key = rpc_key(&id);
        let members: Vec<String> = self
            .p
            .participants()
            .filter(|(_, caps)| caps.precheck("mcp/response") != Precheck::Denied)
            .map(|(m, _)| m.to_owned())
            .collect();
        let mut waiting = BTreeMap::new();
        for m in members {
            let payload = json!({"method": list.method(), "params": {}});
            let direct = json!({"jsonrpc": "2.0", "id": 0, "method": list.method(), "params": {}});
            if !self.p.can_send(&Kind::McpRequest, Some(&direct)) {
                continue;
            }
            if let Ok(r) =
                self.p
                    .mcp_request(now, vec![m.clone()], payload, RequestOptions::default())
            {
                self.ours.insert(r.clone(), key.clone());
                waiting.insert(r, m);
            }
        }
        self.open.insert(
            key.clone(),
            Open::Listing {
                id,
                list,
                waiting,
                got: Vec::new(),
                then,
                stateless,
            },
        );
        self.settle_listing(now, &key);
    }

    /// Finishes a listing once no member's answer is awaited.
    fn settle_listing(&mut self, now: Time, key: &str) {
        let done =
            matches!(self.open.get(key), Some(Open::Listing { waiting, .. }) if waiting.is_empty());
        if !done {
            return;
        }
        let Some(Open::Listing {
            id,
            list,
            got,
            then,
            stateless,
            ..
        }) = self.open.remove(key)
        else {
            return;
        };
        let mut entries = Vec::new();
        for (member, result) in got {
            let items = result
                .get(list.field())
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                if entries.len() < self.config.max_listed {
                    entries.push((member.clone(), item));
                }
            }
        }
        self.catalog.set(list, entries);
        match then {
            Some((method, params)) => self.route(now, id, &method, params, false),
            None => {
                let shown = self.catalog.shown(list);
                let mut r = complete(json!({ list.field(): shown }), stateless);
                if stateless {
                    // The lists change as members come and go: no host may reuse one.
                    r["ttlMs"] = json!(0);
                    r["cacheScope"] = json!("private");
                }
                self.reply(&id, Ok(r));
            }
        }
    }

    /// Where a routed request goes; `Err(list)` when that list must be fetched first.
    fn target(&self, method: &str, params: Option<&Value>) -> Result<Option<Target>, List> {
        let mut params = params.cloned().unwrap_or_else(|| json!({}));
        let named = |names: &ToolNames, list: List, params: &mut Value, field: &str| {
            let name = params.get(field).and_then(Value::as_str)?.to_owned();
            let (p, real) = names.resolve(&name)?;
            let (p, real) = (p.to_owned(), real.to_owned());
            let _ = list;
            params[field] = json!(real);
            Some(p)
        };
        let (list, member) = match method {
            "tools/call" => (
                List::Tools,
                named(&self.catalog.tools, List::Tools, &mut params, "name"),
            ),
            "prompts/get" => (
                List::Prompts,
                named(&self.catalog.prompts, List::Prompts, &mut params, "name"),
            ),
            "completion/complete" => {
                let kind = params
                    .pointer("/ref/type")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if kind == "ref/prompt" {
                    let mut r = params.get("ref").cloned().unwrap_or_default();
                    let m = named(&self.catalog.prompts, List::Prompts, &mut r, "name");
                    params["ref"] = r;
                    (List::Prompts, m)
                } else {
                    let uri = params.pointer("/ref/uri").and_then(Value::as_str);
                    (
                        List::Templates,
                        uri.and_then(|u| self.catalog.resource_owner(u)),
                    )
                }
            }
            _ => {
                let uri = params.get("uri").and_then(Value::as_str);
                let list = if self.catalog.known(List::Resources) {
                    List::Templates
                } else {
                    List::Resources
                };
                (list, uri.and_then(|u| self.catalog.resource_owner(u)))
            }
        };
        match member {
            Some(m) => Ok(Some((m, params))),
            None if !self.catalog.known(list) => Err(list),
            None if list == List::Templates && !self.catalog.known(List::Resources) => {
                Err(List::Resources)
            }
            None => Ok(None),
        }
    }

    fn route(&mut self, now: Time, id: RpcId, method: &str, params: Option<Value>, first: bool) {
        let stateless = is_stateless(params.as_ref());
        let target = match self.target(method, params.as_ref()) {
            Ok(t) => t,
            Err(list) if first => {
                return self.list(now, id, list, Some((method.to_owned(), params)), stateless);
            }
            Err(_) => None,
        };
        let target = match target {
            Some(t) => t,
            // A list fetched for a target may lack it; a resource may be listed in the
            // other list: one more try with each list known.
            None if first => {
                let stale = [List::Tools, List::Prompts, List::Resources, List::Templates]
                    .into_iter()
                    .find(|l| !self.catalog.known(*l) && relevant(*l, method));
                match stale {
                    Some(l) => {
                        return self.list(now, id, l, Some((method.to_owned(), params)), stateless);
                    }
                    None => return self.reply(&id, Err(not_found(method, params.as_ref()))),
                }
            }
            None => {
                if let Some(l) = [List::Templates, List::Resources]
                    .into_iter()
                    .find(|l| !self.catalog.known(*l) && relevant(*l, method))
                {
                    return self.list(now, id, l, Some((method.to_owned(), params)), stateless);
                }
                return self.reply(&id, Err(not_found(method, params.as_ref())));
            }
        };
        let (member, params) = target;
        let progress = params.pointer("/_meta/progressToken").cloned();
        let payload = json!({"method": method, "params": params});
        match self.p.mcp_request(
            now,
            vec![member.clone()],
            payload,
            RequestOptions::default(),
        ) {
            Ok(request) => {
                let key = rpc_key(&id);
                self.ours.insert(request.clone(), key.clone());
                self.open.insert(
                    key,
                    Open::Call {
                        id,
                        request,
                        progress,
                        next_progress: None,
                        beats: 0,
                        stateless,
                    },
                );
            }
            Err(RequestError::NoCapability { held }) => {
                let what = describe(method, &params);
                let msg = format!(
                    "this host's participant may not {what} of {member}: it holds neither mcp/request nor mcp/proposal for it"
                );
                self.reply(
                    &id,
                    Err(RpcError {
                        code: FORBIDDEN,
                        message: msg,
                        data: Some(json!({
                            "missing": {"kind": "mcp/request", "to": [member],
                                "payload": {"method": method}},
                            "held": held,
                        })),
                    }),
                );
            }
            Err(e) => self.reply(
                &id,
                Err(RpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("could not ask {member}: {e}"),
                )),
            ),
        }
    }

    fn cancel(&mut self, now: Time, key: &str) {
        if let Some(Open::Call { request, .. }) = self.open.remove(key) {
            self.ours.remove(&request);
            let _ = self
                .p
                .withdraw(now, &request, "the host cancelled the request");
        }
    }

    fn answered(&mut self, now: Time, id: &RpcId, outcome: Result<Value, RpcError>) {
        let Some(q) = self.questions.remove(&rpc_key(id)) else {
            return;
        };
        let result = outcome.map_err(|e| ToolError {
            code: e.code,
            message: e.message,
            data: e.data,
        });
        let _ = self.p.complete_call(now, q.call, result);
    }

    // ---- the participant's events ----

    fn pump(&mut self, now: Time) {
        while let Some(o) = self.p.poll_output() {
            match o {
                participant::Output::Event(e) => self.event(now, e),
                other => self.out.push_back(Output::Gateway(other)),
            }
        }
        self.place_questions(now);
        // Answering questions may have queued frames.
        while let Some(o) = self.p.poll_output() {
            match o {
                participant::Output::Event(e) => self.event(now, e),
                other => self.out.push_back(Output::Gateway(other)),
            }
        }
    }

    fn event(&mut self, now: Time, e: Event) {
        match &e {
            Event::RequestCompleted { id, result } => self.completed(now, id, result.clone()),
            Event::RouteDecision {
                id,
                route: RequestRoute::Proposal,
                ..
            } => {
                let every = self.config.progress_every;
                if let Some(key) = self.ours.get(id)
                    && let Some(Open::Call {
                        progress: Some(_),
                        next_progress,
                        ..
                    }) = self.open.get_mut(key)
                {
                    *next_progress = Some(now);
                    let _ = every;
                }
                self.beat(now);
            }
            Event::Forwarded {
                call_id,
                method,
                params,
                ..
            } => {
                self.unplaced
                    .push((*call_id, method.clone(), params.clone()));
            }
            Event::Message(env) => self.message(env),
            Event::ParticipantJoined { id } | Event::ParticipantLeft { id } => {
                let serves = self
                    .p
                    .members()
                    .get(id)
                    .is_none_or(|c| c.precheck("mcp/response") != Precheck::Denied);
                if serves {
                    self.list_changed();
                }
            }
            Event::GatewayError { payload } if !self.is_ready() && !self.ended => {
                self.ended = true;
                let why = payload["message"]
                    .as_str()
                    .or(payload["error"].as_str())
                    .unwrap_or("refused");
                self.out
                    .push_back(Output::End(format!("the space refused the host: {why}")));
            }
            Event::Replaced { reason } => {
                self.ended = true;
                self.out
                    .push_back(Output::End(format!("replaced: {reason}")));
            }
            Event::GaveUp { .. } => {
                self.ended = true;
                self.out
                    .push_back(Output::End("the connection to the space was lost".into()));
            }
            Event::Disconnected { reason } => {
                // Everything open fails: the participant was removed or the space went away.
                let keys: Vec<String> = self.open.keys().cloned().collect();
                for k in keys {
                    if let Some(o) = self.open.remove(&k) {
                        let id = match o {
                            Open::Listing { id, .. } | Open::Call { id, .. } => id,
                        };
                        self.reply(
                            &id,
                            Err(RpcError::new(
                                codes::INTERNAL_ERROR,
                                format!("the host's participant left the space: {reason}"),
                            )),
                        );
                    }
                }
                self.ours.clear();
                // A session that does not rejoin on its own is over: its id answers 404.
                if !self.p.config().reconnect.enabled && !self.ended {
                    self.ended = true;
                    self.out.push_back(Output::End(format!(
                        "the host's participant left the space: {reason}"
                    )));
                }
            }
            _ => {}
        }
        self.out.push_back(Output::Event(e));
    }

    fn list_changed(&mut self) {
        self.catalog = Catalog::default();
        if self.version.is_none() {
            return;
        }
        for m in [
            "notifications/tools/list_changed",
            "notifications/resources/list_changed",
            "notifications/prompts/list_changed",
        ] {
            self.send_host(None, json!({"jsonrpc": "2.0", "method": m}));
        }
    }

    /// A member says one of its lists changed: the host hears it when that member is in its
    /// view (it serves MCP and the participant may ask it for that list).
    fn member_list_changed(&mut self, from: &str, method: &str, list: &str) {
        let serves = self
            .p
            .members()
            .get(from)
            .is_some_and(|c| c.precheck("mcp/response") != Precheck::Denied);
        let direct = json!({"jsonrpc": "2.0", "id": 0, "method": list, "params": {}});
        if !serves || !self.p.can_send(&Kind::McpRequest, Some(&direct)) {
            return;
        }
        self.catalog = Catalog::default();
        if self.version.is_some() {
            self.send_host(None, json!({"jsonrpc": "2.0", "method": method}));
        }
    }

    /// A notification of a member about one of our calls (progress, log lines).
    fn message(&mut self, env: &crate::Envelope) {
        if env.kind != Kind::McpRequest {
            return;
        }
        let Some(payload) = env.payload.as_ref() else {
            return;
        };
        if payload.get("id").is_some() {
            // A question: remember what it is about, for `place_questions`.
            if let Some(c) = env.correlation_id.as_ref().and_then(|c| c.first()) {
                if self.about.len() >= 4096 {
                    self.about.clear();
                }
                self.about.insert(env.id.clone(), c.clone());
            }
            return;
        }
        let method = payload.get("method").and_then(Value::as_str).unwrap_or("");
        if let Some(list) = changed_list(method) {
            return self.member_list_changed(&env.from, method, list);
        }
        let Some(c) = env.correlation_id.as_ref().and_then(|c| c.first()) else {
            return;
        };
        let Some(key) = self.ours.get(c.as_str()).cloned() else {
            return;
        };
        let Some(Open::Call { progress, .. }) = self.open.get(&key) else {
            return;
        };
        let params = payload.get("params").cloned().unwrap_or_else(|| json!({}));
        let forward = match method {
            "notifications/progress" => {
                progress.is_some() && params.get("progressToken") == progress.as_ref()
            }
            "notifications/message" => {
                let rank = params
                    .get("level")
                    .and_then(Value::as_str)
                    .and_then(|l| LOG_LEVELS.iter().position(|x| *x == l));
                rank.unwrap_or(0) >= self.level.unwrap_or(0)
            }
            _ => false,
        };
        if forward {
            self.send_host(
                Some(key),
                json!({"jsonrpc": "2.0", "method": method, "params": params}),
            );
        }
    }

    /// Puts members' questions to the host, on the stream of the call they are about.
    fn place_questions(&mut self, now: Time) {
        let unplaced = std::mem::take(&mut self.unplaced);
        for (call, method, params) in unplaced {
            let about = self
                .p
                .call_origin(call)
                .and_then(|(_, req)| self.about.get(req).cloned());
            let key = about
                .as_ref()
                .and_then(|a| self.ours.get(a.as_str()).cloned());
            if about.is_some() && key.is_none() {
                // About someone else's request: another connection of the same participant
                // (several hosts may share one) answers it.
                let _ = self.p.decline_call(call);
                continue;
            }
            let stateless = key
                .as_ref()
                .and_then(|k| self.open.get(k))
                .is_some_and(|o| {
                    matches!(
                        o,
                        Open::Call {
                            stateless: true,
                            ..
                        }
                    )
                });
            if stateless && let Some(key) = key {
                self.rounds
                    .entry(key)
                    .or_insert_with(|| Round {
                        due: now + GATHER,
                        questions: Vec::new(),
                    })
                    .questions
                    .push((call, method, params));
                continue;
            }
            let Some(key) = key.filter(|_| !stateless && self.version.is_some()) else {
                let _ = self.p.complete_call(
                    now,
                    call,
                    Err(ToolError {
                        code: codes::METHOD_NOT_FOUND,
                        message: format!(
                            "{method}: the host cannot be asked (no open call of it is waiting)"
                        ),
                        data: None,
                    }),
                );
                continue;
            };
            self.next_question += 1;
            let qid = format!("mew-{}", self.next_question);
            self.questions.insert(format!("{qid:?}"), Question { call });
            let mut message = json!({"jsonrpc": "2.0", "id": qid, "method": method});
            if let Some(p) = params {
                message["params"] = p;
            }
            self.send_host(Some(key), message);
        }
    }

    fn completed(&mut self, now: Time, id: &RequestId, result: Result<Value, RequestError>) {
        let Some(key) = self.ours.remove(id) else {
            return;
        };
        match self.open.get_mut(&key) {
            Some(Open::Listing { waiting, got, .. }) => {
                if let Some(member) = waiting.remove(id)
                    && let Ok(r) = result
                {
                    got.push((member, r));
                }
                self.settle_listing(now, &key);
            }
            Some(Open::Call { .. }) => {
                let Some(Open::Call { id, stateless, .. }) = self.open.remove(&key) else {
                    return;
                };
                self.rounds.remove(&key);
                let outcome = match result {
                    Ok(r) => Ok(if stateless { complete(r, true) } else { r }),
                    Err(e) => Err(call_error(e)),
                };
                if let Some(parked) = self.parked.values_mut().find(|p| p.key == key) {
                    // The host's request was answered with a round: the outcome waits for
                    // its retry.
                    parked.done = Some(outcome);
                    return;
                }
                // Questions of this call that the host never answered are void now.
                self.reply(&id, outcome);
            }
            None => {}
        }
    }

    /// Sends each gathered round to its stateless host as an `input_required` result.
    fn flush_rounds(&mut self, now: Time) {
        let due: Vec<String> = self
            .rounds
            .iter()
            .filter(|(_, r)| r.due <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(round) = self.rounds.remove(&key) else {
                continue;
            };
            let Some(Open::Call { id, .. }) = self.open.get(&key) else {
                for (call, _, _) in round.questions {
                    let _ = self.p.decline_call(call);
                }
                continue;
            };
            let id = id.clone();
            let mut requests = serde_json::Map::new();
            let mut questions = Vec::new();
            for (i, (call, method, mut params)) in round.questions.into_iter().enumerate() {
                // The server's own key, when the member names it (and it is not taken).
                let named = params
                    .as_mut()
                    .and_then(|p| p.get_mut("_meta"))
                    .and_then(Value::as_object_mut)
                    .and_then(|m| m.remove(crate::bridge::META_INPUT_KEY))
                    .and_then(|k| k.as_str().map(str::to_owned));
                if let Some(p) = params.as_mut()
                    && p.get("_meta")
                        .and_then(Value::as_object)
                        .is_some_and(|m| m.is_empty())
                    && let Some(o) = p.as_object_mut()
                {
                    o.remove("_meta");
                }
                let qkey = named
                    .filter(|k| !requests.contains_key(k))
                    .unwrap_or_else(|| format!("q{}", i + 1));
                let mut r = json!({ "method": method });
                if let Some(p) = params {
                    r["params"] = p;
                }
                requests.insert(qkey.clone(), r);
                questions.push((qkey, call));
            }
            self.next_state += 1;
            let state = format!("mew-round-{}", self.next_state);
            // The host's request is answered by the round: its id is free again, and the
            // call waits under the round's own key.
            let parked_key = format!("round:{state}");
            if let Some(open) = self.open.remove(&key) {
                if let Open::Call { request, .. } = &open {
                    self.ours.insert(request.clone(), parked_key.clone());
                }
                self.open.insert(parked_key.clone(), open);
            }
            self.parked.insert(
                state.clone(),
                Parked {
                    key: parked_key,
                    questions,
                    done: None,
                },
            );
            self.reply(
                &id,
                Ok(json!({
                    "resultType": "input_required",
                    "inputRequests": requests,
                    "requestState": state,
                })),
            );
        }
    }

    /// A stateless host's retry of a call with the answers of its round.
    fn retry(&mut self, now: Time, id: RpcId, state: &str, params: Option<Value>) {
        let Some(parked) = self.parked.remove(state) else {
            return self.reply(
                &id,
                Err(RpcError::new(
                    codes::INVALID_PARAMS,
                    "requestState is not one this endpoint issued, or it was used already",
                )),
            );
        };
        let responses = params
            .as_ref()
            .and_then(|p| p.get("inputResponses"))
            .cloned()
            .unwrap_or_default();
        for (qkey, call) in parked.questions {
            let answer = match responses.get(&qkey) {
                Some(r) => Ok(r.clone()),
                None => Err(ToolError {
                    code: codes::INVALID_PARAMS,
                    message: format!("the host sent no input response for {qkey}"),
                    data: None,
                }),
            };
            let _ = self.p.complete_call(now, call, answer);
        }
        if let Some(done) = parked.done {
            return self.reply(&id, done);
        }
        let Some(mut open) = self.open.remove(&parked.key) else {
            return self.reply(
                &id,
                Err(RpcError::new(codes::INTERNAL_ERROR, "the call ended")),
            );
        };
        let new_key = rpc_key(&id);
        if let Open::Call {
            id: open_id,
            request,
            progress,
            ..
        } = &mut open
        {
            *open_id = id;
            *progress = params
                .as_ref()
                .and_then(|p| p.pointer("/_meta/progressToken"))
                .cloned();
            self.ours.insert(request.clone(), new_key.clone());
        }
        self.open.insert(new_key, open);
    }

    /// Progress for calls waiting on people.
    fn beat(&mut self, now: Time) {
        let every = self.config.progress_every;
        let mut notes = Vec::new();
        for (key, o) in &mut self.open {
            if let Open::Call {
                progress: Some(token),
                next_progress: Some(at),
                beats,
                ..
            } = o
                && *at <= now
            {
                *beats += 1;
                *at = now + every;
                notes.push((
                    key.clone(),
                    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                        "progressToken": token, "progress": *beats,
                        "message": "waiting for a person in the space to approve the call"}}),
                ));
            }
        }
        for (k, m) in notes {
            self.send_host(Some(k), m);
        }
    }
}

impl AroundParticipant for HostSession {
    type Inner = Participant;
    fn inner(&mut self) -> &mut Participant {
        &mut self.p
    }
    fn after_input(&mut self, now: Time) {
        self.pump(now);
    }
    fn on_timeout(&mut self, now: Time) {
        self.beat(now);
        self.flush_rounds(now);
        self.p.handle_input(now, participant::Input::Timeout);
        self.pump(now);
    }
}

/// The list a `notifications/*/list_changed` announces.
fn changed_list(method: &str) -> Option<&'static str> {
    match method {
        "notifications/tools/list_changed" => Some("tools/list"),
        "notifications/resources/list_changed" => Some("resources/list"),
        "notifications/prompts/list_changed" => Some("prompts/list"),
        _ => None,
    }
}

fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"listChanged": true, "subscribe": true},
        "prompts": {"listChanged": true},
        "completions": {},
        "logging": {},
    })
}

/// Whether a request is of the stateless revision (its `_meta` names it).
fn is_stateless(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        .and_then(ProtocolVersion::parse)
        .is_some_and(ProtocolVersion::is_stateless)
}

/// A result as the stateless revision marks it.
fn complete(mut r: Value, stateless: bool) -> Value {
    if stateless && let Value::Object(m) = &mut r {
        m.entry("resultType").or_insert(json!("complete"));
    }
    r
}

fn relevant(list: List, method: &str) -> bool {
    match method {
        "tools/call" => list == List::Tools,
        "prompts/get" => list == List::Prompts,
        "completion/complete" => true,
        _ => matches!(list, List::Resources | List::Templates),
    }
}

fn not_found(method: &str, params: Option<&Value>) -> RpcError {
    let p = params.cloned().unwrap_or_default();
    match method {
        "tools/call" | "prompts/get" => RpcError::new(
            codes::INVALID_PARAMS,
            format!(
                "no participant of the space offers {} {:?}",
                if method == "tools/call" {
                    "a tool"
                } else {
                    "a prompt"
                },
                p.get("name").and_then(Value::as_str).unwrap_or("")
            ),
        ),
        "completion/complete" => RpcError::new(
            codes::INVALID_PARAMS,
            "no participant of the space offers what the reference names",
        ),
        _ => {
            let uri = p.get("uri").and_then(Value::as_str).unwrap_or("");
            RpcError {
                code: -32002,
                message: format!("Resource not found: {uri}"),
                data: Some(json!({ "uri": uri })),
            }
        }
    }
}

/// A few words for what a call does, for an error.
fn describe(method: &str, params: &Value) -> String {
    let name = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str);
    match (method, name) {
        ("tools/call", Some(n)) => format!("call tool {n:?}"),
        ("prompts/get", Some(n)) => format!("get prompt {n:?}"),
        (m, Some(n)) => format!("{m} {n:?}"),
        (m, None) => format!("send {m}"),
    }
}

/// The host's error for a request of the space that ended without a result.
fn call_error(e: RequestError) -> RpcError {
    match e {
        RequestError::Rpc {
            code,
            message,
            data,
        } => RpcError {
            code,
            message,
            data,
        },
        RequestError::Rejected { by, reason } => RpcError {
            code: REFUSED,
            message: format!("rejected by {by}: {reason}"),
            data: Some(json!({"outcome": "rejected", "by": by, "reason": reason})),
        },
        RequestError::Withdrawn { reason } => RpcError {
            code: REFUSED,
            message: format!("withdrawn: {reason}"),
            data: Some(json!({"outcome": "withdrawn", "reason": reason})),
        },
        RequestError::Timeout => RpcError {
            code: REFUSED,
            message: "nobody in the space answered in time (the proposal or request expired)"
                .into(),
            data: Some(json!({"outcome": "expired"})),
        },
        other => RpcError::new(codes::INTERNAL_ERROR, other.to_string()),
    }
}

/// The JSON-RPC line of a message for the host (what a JSON body or an SSE `data:` holds).
pub fn message_text(m: &Value) -> String {
    serde_json::to_string(m).unwrap_or_default()
}
