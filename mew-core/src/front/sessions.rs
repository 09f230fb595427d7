//! The host sessions of `/mcp`, sans-IO: which session a request goes to, who may use it,
//! how many there are and when an idle one ends. The driver keeps one [`Sessions`] per
//! endpoint, holding a handle of its own (`H`, how it reaches a session's task) for each.
//!
//! - A request naming `Mcp-Session-Id` goes to that session when the same credential opened
//!   it (else 403); an unknown or ended id is 404, as Streamable HTTP says.
//! - `initialize` without a session opens one, named by an id the driver draws (it goes to
//!   the host in `Mcp-Session-Id`); any other request of a session revision without one is
//!   400.
//! - Requests of the stateless revision share one session per credential: the first opens
//!   it, the next ones find it; it has no id the host sees.
//! - At most `max_sessions` at once: one more is refused with 503.
//! - A session no request has used for `idle` ends ([`Output::Expire`]); one with a request
//!   still open does not.
//! - `DELETE` of a known session by the credential that opened it ends it (200), by another
//!   is 403, of an unknown one 404; `GET` without a session is 405, with an unknown one 404,
//!   with another credential's 403.

use super::http::Refusal;
use crate::mcp::jsonrpc::codes;
use crate::time::Time;
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// What a request is, as far as choosing its session goes.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Its `Mcp-Session-Id`.
    pub session_id: Option<&'a str>,
    /// The credential it authenticated with.
    pub credential: &'a str,
    /// It is of the stateless revision.
    pub stateless: bool,
    /// It is `initialize`.
    pub initialize: bool,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Route<H> {
    /// To this session (its key and handle); the request is counted open until
    /// [`Sessions::end_request`].
    Use(String, H),
    /// A new session is needed: the driver starts one and [`Sessions::open`]s it. `announce`:
    /// its id goes to the host in `Mcp-Session-Id`.
    Open {
        /// Not a stateless session.
        announce: bool,
    },
    /// Refused.
    Refuse(Refusal),
}

/// Something for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output<H> {
    /// This session was idle too long and is forgotten: end its task.
    Expire(String, H),
}

#[derive(Debug)]
struct Entry<H> {
    handle: H,
    credential: String,
    stateless: bool,
    /// Requests under way.
    open: usize,
    /// When a request last began or ended.
    last: Time,
}

/// The sessions of one `/mcp` endpoint.
#[derive(Debug)]
pub struct Sessions<H> {
    entries: HashMap<String, Entry<H>>,
    max: usize,
    idle: Duration,
    out: VecDeque<Output<H>>,
}

fn refuse(status: u16, message: &str) -> Refusal {
    Refusal {
        status,
        body: json!({"jsonrpc": "2.0", "id": null,
                     "error": {"code": codes::INVALID_REQUEST, "message": message}}),
    }
}

impl<H: Clone> Sessions<H> {
    /// At most `max` sessions, each ending after `idle` without a request.
    pub fn new(max: usize, idle: Duration) -> Self {
        Sessions {
            entries: HashMap::new(),
            max,
            idle,
            out: VecDeque::new(),
        }
    }

    /// Sessions open.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No session is open.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Chooses the session of a POST.
    pub fn route(&mut self, now: Time, r: Request<'_>) -> Route<H> {
        if let Some(sid) = r.session_id {
            return match self.entries.get_mut(sid) {
                Some(e) if e.credential == r.credential => {
                    e.open += 1;
                    e.last = now;
                    Route::Use(sid.to_owned(), e.handle.clone())
                }
                Some(_) => Route::Refuse(refuse(403, "this session belongs to another credential")),
                None => Route::Refuse(refuse(404, "unknown or ended session")),
            };
        }
        if r.stateless {
            let found = self
                .entries
                .iter_mut()
                .find(|(_, e)| e.stateless && e.credential == r.credential);
            return match found {
                Some((key, e)) => {
                    e.open += 1;
                    e.last = now;
                    Route::Use(key.clone(), e.handle.clone())
                }
                None => Route::Open { announce: false },
            };
        }
        if r.initialize {
            return Route::Open { announce: true };
        }
        Route::Refuse(refuse(
            400,
            "Bad Request: Mcp-Session-Id header is required (initialize first)",
        ))
    }

