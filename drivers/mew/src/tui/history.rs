//! The recent history the gateway keeps, as this participant may see it
//! (`GET /participants/{id}/messages?since=`, the HTTP API of the gateway the participant
//! joined): fetched after each join, so that a reviewer sees what led to a proposal.

use std::time::Duration;

use mew_core::Envelope;
use serde_json::Value;

/// How long the fetch may take, connecting and reading.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The most an answer may hold (the gateway keeps 16 MB of history by default).
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// The envelopes `me` may see, oldest first (after `since`, an envelope id, when given);
/// an entry that is no envelope is left out.
pub async fn fetch(
    gateway_url: String,
    token: String,
    me: String,
    since: Option<String>,
) -> Result<Vec<Envelope>, String> {
    let list = tokio::task::spawn_blocking(move || {
        fetch_blocking(&gateway_url, &token, &me, since.as_deref())
    })
    .await
    .map_err(|e| e.to_string())??;
    Ok(list
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// The gateway's HTTP address for its WebSocket address: `http(s)://authority`.
fn endpoint(gateway_url: &str) -> Result<(bool, String), String> {
    let uri: ureq::http::Uri = gateway_url
        .parse()
        .map_err(|e| format!("{gateway_url}: {e}"))?;
    let tls = match uri.scheme_str() {
        Some("wss") => true,
        Some("ws") => false,
        _ => return Err(format!("not a ws:// or wss:// address: {gateway_url}")),
    };
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| format!("no host in {gateway_url}"))?;
    let scheme = if tls { "https" } else { "http" };
    Ok((tls, format!("{scheme}://{authority}")))
}

/// `s` as one segment or query value of a URL.
fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn fetch_blocking(
    gateway_url: &str,
    token: &str,
    me: &str,
    since: Option<&str>,
) -> Result<Vec<Value>, String> {
    let (tls, base) = endpoint(gateway_url)?;
    let mut url = format!("{base}/participants/{}/messages", encode(me));
    if let Some(s) = since {
        url.push_str(&format!("?since={}", encode(s)));
    }
    let agent = if tls {
        mew_driver_common::client::tls::agent(mew_driver_common::client::tls::current()?, TIMEOUT)
    } else {
        ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into()
    };
    let resp = agent
        .get(&url)
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    read_answer(status, &body)
}

/// The envelopes of an HTTP answer, or what went wrong.
fn read_answer(status: u16, body: &[u8]) -> Result<Vec<Value>, String> {
    if status != 200 {
        let why = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| {
                v["message"]
                    .as_str()
                    .or(v["error"].as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        return Err(format!("the gateway answered {status} {why}")
            .trim()
            .to_owned());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(list)) => Ok(list),
        _ => Err("the gateway's history is not a list of envelopes".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_endpoint_follows_the_websocket_address() {
        assert_eq!(
            endpoint("ws://127.0.0.1:8080/ws?space=s").unwrap(),
            (false, "http://127.0.0.1:8080".into())
        );
        assert_eq!(
            endpoint("wss://mew.example").unwrap(),
            (true, "https://mew.example".into())
        );
        assert_eq!(
            endpoint("ws://[::1]:9/x").unwrap(),
            (false, "http://[::1]:9".into())
        );
        assert!(endpoint("http://x").is_err());
        assert!(endpoint("ws://:80").is_err());
        assert_eq!(encode("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn answers_are_read_or_explained() {
        assert_eq!(read_answer(200, b"[{\"id\":\"a\"}]").unwrap()[0]["id"], "a");
        assert_eq!(
            read_answer(403, b"{\"error\":\"forbidden\"}").unwrap_err(),
            "the gateway answered 403 forbidden"
        );
        assert!(read_answer(200, b"{}").is_err());
    }
}
