//! OAuth between the MCP client and the server's endpoint: requests carry the token; a
//! refusal (`401`, `403 insufficient_scope`) is kept from the client while a token is
//! obtained, and the request is sent again (under a fresh exchange id) once there is one.
//! While a person must sign in, the bridge says so in its status (`mcp_server.sign_in`),
//! handshake requests wait, and calls are answered at once with where to sign in.

use super::{Bridge, Output};
use crate::envelope::Kind;
use crate::mcp::http::{ExchangeId, HttpMethod, HttpRequest, HttpResponseHead};
use crate::mcp::oauth::{Callback, Gate, OAuth, OAuthOutput, Refusal};
use crate::mcp::{self, McpError};
use crate::participant::Draft;
use crate::time::Time;
use std::collections::BTreeMap;

/// Exchange ids of resent requests start here, far above the client's own.
const RESENT_BASE: u64 = 1 << 48;
/// Requests held for a token at most; more fail at once.
const MAX_HELD: usize = 256;

/// The kind of the gateway's envelope carrying the redirect back to the bridge that asked
/// for it.
pub const CALLBACK_KIND: &str = "system/oauth-callback";

/// What the bridge reports about authorization, for its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthEvent {
    /// A person must open `url` (`sign-in needed for <resource>: open <url>`).
    SignInNeeded {
        /// The MCP endpoint.
        resource: String,
        /// The authorization URL.
        url: String,
    },
    /// A token was obtained (or refreshed).
    Authorized,
    /// Obtaining a token failed, or a sign-in answer was refused: one line.
    Failed(String),
}

/// The authorization state of a bridge's HTTP exchanges.
#[derive(Debug)]
pub(super) struct AuthLayer {
    pub(super) oauth: OAuth,
    /// Requests sent and not yet answered, by the id they went out under: the client's id
    /// and the request (without credentials), to send again after a refusal.
    sent: BTreeMap<ExchangeId, (ExchangeId, HttpRequest)>,
    /// Resent exchanges: the id they went out under -> the client's.
    routes: BTreeMap<ExchangeId, ExchangeId>,
    /// Requests waiting for a token, under the client's ids.
    held: Vec<HttpRequest>,
    next_resent: u64,
    /// The sign-in shown in the status: `(url, host)`.
    pub(super) shown: Option<(String, String)>,
}

impl AuthLayer {
    pub(super) fn new(oauth: OAuth) -> AuthLayer {
        AuthLayer {
            oauth,
            sent: BTreeMap::new(),
            routes: BTreeMap::new(),
            held: Vec::new(),
            next_resent: RESENT_BASE,
            shown: None,
        }
    }

    /// The client's id for an exchange that went out as `wire`.
    fn client_id(&self, wire: ExchangeId) -> ExchangeId {
        self.routes.get(&wire).copied().unwrap_or(wire)
    }
}

/// Whether a request belongs to bringing the server up (it waits for a sign-in), rather
/// than to a caller (who is told at once).
fn is_startup(req: &HttpRequest) -> bool {
    if req.method != HttpMethod::Post {
        return true;
    }
    matches!(
        req.header(mcp::http::HEADER_METHOD),
        Some(
            "server/discover"
                | "initialize"
                | "tools/list"
                | "resources/list"
                | "resources/templates/list"
                | "prompts/list"
        )
    ) || req
        .header(mcp::http::HEADER_METHOD)
        .is_some_and(|m| m.starts_with("notifications/"))
}

fn with_authorization(mut req: HttpRequest, value: Option<String>) -> HttpRequest {
    req.headers
        .retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
    if let Some(v) = value {
        req.headers.push(("Authorization".into(), v));
    }
    req
}

impl Bridge {
    /// Turns on OAuth for the server's endpoint (before [`Bridge::start`]).
    pub fn enable_oauth(&mut self, oauth: OAuth) {
        self.auth = Some(AuthLayer::new(oauth));
    }

    /// The OAuth flow, when enabled.
    pub fn oauth(&self) -> Option<&OAuth> {
        self.auth.as_ref().map(|a| &a.oauth)
    }

    /// The answer to an [`Output::OAuthFetch`].
    pub fn handle_oauth_fetch(
        &mut self,
        now: Time,
        id: mcp::oauth::FetchId,
        result: Result<mcp::oauth::FetchResponse, String>,
    ) {
        if let Some(a) = self.auth.as_mut() {
            match result {
                Ok(r) => a.oauth.handle_fetch(now, id, r),
                Err(e) => a.oauth.handle_fetch_failed(now, id, &e),
            }
        }
        self.pump(now);
    }

