//! OAuth for remote MCP servers, sans-IO: the MCP authorization specification's client side.
//!
//! [`OAuth`] is driven by the answers a protected MCP server gives (`401`, or `403`
//! `insufficient_scope`, with their `WWW-Authenticate` challenge): it discovers the
//! protected resource metadata (RFC 9728; the challenge's `resource_metadata`, else the
//! path-based then the root well-known URL), the authorization server's metadata (RFC 8414
//! and OpenID discovery, in the specification's order, the stated issuer checked), picks a
//! client identity (a pre-registered one, a client ID metadata document when the server
//! takes them, else dynamic registration), and builds the authorization URL (code flow,
//! PKCE S256, `resource` indicator, scopes from the challenge, else the resource's
//! `scopes_supported`, else none; `offline_access` when the server lists it). A person
//! opens that URL ([`OAuthOutput::SignIn`]); the redirect's `code`, `state` and `iss` come
//! back through [`OAuth::handle_callback`], which checks `state` (single use) and `iss`
//! (RFC 9207) before the code is exchanged. Tokens are refreshed before they expire.
//!
//! HTTP fetches are outputs ([`OAuthOutput::Fetch`]) and their answers inputs
//! ([`OAuth::handle_fetch`]); time is passed in; randomness (`state`, the PKCE verifier)
//! comes from the [`TokenSource`] the driver gives [`OAuth::new`] (the OS CSPRNG).

pub mod challenge;
pub mod metadata;
pub mod pkce;
pub mod tokens;
pub mod url;

pub use challenge::Challenge;
pub use metadata::{ResourceMetadata, ServerMetadata};
pub use tokens::{Granted, Stored};

use crate::secret::TokenSource;
use crate::time::Time;
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::time::Duration;
use url::HttpUrl;

/// How the bridge identifies itself to authorization servers.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum ClientChoice {
    /// A client registered beforehand (from a file named in the configuration).
    Registered {
        /// `client_id`.
        client_id: String,
        /// `client_secret`, for a confidential client.
        client_secret: Option<String>,
    },
    /// A client ID metadata document when the server takes them, else dynamic registration.
    #[default]
    Automatic,
}

impl std::fmt::Debug for ClientChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientChoice::Registered { client_id, .. } => {
                write!(f, "Registered({client_id})")
            }
            ClientChoice::Automatic => f.write_str("Automatic"),
        }
    }
}

/// Settings of an [`OAuth`] flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// The MCP endpoint.
    pub server_url: String,
    /// Where the authorization server sends the person back (the gateway's
    /// `/oauth/callback`).
    pub redirect_uri: String,
    /// Put before every `state`, so that whoever receives the redirect knows whose flow it
    /// is (the participant id and a `.`); the rest is random.
    pub state_prefix: String,
    /// How the client is identified.
    pub client: ClientChoice,
    /// The URL of our client ID metadata document, used as `client_id` where the
    /// authorization server takes such documents.
    pub client_metadata_url: Option<String>,
    /// `client_name` in a registration.
    pub client_name: String,
    /// Sign-ins for more scope (403 `insufficient_scope`) in a row before giving up.
    pub max_step_ups: u32,
    /// How long before expiry a token is refreshed.
    pub refresh_margin: Duration,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            server_url: String::new(),
            redirect_uri: String::new(),
            state_prefix: String::new(),
            client: ClientChoice::Automatic,
            client_metadata_url: None,
            client_name: "mew bridge".into(),
            max_step_ups: 2,
            refresh_margin: Duration::from_secs(60),
        }
    }
}

/// Identifies one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FetchId(pub u64);

