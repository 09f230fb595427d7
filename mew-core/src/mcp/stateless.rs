//! The stateless revision (2026-07-28): what every request carries in `_meta`, what
//! `server/discover` answers, and what a result's `resultType` and cache hints mean.

use super::version::ProtocolVersion;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// `_meta` key: the revision of this request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for this request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of a result: the server's name and version.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key: the log level wanted for this request (none: no log messages).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The error a server answers to a revision it does not speak; `data.supported` lists the
/// ones it does.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Inputs asked for in one `input_required` round, at most.
pub const MAX_INPUT_REQUESTS: usize = 32;

/// `params` with the request's `_meta` set: the revision and client info replace whatever
/// the caller put under those keys (the revision must match the header); the capabilities
/// are ours, less those the caller's own `_meta` capabilities (when it names them) lack; the
/// caller's other `_meta` keys (`progressToken`, ...) stay.
pub fn with_request_meta(
    params: Option<&Value>,
    version: ProtocolVersion,
    capabilities: &Value,
    client_info: &Value,
) -> Value {
    let mut p = match params {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let mut meta = match p.remove("_meta") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    meta.insert(META_PROTOCOL_VERSION.into(), version.as_str().into());
    // A caller that names its own capabilities (a host behind a space) narrows ours: a
    // question it could not answer is not invited.
    let declared = match (meta.get(META_CLIENT_CAPABILITIES), capabilities) {
        (Some(Value::Object(theirs)), Value::Object(ours)) => Value::Object(
            ours.iter()
                .filter(|(k, _)| theirs.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => capabilities.clone(),
    };
    meta.insert(META_CLIENT_CAPABILITIES.into(), declared);
    meta.insert(META_CLIENT_INFO.into(), client_info.clone());
    p.insert("_meta".into(), Value::Object(meta));
    Value::Object(p)
}

/// Who may reuse a cached result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheScope {
    /// Anyone, across authorization contexts.
    Public,
    /// Only within the same authorization context.
    Private,
}

/// A result's caching hint (`ttlMs`, `cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    /// How long the result stays fresh.
    pub ttl: Duration,
    /// Who may reuse it.
    pub scope: CacheScope,
}

impl CacheHint {
    /// The hint of a result, when it carries a valid one.
    pub fn of(result: &Value) -> Option<CacheHint> {
        let ttl = result.get("ttlMs")?.as_u64()?;
        let scope = match result.get("cacheScope")?.as_str()? {
            "public" => CacheScope::Public,
            "private" => CacheScope::Private,
            _ => return None,
        };
        Some(CacheHint {
            ttl: Duration::from_millis(ttl),
            scope,
        })
    }
}

/// What a result says it is.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultKind {
    /// The final result (also when `resultType` is absent, as older revisions send it).
    Complete(Value),
    /// The server needs answers before the request can complete.
    InputRequired(InputRequired),
}

/// An `input_required` result: what to ask, and the state to echo on the retry.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequired {
    /// Each request under its server-assigned key, in key order.
    pub requests: Vec<(String, InputRequest)>,
    /// Opaque state, echoed byte for byte on the retry; absent when the server sent none.
    pub request_state: Option<String>,
}

/// One request inside `inputRequests`.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequest {
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: String,
    /// Its params.
    pub params: Value,
}

/// Why a result cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    /// A `resultType` this client does not know.
    #[error("unknown resultType {0:?}")]
    UnknownType(String),
    /// An `input_required` result that is malformed.
    #[error("malformed input_required result: {0}")]
    BadInputRequired(&'static str),
}

/// Reads a result's `resultType`.
pub fn classify_result(result: Value) -> Result<ResultKind, ResultError> {
    let kind = match result.get("resultType") {
        None | Some(Value::Null) => return Ok(ResultKind::Complete(result)),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ResultError::UnknownType("<not a string>".into())),
    };
    match kind.as_str() {
        "complete" => Ok(ResultKind::Complete(result)),
        "input_required" => parse_input_required(&result).map(ResultKind::InputRequired),
        _ => Err(ResultError::UnknownType(kind)),
    }
}

