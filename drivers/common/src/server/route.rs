//! Which endpoint a request head asks for.

use crate::server::http::{RequestHead, percent_decode};

/// The gateway's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A WebSocket upgrade on any path (the reference's clients do not use `/ws`).
    WebSocket {
        /// `?space=` if given.
        space: Option<String>,
    },
    /// `POST /participants/{id}/messages`: HTTP injection.
    PostMessages {
        /// The participant the caller acts as.
        participant: String,
    },
    /// `GET /participants/{id}/messages?since=`: polling.
    GetMessages {
        /// The participant whose view is read.
        participant: String,
        /// `?since=`: a timestamp or an envelope id.
        since: Option<String>,
    },
    /// `GET /participants?space=`.
    Participants {
        /// `?space=` if given.
        space: Option<String>,
    },
    /// `GET /metrics`: Prometheus (OpenMetrics) text.
    Metrics,
    /// `GET /health`.
    Health,
    /// A WebSocket upgrade on `/ui/session`: the web page's session
    /// (served by `server::ui_session`).
    UiSession,
    /// `/ui` and everything below `/ui/`: the web page ([`crate::server::ui`]).
    Ui {
        /// The request's path.
        path: String,
    },
    /// `GET /oauth/callback?code=&state=&iss=`: an authorization server sends a person
    /// back here after a bridge's sign-in.
    OAuthCallback {
        /// The query string.
        query: String,
    },
    /// `GET /oauth/client/{id}`: the client ID metadata document of a bridge.
    OAuthClient {
        /// The participant.
        participant: String,
        /// The `Host` header, for the document's own URL.
        host: Option<String>,
    },
    /// `/mcp` (any method) and its protected resource metadata: the space as an MCP
    /// server (served by `server::mcp_front`).
    Mcp,
    /// No such endpoint.
    NotFound,
    /// A known path with the wrong method.
    MethodNotAllowed,
}

/// The path of the web page's session endpoint.
pub const UI_SESSION: &str = "/ui/session";

/// The path of the MCP endpoint.
pub const MCP: &str = "/mcp";

/// Routes a request head. Any request carrying `Upgrade: websocket` is a WebSocket route.
pub fn route(head: &RequestHead) -> Route {
    if head.header_has_token("upgrade", "websocket") {
        if head.path == UI_SESSION {
            return Route::UiSession;
        }
        return Route::WebSocket {
            space: head.query_param("space"),
        };
    }
    if head.path == MCP || head.path.starts_with(crate::server::mcp_front::PRM_PATH) {
        return Route::Mcp;
    }
    if head.path == "/ui" || head.path.starts_with(crate::server::ui::PREFIX) {
        return Route::Ui {
            path: head.path.clone(),
        };
    }
    let get = head.method == "GET";
    let post = head.method == "POST";
    let trimmed = head.path.trim_end_matches('/');
    let segs: Vec<&str> = trimmed.split('/').skip(1).collect();
    match segs.as_slice() {
        ["health"] => {
            if get {
                Route::Health
            } else {
                Route::MethodNotAllowed
            }
        }
        ["metrics"] => {
            if get {
                Route::Metrics
            } else {
                Route::MethodNotAllowed
            }
        }
        ["participants"] => {
            if get {
                Route::Participants {
                    space: head.query_param("space"),
                }
            } else {
                Route::MethodNotAllowed
            }
        }
        ["oauth", "callback"] => {
            if get {
                Route::OAuthCallback {
                    query: head.query.clone().unwrap_or_default(),
                }
            } else {
                Route::MethodNotAllowed
            }
        }
        ["oauth", "client", id] => {
            let Some(participant) = percent_decode(id).filter(|p| !p.is_empty()) else {
                return Route::NotFound;
            };
            if get {
                Route::OAuthClient {
                    participant,
                    host: head.header("host").map(str::to_owned),
                }
            } else {
                Route::MethodNotAllowed
            }
        }
        ["participants", id, "messages"] => {
            let Some(participant) = percent_decode(id).filter(|p| !p.is_empty()) else {
                return Route::NotFound;
            };
            if post {
                Route::PostMessages { participant }
            } else if get {
                Route::GetMessages {
                    participant,
                    since: head.query_param("since"),
                }
            } else {
                Route::MethodNotAllowed
            }
        }
        _ => Route::NotFound,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request head for `method target` (a query after `?`) with these headers.
    pub(crate) fn head(method: &str, target: &str, headers: &[(&str, &str)]) -> RequestHead {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (target.to_owned(), None),
        };
        RequestHead {
            method: method.into(),
            path,
            query,
            headers: headers
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            version: 1,
        }
    }

    #[test]
    fn routes_every_endpoint() {
        assert_eq!(
            route(&head("GET", "/oauth/callback?code=c&state=files.x", &[])),
            Route::OAuthCallback {
                query: "code=c&state=files.x".into()
            }
        );
        assert_eq!(
            route(&head("GET", "/oauth/client/my%20files", &[("host", "h:1")])),
            Route::OAuthClient {
                participant: "my files".into(),
                host: Some("h:1".into())
            }
        );
        assert_eq!(
            route(&head("POST", "/oauth/callback", &[])),
            Route::MethodNotAllowed
        );
        let up = [("Upgrade", "websocket"), ("Connection", "Upgrade")];
        assert_eq!(
            route(&head("GET", "/ws?space=s1", &up)),
            Route::WebSocket {
                space: Some("s1".into())
            }
        );
        assert_eq!(
            route(&head("GET", "/anything/else", &up)),
            Route::WebSocket { space: None }
        );
        assert_eq!(route(&head("GET", "/ui/session", &up)), Route::UiSession);
        assert_eq!(route(&head("GET", "/health", &[])), Route::Health);
        assert_eq!(route(&head("GET", "/metrics", &[])), Route::Metrics);
        assert_eq!(
            route(&head("POST", "/health", &[])),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&head("GET", "/participants?space=x", &[])),
            Route::Participants {
                space: Some("x".into())
            }
        );
        assert_eq!(
            route(&head("POST", "/participants/my%2Did/messages", &[])),
            Route::PostMessages {
                participant: "my-id".into()
            }
        );
        assert_eq!(
            route(&head("GET", "/participants/p/messages?since=m-1", &[])),
            Route::GetMessages {
                participant: "p".into(),
                since: Some("m-1".into())
            }
        );
        assert_eq!(
            route(&head("DELETE", "/participants/p/messages", &[])),
            Route::MethodNotAllowed
        );
        assert_eq!(route(&head("GET", "/ws", &[])), Route::NotFound);
        assert_eq!(
            route(&head("GET", "/ui/app.js", &[])),
            Route::Ui {
                path: "/ui/app.js".into()
            }
        );
        assert_eq!(route(&head("GET", "/uix", &[])), Route::NotFound);
        assert_eq!(route(&head("POST", "/mcp", &[])), Route::Mcp);
        assert_eq!(route(&head("DELETE", "/mcp", &[])), Route::Mcp);
        assert_eq!(
            route(&head(
                "GET",
                "/.well-known/oauth-protected-resource/mcp",
                &[]
            )),
            Route::Mcp
        );
        assert_eq!(route(&head("GET", "/app.js", &[])), Route::NotFound);
        assert_eq!(
            route(&head("GET", "/participants//messages", &[])),
            Route::NotFound
        );
        assert_eq!(
            route(&head("GET", "/participants/%zz/messages", &[])),
            Route::NotFound
        );
    }
}
