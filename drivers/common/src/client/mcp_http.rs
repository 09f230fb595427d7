//! Streamable HTTP for the MCP client: carries out the client's [`HttpRequest`]s against one
//! endpoint and reports what comes back, for any async runtime.
//!
//! Each exchange runs on a thread of its own with `ureq` (a maintained blocking client that
//! streams bodies), so a long event stream never blocks the task that drives the core; the
//! thread hands the answer's head and body chunks to that task through one bounded queue.
//! Every wait and count has a bound ([`HttpLimits`]): connecting, the time to the answer's
//! head, silence on a stream, the life of a stream, exchanges in flight. Redirects are not
//! followed (a configured credential must not travel to another host); one shows as an
//! HTTP error. TLS uses the process's rustls configuration ([`tls::current`]).
//!
//! The configured headers (a credential among them) are added to every exchange and never
//! appear in logs or errors ([`HttpEndpoint`]'s `Debug` shows their names only).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mew_core::mcp::http::{ExchangeId, HttpMethod, HttpRequest, HttpResponseHead};

use crate::client::tls;
use crate::clock::Sleep;

/// Where a Streamable HTTP server is, and what to send it besides the protocol's headers.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpEndpoint {
    /// The MCP endpoint, `http://` or `https://`.
    pub url: String,
    /// Headers added to every exchange, values resolved (credentials included).
    pub headers: Vec<(String, String)>,
    /// Signing in with OAuth when the server asks for it, if enabled.
    pub oauth: Option<Box<crate::client::oauth::OAuthSetup>>,
}

impl std::fmt::Debug for HttpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be credentials: names only.
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("HttpEndpoint")
            .field("url", &self.url)
            .field("headers", &names)
            .field("oauth", &self.oauth.is_some())
            .finish()
    }
}

impl HttpEndpoint {
    /// Checks the URL's scheme and host, and each header's name and value, so that a
    /// mistake is one line at start rather than a failure per exchange.
    pub fn check(&self) -> Result<(), String> {
        let uri: ureq::http::Uri = self
            .url
            .parse()
            .map_err(|e| format!("bad MCP server url {}: {e}", self.url))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => {
                return Err(format!(
                    "bad MCP server url {}: the scheme must be http or https",
                    self.url
                ));
            }
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(format!("bad MCP server url {}: no host", self.url));
        }
        for (k, v) in &self.headers {
            ureq::http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("bad header name {k:?}"))?;
            // The value is not quoted: it may be a credential.
            ureq::http::HeaderValue::from_str(v)
                .map_err(|_| format!("header {k}: the value is not a valid header value"))?;
        }
        Ok(())
    }
}

/// The bounds of the HTTP driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connecting (TCP and TLS).
    pub connect: Duration,
    /// From sending the request to the answer's head.
    pub head: Duration,
    /// Silence on an answer's body; then the exchange fails (the client resumes or reopens
    /// a stream where the revision allows).
    pub idle: Duration,
    /// The longest an answer's body may be read.
    pub stream_life: Duration,
    /// Exchanges in flight at once (each holds a thread); more fail at once.
    pub max_in_flight: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connect: Duration::from_secs(10),
            head: Duration::from_secs(60),
            idle: Duration::from_secs(300),
            stream_life: Duration::from_secs(3600),
            max_in_flight: 64,
        }
    }
}

/// What happened to an exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpEvent {
    /// The answer's status and headers.
    Head(ExchangeId, HttpResponseHead),
    /// Bytes of the answer's body.
    Body(ExchangeId, Vec<u8>),
    /// The body ended.
    End(ExchangeId),
    /// The exchange failed, with a one-line reason.
    Failed(ExchangeId, String),
}

impl HttpEvent {
    fn exchange(&self) -> ExchangeId {
        match self {
            HttpEvent::Head(x, _) | HttpEvent::Body(x, _) | HttpEvent::End(x) => *x,
            HttpEvent::Failed(x, _) => *x,
        }
    }
}

/// Chunks read ahead of the driving task, over all exchanges.
const EVENT_QUEUE: usize = 256;
const READ_CHUNK: usize = 64 * 1024;

struct InFlight {
    abort: Arc<AtomicBool>,
    /// When something last arrived (or the exchange began).
    last: Instant,
    /// Whether the head arrived: silence before it is ureq's to bound.
    streaming: bool,
}