fn parse_input_required(result: &Value) -> Result<InputRequired, ResultError> {
    let request_state = match result.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(ResultError::BadInputRequired(
                "requestState is not a string",
            ));
        }
    };
    let mut requests = Vec::new();
    match result.get("inputRequests") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            if m.len() > MAX_INPUT_REQUESTS {
                return Err(ResultError::BadInputRequired("too many inputRequests"));
            }
            for (key, r) in m {
                let method = r.get("method").and_then(Value::as_str).ok_or(
                    ResultError::BadInputRequired("an input request has no method"),
                )?;
                let params = r.get("params").cloned().unwrap_or_else(|| json!({}));
                requests.push((
                    key.clone(),
                    InputRequest {
                        method: method.to_owned(),
                        params,
                    },
                ));
            }
        }
        Some(_) => {
            return Err(ResultError::BadInputRequired(
                "inputRequests is not an object",
            ));
        }
    }
    if requests.is_empty() && request_state.is_none() {
        return Err(ResultError::BadInputRequired(
            "neither inputRequests nor requestState",
        ));
    }
    Ok(InputRequired {
        requests,
        request_state,
    })
}

/// What `server/discover` reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// `supportedVersions`, as sent.
    pub supported_versions: Vec<String>,
    /// `capabilities`.
    pub capabilities: Map<String, Value>,
    /// The server's name and version (result `_meta`, or `serverInfo` as earlier drafts
    /// placed it).
    pub server_info: Value,
    /// `instructions`.
    pub instructions: Option<String>,
    /// The result's caching hint.
    pub cache: Option<CacheHint>,
}

/// Parses a `server/discover` result.
pub fn parse_discover(result: &Value) -> Result<Discovered, &'static str> {
    let supported_versions = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .ok_or("supportedVersions missing")?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let capabilities = match result.get("capabilities") {
        Some(Value::Object(c)) => c.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err("capabilities is not an object"),
    };
    let server_info = result
        .get("_meta")
        .and_then(|m| m.get(META_SERVER_INFO))
        .or_else(|| result.get("serverInfo"))
        .cloned()
        .unwrap_or(Value::Null);
    Ok(Discovered {
        supported_versions,
        capabilities,
        server_info,
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
        cache: CacheHint::of(result),
    })
}

