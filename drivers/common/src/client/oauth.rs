//! The OAuth flow's I/O for a bridge: its fetches (metadata, registration, token endpoint)
//! with `ureq`, and the tokens kept between runs.
//!
//! Each fetch runs on a thread of its own and reports through one bounded queue. Redirects
//! are not followed: a metadata or token endpoint that redirects (above all to another
//! host, where a client secret or code must not travel) fails with one line naming where it
//! pointed. Bodies are bounded ([`MAX_BODY`]), and so are the waits. The tokens are kept in
//! a file private to the user (0600 in a 0700 folder), and never logged.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mew_core::mcp::oauth::{Fetch, FetchId, FetchResponse, OAuthConfig, Stored, url::HttpUrl};

use crate::client::tls;

/// Bytes of a fetched body at most (metadata documents and token answers are small).
pub const MAX_BODY: u64 = 256 * 1024;
/// Connecting, at most.
const CONNECT: Duration = Duration::from_secs(10);
/// The whole exchange, at most.
const TOTAL: Duration = Duration::from_secs(30);
/// Fetches in flight at once (the flow has one at a time; a margin for a refresh).
const QUEUE: usize = 8;

/// What a bridge needs to sign in to its server: the flow's settings and where the tokens
/// are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSetup {
    /// The flow's settings.
    pub config: OAuthConfig,
    /// The file the tokens are kept in.
    pub store: PathBuf,
}

/// The gateway's HTTP base (`http(s)://host:port`) from the URL the bridge joins by
/// (`ws(s)://...`), for the redirect and the client ID metadata document.
pub fn gateway_base(gateway_url: &str) -> Option<String> {
    let http = if let Some(rest) = gateway_url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = gateway_url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        gateway_url.to_owned()
    };
    HttpUrl::parse(&http).map(|u| u.origin())
}

/// The redirect URI on a gateway: `<base>/oauth/callback`.
pub fn callback_url(base: &str) -> String {
    format!("{base}/oauth/callback")
}

/// The client ID metadata document the gateway serves for a participant.
pub fn client_document_url(base: &str, participant: &str) -> String {
    format!(
        "{base}/oauth/client/{}",
        mew_core::mcp::oauth::url::encode(participant)
    )
}

/// The kept tokens, if the file holds them (a file that cannot be read is as none).
pub fn load(path: &Path) -> Option<Stored> {
    let f = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    f.take(MAX_BODY).read_to_string(&mut text).ok()?;
    match serde_json::from_str(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("ignoring the kept sign-in {}: {e}", path.display());
            None
        }
    }
}

/// Keeps the tokens (0600, replaced whole).
pub fn save(path: &Path, stored: &Stored) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(stored).map_err(std::io::Error::other)?;
    crate::state::files::write_private(path, &text)
}

/// Carries out fetches; see the module documentation.
pub struct Fetcher {
    agent: Result<ureq::Agent, String>,
    tx: async_channel::Sender<(FetchId, Result<FetchResponse, String>)>,
    rx: async_channel::Receiver<(FetchId, Result<FetchResponse, String>)>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").finish_non_exhaustive()
    }
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher::new()
    }
}

impl Fetcher {
    /// A fetcher with the process's TLS configuration.
    pub fn new() -> Fetcher {
        let agent = tls::current().map(|tls| {
            let config = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_connect(Some(CONNECT))
                .timeout_global(Some(TOTAL))
                .build();
            tls::agent_with(tls, config)
        });
        let (tx, rx) = async_channel::bounded(QUEUE);
        Fetcher { agent, tx, rx }
    }

    /// Starts `fetch`; its outcome comes from [`Fetcher::next`].
    pub fn start(&self, fetch: Fetch) {
        let id = fetch.id;
        let agent = match &self.agent {
            Ok(a) => a.clone(),
            Err(e) => {
                let _ = self.tx.try_send((id, Err(format!("TLS: {e}"))));
                return;
            }
        };
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name("mew-oauth-fetch".into())
            .spawn(move || {
                let r = run(&agent, &fetch);
                let _ = tx.send_blocking((id, r));
            });
        if let Err(e) = spawned {
            let _ = self
                .tx
                .try_send((id, Err(format!("cannot start the fetch: {e}"))));
        }
    }

    /// The next fetch's outcome.
    pub async fn next(&self) -> (FetchId, Result<FetchResponse, String>) {
        match self.rx.recv().await {
            Ok(x) => x,
            // The sender lives in `self`: never closed.
            Err(_) => std::future::pending().await,
        }
    }
}

fn run(agent: &ureq::Agent, f: &Fetch) -> Result<FetchResponse, String> {
    let url = f.url.as_str();
    let result = if f.post {
        let mut b = agent.post(url);
        for (k, v) in &f.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        b.send(f.body.as_deref().unwrap_or("").as_bytes())
    } else {
        let mut b = agent.get(url);
        for (k, v) in &f.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        b.call()
    };
    let resp = result.map_err(|e| match e {
        ureq::Error::Timeout(t) => format!("{url}: timed out ({t})"),
        ureq::Error::Io(io) => format!("{url}: {io}"),
        other => format!("{url}: {other}"),
    })?;
    let status = resp.status().as_u16();
    if (300..=399).contains(&status) {
        let to = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let from = HttpUrl::parse(url).map(|u| u.authority).unwrap_or_default();
        let host = HttpUrl::parse(to).map(|u| u.authority);
        return Err(match host {
            Some(h) if h != from => {
                format!("{url} redirected to another host ({h}); not followed")
            }
            _ => format!("{url} redirected ({status}); not followed"),
        });
    }
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = Vec::new();
    resp.into_body()
        .into_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("{url}: reading the answer: {e}"))?;
    if body.len() as u64 > MAX_BODY {
        return Err(format!("{url}: the answer is larger than {MAX_BODY} bytes"));
    }
    Ok(FetchResponse {
        status,
        content_type,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_urls() {
        assert_eq!(
            gateway_base("ws://127.0.0.1:8080/ws?space=s").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(
            gateway_base("wss://mew.example.com/").as_deref(),
            Some("https://mew.example.com")
        );
        assert_eq!(callback_url("http://h:1"), "http://h:1/oauth/callback");
        assert_eq!(
            client_document_url("http://h:1", "my files"),
            "http://h:1/oauth/client/my%20files"
        );
    }
}