    /// The sign-in is the person's to give: the error a caller gets meanwhile.
    pub(super) fn sign_in_error(&self) -> Option<McpError> {
        match self.auth.as_ref()?.oauth.gate() {
            Gate::SignInNeeded { url, host } => Some(McpError::SignInNeeded { url, host }),
            _ => None,
        }
    }

    /// A request from the client to the endpoint: sent with the token, held, or failed.
    pub(super) fn send_http(&mut self, now: Time, req: HttpRequest) {
        let Some(a) = self.auth.as_mut() else {
            self.out.push_back(Output::Server(mcp::Output::Http(req)));
            return;
        };
        match a.oauth.gate() {
            Gate::Send(token) => {
                let wire = req.exchange;
                if req.method == HttpMethod::Post {
                    a.sent.insert(wire, (wire, req.clone()));
                }
                self.out
                    .push_back(Output::Server(mcp::Output::Http(with_authorization(
                        req, token,
                    ))));
            }
            Gate::SignInNeeded { url, host } if !is_startup(&req) => {
                self.mcp
                    .fail_exchange(now, req.exchange, McpError::SignInNeeded { url, host });
            }
            _ if a.held.len() >= MAX_HELD => {
                let err = McpError::Auth(format!("more than {MAX_HELD} requests wait for a token"));
                self.mcp.fail_exchange(now, req.exchange, err);
            }
            _ => a.held.push(req),
        }
    }

    /// The client gave an exchange up.
    pub(super) fn abort_http(&mut self, x: ExchangeId) {
        let Some(a) = self.auth.as_mut() else {
            self.out
                .push_back(Output::Server(mcp::Output::HttpAbort(x)));
            return;
        };
        a.held.retain(|r| r.exchange != x);
        let wires: Vec<ExchangeId> = a
            .routes
            .iter()
            .filter(|(_, c)| **c == x)
            .map(|(w, _)| *w)
            .collect();
        for w in wires {
            a.routes.remove(&w);
            a.sent.remove(&w);
            self.out
                .push_back(Output::Server(mcp::Output::HttpAbort(w)));
        }
        a.sent.remove(&x);
        self.out
            .push_back(Output::Server(mcp::Output::HttpAbort(x)));
    }

    /// The head of an answer: a refusal the flow can do something about is kept from the
    /// client; anything else reaches it under the client's id.
    pub(super) fn on_http_head(&mut self, now: Time, wire: ExchangeId, head: HttpResponseHead) {
        let Some(a) = self.auth.as_mut() else {
            self.mcp.handle_http_response(now, wire, head);
            return;
        };
        let client = a.client_id(wire);
        let sent = a.sent.remove(&wire);
        let refused = head.status == 401 || head.status == 403;
        if let (true, Some((_, req))) = (refused, sent) {
            match a
                .oauth
                .handle_refusal(now, head.status, head.header("www-authenticate"))
            {
                Refusal::Retry => {
                    a.routes.remove(&wire);
                    self.out
                        .push_back(Output::Server(mcp::Output::HttpAbort(wire)));
                    let mut req = req;
                    req.exchange = client;
                    a.held.push(req);
                    self.release_held(now);
                    return;
                }
                Refusal::GiveUp(why) => {
                    self.status.last_error = Some(why.clone());
                    self.out.push_back(Output::Auth(AuthEvent::Failed(why)));
                }
            }
        } else if (200..=299).contains(&head.status) {
            a.oauth.handle_success();
        }
        self.mcp.handle_http_response(now, client, head);
    }

    /// Body bytes, under the client's id.
    pub(super) fn on_http_body(&mut self, now: Time, wire: ExchangeId, bytes: &[u8]) {
        let client = self.auth.as_ref().map_or(wire, |a| a.client_id(wire));
        self.mcp.handle_http_body(now, client, bytes);
    }

    /// The end of an answer, under the client's id.
    pub(super) fn on_http_end(&mut self, now: Time, wire: ExchangeId) {
        let client = self.forget_wire(wire);
        self.mcp.handle_http_end(now, client);
    }

    /// A failed exchange, under the client's id.
    pub(super) fn on_http_failed(&mut self, now: Time, wire: ExchangeId, error: &str) {
        let client = self.forget_wire(wire);
        self.mcp.handle_http_failed(now, client, error);
    }

    fn forget_wire(&mut self, wire: ExchangeId) -> ExchangeId {
        match self.auth.as_mut() {
            Some(a) => {
                a.sent.remove(&wire);
                a.routes.remove(&wire).unwrap_or(wire)
            }
            None => wire,
        }
    }