/// An HTTP request for the driver (GET of metadata, POST to the token or registration
/// endpoint). `Debug` shows no body or header value.
#[derive(Clone, PartialEq, Eq)]
pub struct Fetch {
    /// Which fetch this is.
    pub id: FetchId,
    /// `true` for POST, `false` for GET.
    pub post: bool,
    /// The URL.
    pub url: String,
    /// Headers (`Content-Type`, `Accept`, `Authorization` for client_secret_basic).
    pub headers: Vec<(String, String)>,
    /// The body of a POST.
    pub body: Option<String>,
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetch")
            .field("id", &self.id)
            .field("post", &self.post)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The answer to a [`Fetch`] (the body bounded by the driver).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// Status code.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// The parameters of the redirect back from the authorization server.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Callback {
    /// `state`.
    pub state: Option<String>,
    /// `code`.
    pub code: Option<String>,
    /// `iss` (RFC 9207).
    pub iss: Option<String>,
    /// `error`.
    pub error: Option<String>,
    /// `error_description`.
    pub error_description: Option<String>,
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callback")
            .field("iss", &self.iss)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Callback {
    /// From a query string or a JSON object of the same names.
    pub fn from_query(query: &str) -> Callback {
        let mut c = Callback::default();
        for (k, v) in url::parse_form(query) {
            let slot = match k.as_str() {
                "state" => &mut c.state,
                "code" => &mut c.code,
                "iss" => &mut c.iss,
                "error" => &mut c.error,
                "error_description" => &mut c.error_description,
                _ => continue,
            };
            slot.get_or_insert(v);
        }
        c
    }

    /// From the JSON object the gateway hands over (`{"state", "code", "iss", ...}`).
    pub fn from_json(v: &Value) -> Callback {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Callback {
            state: s("state"),
            code: s("code"),
            iss: s("iss"),
            error: s("error"),
            error_description: s("error_description"),
        }
    }

    /// The JSON object of these parameters.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("state", &self.state),
            ("code", &self.code),
            ("iss", &self.iss),
            ("error", &self.error),
            ("error_description", &self.error_description),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        Value::Object(m)
    }
}

/// What the flow asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OAuthOutput {
    /// Carry out this fetch; answer with [`OAuth::handle_fetch`].
    Fetch(Fetch),
    /// A person must open `url` to sign in to `host`.
    SignIn {
        /// The authorization URL.
        url: String,
        /// The authorization server's host.
        host: String,
    },
    /// The sign-in asked for is over (done, failed or no longer needed).
    SignInCleared,
    /// A token is available: requests held for it may go.
    Authorized,
    /// The flow failed; requests held for it fail with this one-line reason.
    Failed(String),
    /// Keep this (privately) for the next run.
    Save(Stored),
}

/// What to do with a request to the MCP server now ([`OAuth::gate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Send it, with this `Authorization` value if any.
    Send(Option<String>),
    /// Hold it: a token is being obtained without anyone's help.
    Hold,
    /// A person must sign in first (at this URL, on this host).
    SignInNeeded {
        /// The authorization URL.
        url: String,
        /// The authorization server's host.
        host: String,
    },
}

/// What a refusal from the MCP server led to ([`OAuth::handle_refusal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A token is being obtained: hold the request and send it again once
    /// [`OAuthOutput::Authorized`] (or fail it on [`OAuthOutput::Failed`]).
    Retry,
    /// Nothing to do about it: pass the refusal on, with this reason.
    GiveUp(String),
}

/// The authorization-code exchange's context.
#[derive(Clone, PartialEq, Eq)]
struct Flow {
    resource: String,
    scope: Option<String>,
    meta: ServerMetadata,
    client_id: String,
    client_secret: Option<String>,
    auth_method: String,
    registered: bool,
}

#[derive(Clone, PartialEq, Eq)]
enum Phase {
    /// No flow running.
    Idle,
    /// Looking for the protected resource metadata; `left` are the URLs still to try.
    Resource {
        fetch: FetchId,
        url: String,
        left: VecDeque<String>,
        scope: Option<String>,
    },
    /// Looking for the authorization server's metadata.
    Server {
        fetch: FetchId,
        url: String,
        left: VecDeque<String>,
        prm: ResourceMetadata,
        scope: Option<String>,
    },
    /// Dynamic client registration.
    Registering { fetch: FetchId, flow: Box<Flow> },
    /// Waiting for the person; `state` and `verifier` are used once.
    Person {
        flow: Box<Flow>,
        state: String,
        verifier: String,
        url: String,
        host: String,
    },
    /// Exchanging the code.
    Exchanging { fetch: FetchId, flow: Box<Flow> },
    /// Refreshing the access token (`for_refusal`: a request waits for it).
    Refreshing { fetch: FetchId, for_refusal: bool },
}