/// The revisions named in an unsupported-version error's `data.supported`.
pub fn supported_versions_of_error(data: Option<&Value>) -> Vec<String> {
    data.and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_is_set_and_callers_other_keys_kept() {
        let caps = json!({"roots":{"listChanged":true}});
        let info = json!({"name":"mew-bridge","version":"1"});
        let p = with_request_meta(
            Some(&json!({"name":"t","_meta":{"progressToken":5,
                "io.modelcontextprotocol/protocolVersion":"1999-01-01"}})),
            ProtocolVersion::V2026_07_28,
            &caps,
            &info,
        );
        assert_eq!(
            p,
            json!({"name":"t","_meta":{
                "progressToken":5,
                "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},
                "io.modelcontextprotocol/clientInfo":{"name":"mew-bridge","version":"1"}
            }})
        );
        let narrowed = with_request_meta(
            Some(
                &json!({"_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}),
            ),
            ProtocolVersion::V2026_07_28,
            &json!({"roots":{},"elicitation":{"form":{}},"sampling":{}}),
            &info,
        );
        assert_eq!(
            narrowed["_meta"][META_CLIENT_CAPABILITIES],
            json!({"elicitation":{"form":{}}})
        );
        let bare = with_request_meta(None, ProtocolVersion::V2026_07_28, &json!({}), &info);
        assert_eq!(bare["_meta"][META_CLIENT_CAPABILITIES], json!({}));
    }

    /// The first `input_required` result of the conformance suite's
    /// `sep-2322-client-request-state` scenario.
    #[test]
    fn input_required_from_the_conformance_scenario() {
        let state = r#"{"nonce":"0b5c","originalId":3}"#;
        let result = json!({
          "resultType": "input_required",
          "inputRequests": {
            "confirm": {
              "method": "elicitation/create",
              "params": {
                "message": "Please confirm to continue",
                "requestedSchema": {"type":"object","properties":{"confirmed":{"type":"boolean","description":"Confirm?"}}}
              }
            }
          },
          "requestState": state
        });
        let ResultKind::InputRequired(ir) = classify_result(result).unwrap() else {
            panic!()
        };
        assert_eq!(ir.request_state.as_deref(), Some(state));
        assert_eq!(ir.requests.len(), 1);
        assert_eq!(ir.requests[0].0, "confirm");
        assert_eq!(ir.requests[0].1.method, "elicitation/create");
        assert_eq!(
            ir.requests[0].1.params["message"],
            "Please confirm to continue"
        );
    }

    #[test]
    fn result_types() {
        // No resultType: complete (test_mrtr_no_result_type).
        let r = json!({"content":[{"type":"text","text":"no-result-type-test-ok"}]});
        assert_eq!(classify_result(r.clone()), Ok(ResultKind::Complete(r)));
        let r = json!({"resultType":"complete","content":[]});
        assert_eq!(classify_result(r.clone()), Ok(ResultKind::Complete(r)));
        assert_eq!(
            classify_result(json!({"resultType":"later"})),
            Err(ResultError::UnknownType("later".into()))
        );
        assert!(classify_result(json!({"resultType":"input_required"})).is_err());
        // State alone (load shedding) is a valid round.
        let ResultKind::InputRequired(ir) =
            classify_result(json!({"resultType":"input_required","requestState":"s"})).unwrap()
        else {
            panic!()
        };
        assert!(ir.requests.is_empty());
        assert!(
            classify_result(json!({"resultType":"input_required","inputRequests":{"a":{}}}))
                .is_err()
        );
    }

    /// `server/discover` as the conformance suite's stateless mock and its HTTP scenarios
    /// answer it (server identity in `_meta`, or in the body as the scenarios put it).
    #[test]
    fn discover_results_of_both_shapes() {
        let mock = json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name":"conformance-mock-server","version":"1.0.0"}},
            "resultType": "complete", "ttlMs": 0, "cacheScope": "private"
        });
        let d = parse_discover(&mock).unwrap();
        assert_eq!(d.supported_versions, vec!["2026-07-28"]);
        assert!(d.capabilities.contains_key("tools"));
        assert_eq!(d.server_info["name"], "conformance-mock-server");
        assert_eq!(
            d.cache,
            Some(CacheHint {
                ttl: Duration::ZERO,
                scope: CacheScope::Private
            })
        );
        let scenario = json!({"resultType":"complete","ttlMs":0,"cacheScope":"private",
            "supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},
            "serverInfo":{"name":"mrtr-mock-server","version":"1.0.0"}});
        assert_eq!(
            parse_discover(&scenario).unwrap().server_info["name"],
            "mrtr-mock-server"
        );
        assert!(parse_discover(&json!({"capabilities":{}})).is_err());
        assert_eq!(
            CacheHint::of(&json!({"ttlMs":60000,"cacheScope":"public"})),
            Some(CacheHint {
                ttl: Duration::from_secs(60),
                scope: CacheScope::Public
            })
        );
        assert_eq!(
            CacheHint::of(&json!({"ttlMs":-1,"cacheScope":"public"})),
            None
        );
    }

    #[test]
    fn unsupported_version_error_lists_what_the_server_speaks() {
        // The error of the conformance suite's `request-metadata` scenario.
        let data = json!({"supported":["2026-07-28"],"requested":"2025-11-25"});
        assert_eq!(supported_versions_of_error(Some(&data)), vec!["2026-07-28"]);
        assert!(supported_versions_of_error(None).is_empty());
    }
}