/// Carries out HTTP exchanges against one endpoint. See the module documentation.
pub struct McpHttp {
    endpoint: Arc<HttpEndpoint>,
    agent: Result<ureq::Agent, String>,
    limits: HttpLimits,
    in_flight: BTreeMap<ExchangeId, InFlight>,
    /// Threads still running, aborted ones included (they end at their next read).
    threads: Arc<AtomicUsize>,
    tx: async_channel::Sender<HttpEvent>,
    rx: async_channel::Receiver<HttpEvent>,
}

impl std::fmt::Debug for McpHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttp")
            .field("endpoint", &self.endpoint)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl McpHttp {
    /// A driver for `endpoint`, with the process's TLS configuration.
    pub fn new(endpoint: HttpEndpoint, limits: HttpLimits) -> Self {
        let agent = tls::current().map(|tls| {
            let config = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_connect(Some(limits.connect))
                .timeout_send_request(Some(limits.head))
                .timeout_send_body(Some(limits.head))
                .timeout_recv_response(Some(limits.head))
                .timeout_recv_body(Some(limits.stream_life))
                .build();
            tls::agent_with(tls, config)
        });
        let (tx, rx) = async_channel::bounded(EVENT_QUEUE);
        McpHttp {
            endpoint: Arc::new(endpoint),
            agent,
            limits,
            in_flight: BTreeMap::new(),
            threads: Arc::new(AtomicUsize::new(0)),
            tx,
            rx,
        }
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &HttpEndpoint {
        &self.endpoint
    }

    /// Exchanges started and not yet ended, failed or aborted.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Starts `req`; its outcome comes from [`McpHttp::next_event`]. One that cannot start
    /// (too many in flight, no thread) fails there at once.
    pub fn start(&mut self, req: HttpRequest) {
        let id = req.exchange;
        let fail = |s: &Self, why: String| {
            let _ = s.tx.try_send(HttpEvent::Failed(id, why));
        };
        let agent = match &self.agent {
            Ok(a) => a.clone(),
            Err(e) => return fail(self, format!("TLS: {e}")),
        };
        if self.threads.load(Ordering::SeqCst) >= self.limits.max_in_flight {
            return fail(
                self,
                format!(
                    "more than {} HTTP exchanges in flight",
                    self.limits.max_in_flight
                ),
            );
        }
        let abort = Arc::new(AtomicBool::new(false));
        let job = Exchange {
            agent,
            endpoint: self.endpoint.clone(),
            req,
            abort: abort.clone(),
            tx: self.tx.clone(),
        };
        let threads = self.threads.clone();
        threads.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("mew-mcp-http".into())
            .spawn(move || {
                job.run();
                threads.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.threads.fetch_sub(1, Ordering::SeqCst);
            return fail(self, format!("cannot start the exchange: {e}"));
        }
        self.in_flight.insert(
            id,
            InFlight {
                abort,
                last: Instant::now(),
                streaming: false,
            },
        );
    }

    /// Abandons an exchange: nothing more is reported about it, and its connection closes
    /// (at once when its thread is between reads, else when the read returns).
    pub fn abort(&mut self, id: ExchangeId) {
        if let Some(x) = self.in_flight.remove(&id) {
            x.abort.store(true, Ordering::SeqCst);
        }
    }

    /// Abandons every exchange.
    pub fn abort_all(&mut self) {
        let ids: Vec<ExchangeId> = self.in_flight.keys().copied().collect();
        for id in ids {
            self.abort(id);
        }
    }

    /// The next event of an exchange in flight; a stream silent for longer than the idle
    /// bound fails here (and is abandoned). Pending while nothing is in flight.
    pub async fn next_event<S: Sleep>(&mut self) -> HttpEvent {
        use futures_util::FutureExt;
        loop {
            let idle_at = self
                .in_flight
                .iter()
                .filter(|(_, x)| x.streaming)
                .map(|(id, x)| (x.last + self.limits.idle, *id))
                .min();
            let timer = async {
                match idle_at {
                    Some((at, _)) => S::sleep(at.saturating_duration_since(Instant::now())).await,
                    None => std::future::pending().await,
                }
            };
            let got = futures_util::select_biased! {
                ev = self.rx.recv().fuse() => ev.ok(),
                _ = timer.fuse() => None,
            };
            let Some(ev) = got else {
                if let Some((_, id)) = idle_at {
                    self.abort(id);
                    let secs = self.limits.idle.as_secs();
                    return HttpEvent::Failed(id, format!("the stream was silent for {secs} s"));
                }
                continue;
            };
            let id = ev.exchange();
            let Some(x) = self.in_flight.get_mut(&id) else {
                // Aborted: its late events are dropped.
                continue;
            };
            x.last = Instant::now();
            match &ev {
                HttpEvent::Head(..) => x.streaming = true,
                HttpEvent::End(_) | HttpEvent::Failed(..) => {
                    self.in_flight.remove(&id);
                }
                HttpEvent::Body(..) => {}
            }
            return ev;
        }
    }
}

impl Drop for McpHttp {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// One exchange, on its thread.
struct Exchange {
    agent: ureq::Agent,
    endpoint: Arc<HttpEndpoint>,
    req: HttpRequest,
    abort: Arc<AtomicBool>,
    tx: async_channel::Sender<HttpEvent>,
}

impl Exchange {
    fn run(self) {
        let id = self.req.exchange;
        let send = |ev: HttpEvent| self.tx.send_blocking(ev).is_ok();
        let url = self.endpoint.url.as_str();
        // Configured headers first; the protocol's own are the client's and come last, so a
        // configuration cannot change what the protocol says.
        let headers = self
            .endpoint
            .headers
            .iter()
            .filter(|(k, _)| {
                !self
                    .req
                    .headers
                    .iter()
                    .any(|(p, _)| p.eq_ignore_ascii_case(k))
            })
            .chain(self.req.headers.iter());
        let result = match self.req.method {
            HttpMethod::Post => {
                let mut b = self.agent.post(url);
                if self.req.header("content-type").is_none() {
                    b = b.header("Content-Type", "application/json");
                }
                if self.req.header("accept").is_none() {
                    b = b.header("Accept", "application/json, text/event-stream");
                }
                for (k, v) in headers {
                    b = b.header(k.as_str(), v.as_str());
                }
                b.send(self.req.body.as_deref().unwrap_or("").as_bytes())
            }
            HttpMethod::Get => {
                let mut b = self.agent.get(url);
                if self.req.header("accept").is_none() {
                    b = b.header("Accept", "text/event-stream");
                }
                for (k, v) in headers {
                    b = b.header(k.as_str(), v.as_str());
                }
                b.call()
            }
            HttpMethod::Delete => {
                let mut b = self.agent.delete(url);
                for (k, v) in headers {
                    b = b.header(k.as_str(), v.as_str());
                }
                b.call()
            }
        };
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                send(HttpEvent::Failed(id, describe(url, &e)));
                return;
            }
        };
        if self.abort.load(Ordering::SeqCst) {
            return;
        }
        let head = HttpResponseHead {
            status: resp.status().as_u16(),
            headers: resp
                .headers()
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                .collect(),
        };
        if !send(HttpEvent::Head(id, head)) {
            return;
        }
        let mut reader = resp.into_body().into_reader();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            if self.abort.load(Ordering::SeqCst) {
                return;
            }
            match reader.read(&mut buf) {
                Ok(0) => {
                    send(HttpEvent::End(id));
                    return;
                }
                Ok(n) => {
                    if !send(HttpEvent::Body(id, buf[..n].to_vec())) {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    send(HttpEvent::Failed(id, format!("reading the answer: {e}")));
                    return;
                }
            }
        }
    }
}

/// One line for a failed exchange (the URL, never a header).
fn describe(url: &str, e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => format!("{url}: {io}"),
        ureq::Error::Timeout(t) => format!("{url}: timed out ({t})"),
        other => format!("{url}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_header_names_only() {
        let e = HttpEndpoint {
            url: "https://h/mcp".into(),
            headers: vec![("Authorization".into(), "Bearer s3cret".into())],
            oauth: None,
        };
        let shown = format!("{e:?}");
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn check_refuses_bad_urls_and_headers() {
        let e = |url: &str, h: &[(&str, &str)]| HttpEndpoint {
            url: url.into(),
            headers: h.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            oauth: None,
        };
        assert!(e("https://h/mcp", &[("X-A", "b")]).check().is_ok());
        let err = e("ftp://h/mcp", &[]).check().unwrap_err();
        assert!(err.contains("scheme must be http or https"), "{err}");
        assert!(e("not a url", &[]).check().is_err());
        let err = e("http://h/", &[("Authorization", "Bearer x\nsecret")])
            .check()
            .unwrap_err();
        assert!(!err.contains("secret"), "{err}");
        assert!(e("http://h/", &[("Bad Name", "v")]).check().is_err());
    }
}