/// The OAuth flow of one MCP server. See the module documentation.
pub struct OAuth {
    config: OAuthConfig,
    server: Option<HttpUrl>,
    entropy: Box<dyn TokenSource>,
    phase: Phase,
    stored: Option<Stored>,
    /// Authorizations started since a request last went through.
    attempts: u32,
    /// Whether the last token came from a refresh (a 401 right after one needs a sign-in).
    refreshed: bool,
    next_fetch: u64,
    out: VecDeque<OAuthOutput>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("server", &self.config.server_url)
            .field("phase", &self.phase_name())
            .field("stored", &self.stored)
            .finish_non_exhaustive()
    }
}

/// Bytes of a state's random part: one token (192 bits).
const VERIFIER_TOKENS: usize = 2;

impl OAuth {
    /// A flow for `config.server_url`, with what a previous run kept (`stored`, used only
    /// when it is for this server) and the randomness for `state` and PKCE.
    pub fn new(
        config: OAuthConfig,
        stored: Option<Stored>,
        entropy: Box<dyn TokenSource>,
    ) -> OAuth {
        let server = HttpUrl::parse(&config.server_url);
        let stored = stored.filter(|s| {
            server
                .as_ref()
                .is_some_and(|srv| HttpUrl::parse(&s.resource).is_some_and(|r| srv.is_within(&r)))
        });
        OAuth {
            config,
            server,
            entropy,
            phase: Phase::Idle,
            stored,
            attempts: 0,
            refreshed: false,
            next_fetch: 1,
            out: VecDeque::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// What is kept (tokens and client identity), if anything.
    pub fn stored(&self) -> Option<&Stored> {
        self.stored.as_ref()
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<OAuthOutput> {
        self.out.pop_front()
    }

    /// The sign-in a person is asked for, if any: `(url, host)`.
    pub fn sign_in(&self) -> Option<(&str, &str)> {
        match &self.phase {
            Phase::Person { url, host, .. } => Some((url, host)),
            _ => None,
        }
    }

    /// What to do with a request to the MCP server now.
    pub fn gate(&self) -> Gate {
        match &self.phase {
            Phase::Person { url, host, .. } => Gate::SignInNeeded {
                url: url.clone(),
                host: host.clone(),
            },
            Phase::Idle
            | Phase::Refreshing {
                for_refusal: false, ..
            } => Gate::Send(self.authorization()),
            _ => Gate::Hold,
        }
    }

    /// The `Authorization` header value, while a token is held.
    pub fn authorization(&self) -> Option<String> {
        self.stored
            .as_ref()
            .map(|s| format!("Bearer {}", s.access_token))
    }

    /// A request went through: step-ups count again from zero.
    pub fn handle_success(&mut self) {
        self.attempts = 0;
    }

    /// When [`OAuth::handle_timeout`] is next due (a refresh before expiry).
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.phase != Phase::Idle {
            return None;
        }
        let s = self.stored.as_ref()?;
        s.refresh_token.as_ref()?;
        let at = s.expires_at_ms?;
        let margin = self.config.refresh_margin.as_millis() as u64;
        Some(Time::from_unix_millis(at.saturating_sub(margin)))
    }

    /// Time passed: refreshes a token about to expire.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.poll_timeout().is_some_and(|at| at <= now) {
            self.start_refresh(false);
        }
    }