    /// Takes a session the driver started for a request that [`Route::Open`] asked one for,
    /// under `key` (an id the driver drew, unguessable); the request is counted open. 503
    /// when the endpoint has its sessions.
    pub fn open(&mut self, now: Time, key: &str, r: Request<'_>, handle: H) -> Result<(), Refusal> {
        if self.entries.len() >= self.max {
            return Err(refuse(503, "too many MCP sessions"));
        }
        self.entries.insert(
            key.to_owned(),
            Entry {
                handle,
                credential: r.credential.to_owned(),
                stateless: r.stateless,
                open: 1,
                last: now,
            },
        );
        Ok(())
    }

    /// A request of session `key` is answered (or its host went away).
    pub fn end_request(&mut self, now: Time, key: &str) {
        if let Some(e) = self.entries.get_mut(key) {
            e.open = e.open.saturating_sub(1);
            e.last = now;
        }
    }

    /// The session's task ended (or never joined): it is forgotten.
    pub fn handle_ended(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// `DELETE` by `credential`: the session's handle, forgotten (its task is to end), or
    /// the refusal (403 when another credential opened it: knowing an id is not enough).
    pub fn delete(&mut self, session_id: Option<&str>, credential: &str) -> Result<H, Refusal> {
        let sid = session_id.ok_or_else(|| refuse(404, "unknown or ended session"))?;
        self.owned(sid, credential)?;
        let e = self.entries.remove(sid).expect("checked just above");
        Ok(e.handle)
    }

    /// `GET` (the standalone stream) by `credential`: the session's handle, or the refusal
    /// (403 when another credential opened it: the stream carries the session's questions).
    pub fn listen(&self, session_id: Option<&str>, credential: &str) -> Result<H, Refusal> {
        let Some(sid) = session_id else {
            return Err(refuse(405, "GET needs a session"));
        };
        self.owned(sid, credential).map(|e| e.handle.clone())
    }

    fn owned(&self, sid: &str, credential: &str) -> Result<&Entry<H>, Refusal> {
        match self.entries.get(sid) {
            Some(e) if e.credential == credential => Ok(e),
            Some(_) => Err(refuse(403, "this session belongs to another credential")),
            None => Err(refuse(404, "unknown or ended session")),
        }
    }

    /// When session `key` ends if no request comes (`None`: it has one under way, or is
    /// unknown).
    pub fn expires_at(&self, key: &str) -> Option<Time> {
        self.entries
            .get(key)
            .filter(|e| e.open == 0)
            .map(|e| e.last.saturating_add(self.idle))
    }

    /// When [`Sessions::handle_timeout`] has something to do next.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.entries.keys().filter_map(|k| self.expires_at(k)).min()
    }

    /// Ends the sessions idle for `idle` by `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        let due: Vec<String> = self
            .entries
            .keys()
            .filter(|k| self.expires_at(k).is_some_and(|at| at <= now))
            .cloned()
            .collect();
        for key in due {
            if let Some(e) = self.entries.remove(&key) {
                self.out.push_back(Output::Expire(key, e.handle));
            }
        }
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<Output<H>> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Time {
        Time::from_unix_millis(1_000_000 + s * 1000)
    }

    fn req<'a>(sid: Option<&'a str>, cred: &'a str) -> Request<'a> {
        Request {
            session_id: sid,
            credential: cred,
            stateless: false,
            initialize: sid.is_none(),
        }
    }