    /// The gateway handed over the redirect back from the authorization server.
    pub(super) fn on_oauth_callback(&mut self, now: Time, payload: &serde_json::Value) {
        let Some(a) = self.auth.as_mut() else {
            return;
        };
        let mut params = payload.get("secret").cloned().unwrap_or_default();
        if let Some(state) = payload.get("state") {
            params["state"] = state.clone();
        }
        let cb = Callback::from_json(&params);
        if let Err(why) = a.oauth.handle_callback(now, &cb) {
            self.status.last_error = Some(why.clone());
            self.out.push_back(Output::Auth(AuthEvent::Failed(why)));
            self.broadcast_status(now);
        }
    }

    /// Acts on the flow's outputs; whether there were any.
    pub(super) fn pump_oauth(&mut self, now: Time) -> bool {
        let mut any = false;
        while let Some(o) = self.auth.as_mut().and_then(|a| a.oauth.poll_output()) {
            any = true;
            match o {
                OAuthOutput::Fetch(f) => self.out.push_back(Output::OAuthFetch(f)),
                OAuthOutput::Save(s) => self.out.push_back(Output::OAuthSave(s)),
                OAuthOutput::SignIn { url, host } => {
                    self.out.push_back(Output::Auth(AuthEvent::SignInNeeded {
                        resource: self
                            .auth
                            .as_ref()
                            .map(|a| a.oauth.config().server_url.clone())
                            .unwrap_or_default(),
                        url: url.clone(),
                    }));
                    self.show_sign_in(now, Some((url.clone(), host.clone())));
                    // Callers waiting for the server are told where to sign in.
                    let err = McpError::SignInNeeded { url, host };
                    for w in std::mem::take(&mut self.waiting) {
                        self.answer(now, w.call, Err(err.to_rpc_error()));
                    }
                    self.release_held(now);
                }
                OAuthOutput::SignInCleared => self.show_sign_in(now, None),
                OAuthOutput::Authorized => {
                    self.status.last_error = None;
                    self.out.push_back(Output::Auth(AuthEvent::Authorized));
                    self.release_held(now);
                }
                OAuthOutput::Failed(why) => {
                    self.status.last_error = Some(why.clone());
                    self.broadcast_status(now);
                    self.out
                        .push_back(Output::Auth(AuthEvent::Failed(why.clone())));
                    let held = self
                        .auth
                        .as_mut()
                        .map(|a| std::mem::take(&mut a.held))
                        .unwrap_or_default();
                    for req in held {
                        self.mcp
                            .fail_exchange(now, req.exchange, McpError::Auth(why.clone()));
                    }
                }
            }
        }
        any
    }

    /// Sends, keeps or fails the held requests by what the flow says now.
    fn release_held(&mut self, now: Time) {
        let Some(a) = self.auth.as_mut() else { return };
        let gate = a.oauth.gate();
        if gate == Gate::Hold {
            return;
        }
        let held = std::mem::take(&mut a.held);
        for req in held {
            let a = self.auth.as_mut().expect("checked above");
            match &gate {
                Gate::Send(token) => {
                    let wire = ExchangeId(a.next_resent);
                    a.next_resent += 1;
                    a.routes.insert(wire, req.exchange);
                    let client = req.exchange;
                    let mut out = with_authorization(req, token.clone());
                    a.sent.insert(wire, (client, out.clone()));
                    out.exchange = wire;
                    self.out.push_back(Output::Server(mcp::Output::Http(out)));
                }
                Gate::SignInNeeded { url, host } if !is_startup(&req) => {
                    let err = McpError::SignInNeeded {
                        url: url.clone(),
                        host: host.clone(),
                    };
                    self.mcp.fail_exchange(now, req.exchange, err);
                }
                _ => a.held.push(req),
            }
        }
    }

    /// Puts the sign-in into (or out of) the status, and tells the space at once.
    fn show_sign_in(&mut self, now: Time, sign_in: Option<(String, String)>) {
        let Some(a) = self.auth.as_mut() else { return };
        if a.shown == sign_in {
            return;
        }
        a.shown = sign_in.clone();
        self.status.sign_in = sign_in;
        self.broadcast_status(now);
    }

    /// Tells the space the bridge's status at once (a sign-in asked for or over, a
    /// sign-in that failed).
    fn broadcast_status(&mut self, now: Time) {
        self.status.refresh(&mut self.participant, &self.mcp);
        let status = self.participant.current_status();
        let payload = self.participant.status_payload(status);
        // Without the capability to send it the gateway refuses it; the request-status
        // answers still carry it.
        let _ = self
            .participant
            .send(now, Draft::new(Kind::ParticipantStatus).payload(payload));
    }
}