    /// The MCP server refused a request with `status` (401, or 403) and this
    /// `WWW-Authenticate` value.
    pub fn handle_refusal(
        &mut self,
        now: Time,
        status: u16,
        www_authenticate: Option<&str>,
    ) -> Refusal {
        let _ = now;
        let challenge = www_authenticate.map(Challenge::parse).unwrap_or_default();
        let step_up = status == 403 && challenge.insufficient_scope();
        if status != 401 && !step_up {
            return Refusal::GiveUp(format!("the server refused the request ({status})"));
        }
        match &self.phase {
            Phase::Idle => {}
            // One flow at a time: this request waits for it.
            Phase::Person { .. }
            | Phase::Refreshing {
                for_refusal: true, ..
            } => {
                return Refusal::Retry;
            }
            Phase::Refreshing { .. } => {
                self.promote_refresh();
                return Refusal::Retry;
            }
            _ => return Refusal::Retry,
        }
        if self.server.is_none() {
            return Refusal::GiveUp(format!(
                "the server url {} cannot be signed in to",
                self.config.server_url
            ));
        }
        // A plain 401 with a refresh token left: try it first, once.
        if status == 401
            && !self.refreshed
            && self
                .stored
                .as_ref()
                .is_some_and(|s| s.refresh_token.is_some())
        {
            self.start_refresh(true);
            return Refusal::Retry;
        }
        if step_up {
            if self.attempts >= self.config.max_step_ups {
                return Refusal::GiveUp(format!(
                    "the server still answers insufficient_scope after {} sign-ins for more scope",
                    self.attempts
                ));
            }
        } else if self.attempts > 0 {
            return Refusal::GiveUp("the server refused the token it just issued (401)".to_owned());
        }
        self.attempts += 1;
        // Step-up keeps what was asked for before (SEP-2350: the union).
        let scope = if step_up {
            union(
                self.stored.as_ref().and_then(|s| s.scope.as_deref()),
                challenge.scope.as_deref(),
            )
        } else {
            challenge.scope.clone()
        };
        let server = self.server.clone().expect("checked above");
        let mut left: VecDeque<String> = match &challenge.resource_metadata {
            Some(u) if HttpUrl::parse(u).is_some() => VecDeque::from([u.clone()]),
            _ => metadata::resource_metadata_urls(&server).into(),
        };
        let url = left.pop_front().expect("at least one URL");
        let fetch = self.get(&url);
        self.phase = Phase::Resource {
            fetch,
            url,
            left,
            scope,
        };
        Refusal::Retry
    }

    /// A fetch could not be carried out (no connection, a redirect to another host, a
    /// bound exceeded): one line.
    pub fn handle_fetch_failed(&mut self, now: Time, id: FetchId, error: &str) {
        let _ = now;
        if self.current_fetch() != Some(id) {
            return;
        }
        let what = self.fetch_purpose();
        self.fail(format!("{what}: {error}"));
    }