    #[test]
    fn a_session_is_its_credentials_and_unknown_ids_are_404() {
        let mut s = Sessions::new(4, Duration::from_secs(30));
        assert_eq!(
            s.route(at(0), req(None, "a")),
            Route::Open { announce: true }
        );
        s.open(at(0), "k1", req(None, "a"), 7).unwrap();
        s.end_request(at(0), "k1");
        assert_eq!(
            s.route(at(1), req(Some("k1"), "a")),
            Route::Use("k1".into(), 7)
        );
        let Route::Refuse(r) = s.route(at(1), req(Some("k1"), "b")) else {
            panic!("another credential used the session")
        };
        assert_eq!(r.status, 403);
        let Route::Refuse(r) = s.route(at(1), req(Some("nope"), "a")) else {
            panic!("an unknown id was taken")
        };
        assert_eq!(
            (r.status, r.body["error"]["code"].as_i64()),
            (404, Some(-32600))
        );
        let not_init = Request {
            initialize: false,
            ..req(None, "a")
        };
        let Route::Refuse(r) = s.route(at(1), not_init) else {
            panic!("a request without a session was taken")
        };
        assert_eq!(r.status, 400);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("initialize")
        );
    }

    #[test]
    fn stateless_requests_share_one_session_per_credential() {
        let mut s = Sessions::new(4, Duration::from_secs(30));
        let st = |c| Request {
            session_id: None,
            credential: c,
            stateless: true,
            initialize: false,
        };
        assert_eq!(s.route(at(0), st("a")), Route::Open { announce: false });
        s.open(at(0), "sa", st("a"), 1).unwrap();
        assert_eq!(s.route(at(0), st("a")), Route::Use("sa".into(), 1));
        assert_eq!(s.route(at(0), st("b")), Route::Open { announce: false });
        // A session of the same credential opened with `initialize` is not shared.
        s.open(at(0), "ia", req(None, "a"), 2).unwrap();
        assert_eq!(s.route(at(0), st("a")), Route::Use("sa".into(), 1));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn the_bound_holds_and_a_freed_place_is_taken_again() {
        let mut s = Sessions::new(2, Duration::from_secs(30));
        s.open(at(0), "a", req(None, "x"), 1).unwrap();
        s.open(at(0), "b", req(None, "x"), 2).unwrap();
        let r = s.open(at(0), "c", req(None, "x"), 3).unwrap_err();
        assert_eq!(r.status, 503);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("too many")
        );
        s.handle_ended("a");
        s.open(at(0), "c", req(None, "x"), 3).unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn an_idle_session_expires_and_one_with_a_request_open_does_not() {
        let mut s = Sessions::new(4, Duration::from_secs(10));
        s.open(at(0), "busy", req(None, "x"), 1).unwrap();
        s.open(at(0), "idle", req(None, "x"), 2).unwrap();
        s.end_request(at(2), "idle");
        assert_eq!(s.expires_at("busy"), None);
        assert_eq!(s.poll_timeout(), Some(at(12)));
        s.handle_timeout(at(11));
        assert_eq!(s.poll_output(), None);
        s.handle_timeout(at(12));
        assert_eq!(s.poll_output(), Some(Output::Expire("idle".into(), 2)));
        assert_eq!(s.poll_output(), None);
        // The long call ends; the session idles from then.
        s.handle_timeout(at(100));
        assert_eq!(s.poll_output(), None);
        s.end_request(at(100), "busy");
        assert_eq!(s.poll_timeout(), Some(at(110)));
        s.handle_timeout(at(110));
        assert_eq!(s.poll_output(), Some(Output::Expire("busy".into(), 1)));
        assert!(s.is_empty());
        let Route::Refuse(r) = s.route(at(111), req(Some("busy"), "x")) else {
            panic!("an expired session was used")
        };
        assert_eq!(r.status, 404);
    }

    #[test]
    fn delete_and_listen_answer_unknown_and_missing_ids_and_other_credentials() {
        let mut s = Sessions::new(4, Duration::from_secs(10));
        s.open(at(0), "k", req(None, "x"), 5).unwrap();
        assert_eq!(s.listen(Some("k"), "x"), Ok(5));
        assert_eq!(s.listen(None, "x").unwrap_err().status, 405);
        assert_eq!(s.listen(Some("nope"), "x").unwrap_err().status, 404);
        // Knowing the id is not enough: the stream and the session are the credential's.
        assert_eq!(s.listen(Some("k"), "y").unwrap_err().status, 403);
        assert_eq!(s.delete(Some("k"), "y").unwrap_err().status, 403);
        assert_eq!(s.len(), 1);
        assert_eq!(s.delete(Some("nope"), "x").unwrap_err().status, 404);
        assert_eq!(s.delete(None, "x").unwrap_err().status, 404);
        assert_eq!(s.delete(Some("k"), "x"), Ok(5));
        assert_eq!(s.delete(Some("k"), "x").unwrap_err().status, 404);
        assert!(s.is_empty());
    }
}