    /// The answer to a fetch.
    pub fn handle_fetch(&mut self, now: Time, id: FetchId, resp: FetchResponse) {
        if self.current_fetch() != Some(id) {
            return;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        match phase {
            Phase::Resource {
                url,
                mut left,
                scope,
                ..
            } => {
                let server = self.server.clone().expect("a flow has a server");
                if resp.status == 404 || resp.status == 410 {
                    if let Some(next) = left.pop_front() {
                        let fetch = self.get(&next);
                        self.phase = Phase::Resource {
                            fetch,
                            url: next,
                            left,
                            scope,
                        };
                        return;
                    }
                    return self.fail(format!("no protected resource metadata at {url}"));
                }
                let prm = match json_doc(&resp, "the protected resource metadata", &url)
                    .and_then(|v| ResourceMetadata::parse(&v, &server))
                {
                    Ok(p) => p,
                    Err(e) => return self.fail(e),
                };
                let issuer = HttpUrl::parse(&prm.authorization_server).expect("checked");
                let mut left: VecDeque<String> =
                    metadata::authorization_server_metadata_urls(&issuer).into();
                let url = left.pop_front().expect("at least one URL");
                let fetch = self.get(&url);
                self.phase = Phase::Server {
                    fetch,
                    url,
                    left,
                    prm,
                    scope,
                };
            }
            Phase::Server {
                url,
                mut left,
                prm,
                scope,
                ..
            } => {
                if !(200..=299).contains(&resp.status) {
                    if let Some(next) = left.pop_front() {
                        let fetch = self.get(&next);
                        self.phase = Phase::Server {
                            fetch,
                            url: next,
                            left,
                            prm,
                            scope,
                        };
                        return;
                    }
                    return self.fail(format!(
                        "no authorization server metadata for {} (last tried {url}: {})",
                        prm.authorization_server, resp.status
                    ));
                }
                let meta = match json_doc(&resp, "the authorization server metadata", &url)
                    .and_then(|v| ServerMetadata::parse(&v, &prm.authorization_server))
                {
                    Ok(m) => m,
                    Err(e) => return self.fail(e),
                };
                self.with_server(now, prm, meta, scope);
            }
            Phase::Registering { mut flow, .. } => {
                let doc = match json_doc(&resp, "the client registration", &flow.meta.issuer) {
                    Ok(v) if (200..=299).contains(&resp.status) => v,
                    Ok(v) => {
                        let err = v.get("error").and_then(Value::as_str).unwrap_or("refused");
                        return self.fail(format!(
                            "the client registration was refused ({}): {err}",
                            resp.status
                        ));
                    }
                    Err(e) => return self.fail(e),
                };
                let Some(id) = doc.get("client_id").and_then(Value::as_str) else {
                    return self.fail("the client registration answer has no client_id".into());
                };
                flow.client_id = id.to_owned();
                flow.client_secret = doc
                    .get("client_secret")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                flow.auth_method = match doc
                    .get("token_endpoint_auth_method")
                    .and_then(Value::as_str)
                {
                    Some(m) => m.to_owned(),
                    None if flow.client_secret.is_some() => pick_secret_method(&flow.meta),
                    None => "none".to_owned(),
                };
                flow.registered = true;
                self.ask_person(flow);
            }
            Phase::Exchanging { flow, .. } => {
                let granted = match tokens::parse_token_response(
                    resp.status,
                    resp.content_type.as_deref(),
                    &resp.body,
                ) {
                    Ok(g) => g,
                    Err(e) => return self.fail(e),
                };
                self.refreshed = false;
                let stored = Stored {
                    resource: flow.resource,
                    issuer: flow.meta.issuer,
                    token_endpoint: flow.meta.token_endpoint,
                    client_id: flow.client_id,
                    client_secret: flow.client_secret,
                    auth_method: flow.auth_method,
                    registered: flow.registered,
                    access_token: granted.access_token,
                    refresh_token: granted.refresh_token,
                    expires_at_ms: expiry(now, granted.expires_in),
                    scope: flow.scope,
                };
                self.authorized(stored);
            }
            Phase::Refreshing { for_refusal, .. } => {
                match tokens::parse_token_response(
                    resp.status,
                    resp.content_type.as_deref(),
                    &resp.body,
                ) {
                    Ok(g) => {
                        let Some(mut s) = self.stored.take() else {
                            return;
                        };
                        s.access_token = g.access_token;
                        if g.refresh_token.is_some() {
                            s.refresh_token = g.refresh_token;
                        }
                        s.expires_at_ms = expiry(now, g.expires_in);
                        self.refreshed = true;
                        self.authorized(s);
                    }
                    Err(_) if for_refusal => {
                        // The refresh token is spent: a person signs in again.
                        if let Some(s) = &mut self.stored {
                            s.refresh_token = None;
                        }
                        self.refreshed = true;
                        self.out.push_back(OAuthOutput::Failed(
                            "the refresh token was refused; sign in again".into(),
                        ));
                    }
                    Err(_) => {
                        // The token still works until it expires; the next 401 signs in.
                        if let Some(s) = &mut self.stored {
                            s.refresh_token = None;
                        }
                    }
                }
            }
            other => self.phase = other,
        }
    }

    /// The redirect back from the authorization server reached us. An answer that is not
    /// for the sign-in in progress (no sign-in, a `state` that does not match) is refused
    /// with the reason and changes nothing: whoever sent it cannot end the person's
    /// sign-in. Otherwise the `state` and PKCE verifier are spent, `iss` is checked, and
    /// the code exchanged.
    pub fn handle_callback(&mut self, now: Time, cb: &Callback) -> Result<(), String> {
        let _ = now;
        let Phase::Person { state, .. } = &self.phase else {
            return Err(
                "a sign-in answer arrived while no sign-in was in progress; ignored".into(),
            );
        };
        let matches = cb
            .state
            .as_deref()
            .is_some_and(|s| crate::secret::equal(s.as_bytes(), state.as_bytes()));
        if !matches {
            return Err(
                "the sign-in answer's state does not match the sign-in in progress; nothing was exchanged"
                    .into(),
            );
        }
        let Phase::Person { flow, verifier, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("matched above")
        };
        self.out.push_back(OAuthOutput::SignInCleared);
        if let Some(err) = &cb.error {
            let desc = cb
                .error_description
                .as_deref()
                .map(|d| format!(": {}", d.chars().take(200).collect::<String>()))
                .unwrap_or_default();
            self.fail_quiet(format!(
                "the authorization server refused the sign-in: {err}{desc}"
            ));
            return Ok(());
        }
        // RFC 9207: compared as strings, without normalization.
        match (&cb.iss, flow.meta.iss_parameter_supported) {
            (Some(iss), _) if *iss != flow.meta.issuer => {
                self.fail_quiet(format!(
                    "the sign-in answer comes from issuer {iss:?}, not {:?}; nothing was exchanged",
                    flow.meta.issuer
                ));
                return Ok(());
            }
            (None, true) => {
                self.fail_quiet(format!(
                    "the sign-in answer lacks the iss parameter {} promises; nothing was exchanged",
                    flow.meta.issuer
                ));
                return Ok(());
            }
            _ => {}
        }
        let Some(code) = cb.code.as_deref().filter(|c| !c.is_empty()) else {
            self.fail_quiet("the sign-in answer has no code".into());
            return Ok(());
        };
        let mut pairs = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.config.redirect_uri.as_str()),
            ("code_verifier", verifier.as_str()),
            ("resource", flow.resource.as_str()),
        ];
        let (headers, extra) = client_auth(
            &flow.client_id,
            flow.client_secret.as_deref(),
            &flow.auth_method,
        );
        pairs.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
        let body = url::form(&pairs);
        let fetch = self.post(&flow.meta.token_endpoint, headers, body);
        self.phase = Phase::Exchanging { fetch, flow };
        Ok(())
    }

    // ---- internals ----

    fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Idle => "idle",
            Phase::Resource { .. } => "resource metadata",
            Phase::Server { .. } => "server metadata",
            Phase::Registering { .. } => "registering",
            Phase::Person { .. } => "waiting for sign-in",
            Phase::Exchanging { .. } => "exchanging",
            Phase::Refreshing { .. } => "refreshing",
        }
    }

    fn current_fetch(&self) -> Option<FetchId> {
        match &self.phase {
            Phase::Resource { fetch, .. }
            | Phase::Server { fetch, .. }
            | Phase::Registering { fetch, .. }
            | Phase::Exchanging { fetch, .. }
            | Phase::Refreshing { fetch, .. } => Some(*fetch),
            Phase::Idle | Phase::Person { .. } => None,
        }
    }

    fn fetch_purpose(&self) -> String {
        match &self.phase {
            Phase::Resource { url, .. } => {
                format!("fetching the protected resource metadata {url}")
            }
            Phase::Server { url, .. } => {
                format!("fetching the authorization server metadata {url}")
            }
            Phase::Registering { .. } => "registering the client".into(),
            Phase::Exchanging { .. } => "exchanging the sign-in code".into(),
            Phase::Refreshing { .. } => "refreshing the token".into(),
            _ => "OAuth".into(),
        }
    }

    fn next_id(&mut self) -> FetchId {
        let id = FetchId(self.next_fetch);
        self.next_fetch += 1;
        id
    }

    fn get(&mut self, url: &str) -> FetchId {
        let id = self.next_id();
        self.out.push_back(OAuthOutput::Fetch(Fetch {
            id,
            post: false,
            url: url.to_owned(),
            headers: vec![("Accept".into(), "application/json".into())],
            body: None,
        }));
        id
    }

    fn post(&mut self, url: &str, mut headers: Vec<(String, String)>, body: String) -> FetchId {
        let id = self.next_id();
        headers.push((
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into(),
        ));
        headers.push(("Accept".into(), "application/json".into()));
        self.out.push_back(OAuthOutput::Fetch(Fetch {
            id,
            post: true,
            url: url.to_owned(),
            headers,
            body: Some(body),
        }));
        id
    }

    /// The flow failed: held requests fail with `why`, and a sign-in shown is cleared.
    fn fail(&mut self, why: String) {
        let was_person = matches!(self.phase, Phase::Person { .. });
        self.phase = Phase::Idle;
        // A failed flow is not a refused token: the next refusal starts afresh.
        self.attempts = 0;
        if was_person {
            self.out.push_back(OAuthOutput::SignInCleared);
        }
        self.out.push_back(OAuthOutput::Failed(why));
    }

    fn fail_quiet(&mut self, why: String) {
        self.phase = Phase::Idle;
        self.attempts = 0;
        self.out.push_back(OAuthOutput::Failed(why));
    }

    fn authorized(&mut self, stored: Stored) {
        self.stored = Some(stored.clone());
        self.phase = Phase::Idle;
        self.out.push_back(OAuthOutput::Save(stored));
        self.out.push_back(OAuthOutput::Authorized);
    }

    fn promote_refresh(&mut self) {
        if let Phase::Refreshing { for_refusal, .. } = &mut self.phase {
            *for_refusal = true;
        }
    }

    fn start_refresh(&mut self, for_refusal: bool) {
        let Some(s) = self.stored.clone() else { return };
        let Some(rt) = s.refresh_token.as_deref() else {
            return;
        };
        let mut pairs = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", rt),
            ("resource", s.resource.as_str()),
        ];
        let (headers, extra) =
            client_auth(&s.client_id, s.client_secret.as_deref(), &s.auth_method);
        pairs.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
        let body = url::form(&pairs);
        let fetch = self.post(&s.token_endpoint, headers, body);
        self.phase = Phase::Refreshing { fetch, for_refusal };
    }

    /// Metadata in hand: choose the scope and the client, then ask the person.
    fn with_server(
        &mut self,
        now: Time,
        prm: ResourceMetadata,
        meta: ServerMetadata,
        scope: Option<String>,
    ) {
        let _ = now;
        let mut scope = scope.or_else(|| prm.scopes_supported.clone());
        if meta.lists_scope("offline_access") && meta.grants_refresh() {
            scope = union(scope.as_deref(), Some("offline_access"));
        }
        let mut flow = Flow {
            resource: prm.resource.clone(),
            scope,
            meta,
            client_id: String::new(),
            client_secret: None,
            auth_method: "none".into(),
            registered: false,
        };
        match self.config.client.clone() {
            ClientChoice::Registered {
                client_id,
                client_secret,
            } => {
                flow.auth_method = match &client_secret {
                    Some(_) => pick_secret_method(&flow.meta),
                    None => "none".into(),
                };
                flow.client_id = client_id;
                flow.client_secret = client_secret;
            }
            ClientChoice::Automatic => {
                // A registration from before, with this same server, is reused; one
                // from another server never is (SEP-2352).
                if let Some(s) = self
                    .stored
                    .as_ref()
                    .filter(|s| s.registered && s.issuer == flow.meta.issuer)
                {
                    flow.client_id = s.client_id.clone();
                    flow.client_secret = s.client_secret.clone();
                    flow.auth_method = s.auth_method.clone();
                    flow.registered = true;
                } else if let (true, Some(url)) = (
                    flow.meta.cimd_supported,
                    self.config.client_metadata_url.clone(),
                ) {
                    flow.client_id = url;
                } else if let Some(reg) = flow.meta.registration_endpoint.clone() {
                    let method = if flow.meta.takes("none") {
                        "none".to_owned()
                    } else {
                        pick_secret_method(&flow.meta)
                    };
                    let application_type = match HttpUrl::parse(&self.config.redirect_uri) {
                        Some(u) if u.is_loopback() => "native",
                        _ => "web",
                    };
                    let body = json!({
                        "client_name": self.config.client_name,
                        "redirect_uris": [self.config.redirect_uri],
                        "grant_types": ["authorization_code", "refresh_token"],
                        "response_types": ["code"],
                        "token_endpoint_auth_method": method,
                        "application_type": application_type,
                    })
                    .to_string();
                    let id = self.next_id();
                    self.out.push_back(OAuthOutput::Fetch(Fetch {
                        id,
                        post: true,
                        url: reg,
                        headers: vec![
                            ("Content-Type".into(), "application/json".into()),
                            ("Accept".into(), "application/json".into()),
                        ],
                        body: Some(body),
                    }));
                    self.phase = Phase::Registering {
                        fetch: id,
                        flow: Box::new(flow),
                    };
                    return;
                } else {
                    return self.fail(format!(
                        "the authorization server {} takes neither a client ID metadata document nor a registration; configure a client id",
                        flow.meta.issuer
                    ));
                }
            }
        }
        self.ask_person(Box::new(flow));
    }

    /// Builds the authorization URL (fresh `state` and verifier) and asks for a person.
    fn ask_person(&mut self, flow: Box<Flow>) {
        let random = |e: &mut Box<dyn TokenSource>| e.token();
        let (Some(nonce), Some(verifier)) = (
            random(&mut self.entropy),
            (0..VERIFIER_TOKENS)
                .map(|_| random(&mut self.entropy))
                .collect::<Option<String>>(),
        ) else {
            return self.fail("no randomness for the sign-in".into());
        };
        let state = format!("{}{nonce}", self.config.state_prefix);
        let challenge = pkce::s256(&verifier);
        let mut pairs: Vec<(&str, &str)> = vec![
            ("response_type", "code"),
            ("client_id", &flow.client_id),
            ("redirect_uri", &self.config.redirect_uri),
            ("state", &state),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("resource", &flow.resource),
        ];
        if let Some(s) = flow.scope.as_deref().filter(|s| !s.is_empty()) {
            pairs.push(("scope", s));
        }
        let url = url::with_query(&flow.meta.authorization_endpoint, &url::form(&pairs));
        let host = HttpUrl::parse(&flow.meta.authorization_endpoint)
            .map(|u| u.host().to_owned())
            .unwrap_or_default();
        self.out.push_back(OAuthOutput::SignIn {
            url: url.clone(),
            host: host.clone(),
        });
        self.phase = Phase::Person {
            flow,
            state,
            verifier,
            url,
            host,
        };
    }
}

/// How a confidential client authenticates: `client_secret_basic` unless only
/// `client_secret_post` is taken.
fn pick_secret_method(meta: &ServerMetadata) -> String {
    if !meta.takes("client_secret_basic") && meta.takes("client_secret_post") {
        "client_secret_post".into()
    } else {
        "client_secret_basic".into()
    }
}

/// Headers, and form fields, that authenticate the client at the token endpoint.
type ClientAuth = (Vec<(String, String)>, Vec<(&'static str, String)>);

/// The headers and form fields that authenticate the client at the token endpoint.
fn client_auth(id: &str, secret: Option<&str>, method: &str) -> ClientAuth {
    match (method, secret) {
        ("client_secret_basic", Some(secret)) => {
            // RFC 6749 §2.3.1: each part form-encoded before base64.
            let pair = format!("{}:{}", url::encode(id), url::encode(secret));
            let b64 = base64::engine::general_purpose::STANDARD.encode(pair);
            (
                vec![("Authorization".into(), format!("Basic {b64}"))],
                vec![],
            )
        }
        ("client_secret_post", Some(secret)) => (
            vec![],
            vec![
                ("client_id", id.to_owned()),
                ("client_secret", secret.to_owned()),
            ],
        ),
        _ => (vec![], vec![("client_id", id.to_owned())]),
    }
}

/// Space-separated scopes, each once, `a`'s first.
fn union(a: Option<&str>, b: Option<&str>) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for s in a.into_iter().chain(b).flat_map(|s| s.split(' ')) {
        if !s.is_empty() && !out.contains(&s) {
            out.push(s);
        }
    }
    (!out.is_empty()).then(|| out.join(" "))
}

fn expiry(now: Time, expires_in: Option<u64>) -> Option<u64> {
    expires_in.map(|s| now.as_unix_millis().saturating_add(s.saturating_mul(1000)))
}

/// A fetched JSON document, or one line saying what came instead.
fn json_doc(resp: &FetchResponse, what: &str, url: &str) -> Result<Value, String> {
    if let Ok(v) = serde_json::from_slice::<Value>(&resp.body)
        && v.is_object()
    {
        return Ok(v);
    }
    let media = resp
        .content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or("no content type");
    Err(format!(
        "{what} at {url} is not JSON (status {}, {media})",
        resp.status
    ))
}

#[cfg(test)]
mod tests;
