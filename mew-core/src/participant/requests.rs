//! Outgoing MCP requests and proposals: routing (ADR-WCM), pending table with deadlines,
//! correlation of responses, fulfilments, rejections, withdrawals and timeouts.

use super::Participant;
use super::error::RequestError;
use super::event::{Event, RequestId, RequestRoute, RouteReason};
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Map, Value, json};
use smallvec::SmallVec;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

impl RequestId {
    /// The id as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Borrow<str> for RequestId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId(s)
    }
}

/// Per-call options of [`Participant::mcp_request`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestOptions {
    /// Deadline override.
    pub timeout: Option<Duration>,
    /// Propose even when a direct request is allowed.
    pub prefer_proposal: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Purpose {
    /// Completion goes to the application.
    App,
    /// A `tools/list` of discovery.
    Discovery(String),
    /// Our fulfilment of someone's proposal (completion also updates the review).
    Fulfil(String),
}

#[derive(Debug)]
pub(super) struct Pending {
    route: RequestRoute,
    /// Transmitted (not waiting in the not-ready queue).
    in_flight: bool,
    deadline: Time,
    purpose: Purpose,
    fulfilments: SmallVec<[String; 1]>,
    /// Who may answer: the request's `to` (empty: anyone).
    targets: Vec<String>,
}

/// The pending table; every entry has a deadline in `deadlines`.
#[derive(Debug, Default)]
pub(super) struct Requests {
    pending: BTreeMap<RequestId, Pending>,
    deadlines: BTreeSet<(Time, RequestId)>,
    /// Fulfilment envelope id -> our proposal id and who may answer the fulfilment.
    fulfilments: BTreeMap<String, (RequestId, Vec<String>)>,
    next_rpc_id: u64,
}

impl Requests {
    pub(super) fn contains(&self, id: &str) -> bool {
        self.pending.contains_key(id) || self.fulfilments.contains_key(id)
    }

    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }

    fn insert(
        &mut self,
        id: RequestId,
        route: RequestRoute,
        deadline: Time,
        purpose: Purpose,
        in_flight: bool,
        targets: Vec<String>,
    ) {
        self.deadlines.insert((deadline, id.clone()));
        self.pending.insert(
            id,
            Pending {
                route,
                in_flight,
                deadline,
                purpose,
                fulfilments: SmallVec::new(),
                targets,
            },
        );
    }

    fn remove(&mut self, id: &str) -> Option<(RequestId, Pending)> {
        let (k, p) = self.pending.remove_entry(id)?;
        self.deadlines.remove(&(p.deadline, k.clone()));
        for f in &p.fulfilments {
            self.fulfilments.remove(f.as_str());
        }
        Some((k, p))
    }

    /// The client flushed its queue: everything pending is now on the wire.
    pub(super) fn all_in_flight(&mut self) {
        for p in self.pending.values_mut() {
            p.in_flight = true;
        }
    }

    fn rpc_id(&mut self) -> u64 {
        self.next_rpc_id += 1;
        self.next_rpc_id
    }
}

/// Adds `jsonrpc` and a numeric `id` when absent, as an MCP request needs them.
pub(super) fn with_jsonrpc(mut payload: Map<String, Value>, id: u64) -> Value {
    payload
        .entry("jsonrpc")
        .or_insert_with(|| Value::String("2.0".into()));
    payload.entry("id").or_insert_with(|| json!(id));
    Value::Object(payload)
}

/// The settled outcome a response payload carries.
pub(super) fn response_outcome(payload: Option<&Value>) -> Result<Value, RequestError> {
    let Some(p) = payload.and_then(Value::as_object) else {
        return Err(RequestError::MalformedResponse(
            "payload is not an object".into(),
        ));
    };
    if let Some(err) = p.get("error") {
        return Err(RequestError::Rpc {
            code: err.get("code").and_then(Value::as_i64).unwrap_or(-32603),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            data: err.get("data").cloned(),
        });
    }
    match p.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(RequestError::MalformedResponse(
            "neither result nor error".into(),
        )),
    }
}

impl Participant {
    /// Smart MCP request (ADR-WCM): a direct `mcp/request` when the capabilities allow the
    /// exact payload, else an `mcp/proposal` when allowed, else
    /// [`RequestError::NoCapability`]. The decision is reported as
    /// [`Event::RouteDecision`]; the outcome as [`Event::RequestCompleted`] with the
    /// returned id.
    pub fn mcp_request(
        &mut self,
        now: Time,
        to: Vec<String>,
        payload: Value,
        opts: RequestOptions,
    ) -> Result<RequestId, RequestError> {
        self.start_request(now, to, payload, opts, Purpose::App, None)
    }

    /// A direct `mcp/request` about an earlier envelope (its `correlation_id` names
    /// `about`), such as a question put to the requester of a call being served. Never
    /// turned into a proposal; completes as [`Event::RequestCompleted`].
    pub fn mcp_request_about(
        &mut self,
        now: Time,
        to: Vec<String>,
        payload: Value,
        about: &str,
        opts: RequestOptions,
    ) -> Result<RequestId, RequestError> {
        self.start_request(now, to, payload, opts, Purpose::App, Some(about.to_owned()))
    }

    pub(super) fn start_request(
        &mut self,
        now: Time,
        to: Vec<String>,
        payload: Value,
        opts: RequestOptions,
        purpose: Purpose,
        correlation: Option<String>,
    ) -> Result<RequestId, RequestError> {
        let max = self.config.bounds.max_pending_requests;
        if self.requests.len() >= max {
            return Err(RequestError::TooManyPending { max });
        }
        let Value::Object(body) = payload else {
            return Err(RequestError::InvalidPayload(
                "an MCP payload must be a JSON object".into(),
            ));
        };
        let rpc_id = self.requests.rpc_id();
        let direct = with_jsonrpc(body.clone(), rpc_id);
        let can_direct = self.can_send(&Kind::McpRequest, Some(&direct));
        let proposal = Value::Object(body);
        let forced = correlation.is_some() || !matches!(purpose, Purpose::App);
        let prefer = !forced && (opts.prefer_proposal || self.config.prefer_proposals);
        let can_propose = self.caps_known && self.caps.allows("mcp/proposal", Some(&proposal));
        let (route, reason) = if forced || (can_direct && !(prefer && can_propose)) {
            (RequestRoute::Request, RouteReason::DirectAllowed)
        } else if can_propose {
            let reason = if can_direct {
                RouteReason::PreferProposal
            } else {
                RouteReason::DirectNotAllowed
            };
            (RequestRoute::Proposal, reason)
        } else {
            return Err(RequestError::NoCapability {
                held: self.caps.to_json(),
            });
        };
        if route == RequestRoute::Proposal && to.is_empty() {
            return Err(RequestError::NoTarget);
        }
        let (kind, body, timeout) = match route {
            RequestRoute::Request => (Kind::McpRequest, direct, self.config.request_timeout),
            RequestRoute::Proposal => (Kind::McpProposal, proposal, self.config.proposal_timeout),
        };
        let env = self.build(
            now,
            kind,
            to,
            correlation.into_iter().collect(),
            None,
            Some(body),
        );
        let id = RequestId(env.id.clone());
        let env_to = env.to.clone();
        self.send_checked(env)?;
        let deadline = now + opts.timeout.unwrap_or(timeout);
        let in_flight = self.client.is_ready();
        let targets = env_to.unwrap_or_default();
        self.requests
            .insert(id.clone(), route, deadline, purpose, in_flight, targets);
        self.client.emit(Event::RouteDecision {
            id: id.clone(),
            route,
            reason,
        });
        Ok(id)
    }

    /// Withdraws one of our pending proposals (`mcp/withdraw`); it completes with
    /// [`RequestError::Withdrawn`].
    pub fn withdraw(
        &mut self,
        now: Time,
        proposal: &RequestId,
        reason: &str,
    ) -> Result<(), super::CommandError> {
        let in_flight = match self.requests.pending.get(proposal.as_str()) {
            Some(p) if p.route == RequestRoute::Proposal => p.in_flight,
            Some(_) => {
                return Err(super::CommandError::WrongState {
                    what: "request",
                    id: proposal.to_string(),
                    state: "a direct request, not a proposal".into(),
                });
            }
            None => {
                return Err(super::CommandError::Unknown {
                    what: "proposal",
                    id: proposal.to_string(),
                });
            }
        };
        if in_flight {
            self.send_withdraw(now, proposal.as_str(), reason);
        }
        self.settle(
            now,
            proposal.as_str(),
            Err(RequestError::Withdrawn {
                reason: reason.to_owned(),
            }),
        );
        Ok(())
    }

    fn send_withdraw(&mut self, now: Time, proposal: &str, reason: &str) {
        let env = self.build(
            now,
            Kind::McpWithdraw,
            Vec::new(),
            vec![proposal.to_owned()],
            None,
            Some(json!({ "reason": reason })),
        );
        self.send_internal(env);
    }

    /// Ids and deadlines of every pending request and proposal (every one has a deadline).
    pub fn pending_requests(&self) -> impl Iterator<Item = (&RequestId, Time)> {
        self.requests.pending.iter().map(|(k, p)| (k, p.deadline))
    }

    /// Whether this request or proposal is still pending.
    pub fn is_pending(&self, id: &RequestId) -> bool {
        self.requests.pending.contains_key(id.as_str())
    }

    /// Removes a pending entry and delivers its outcome.
    pub(super) fn settle(&mut self, now: Time, id: &str, result: Result<Value, RequestError>) {
        let Some((id, p)) = self.requests.remove(id) else {
            return;
        };
        if !p.in_flight {
            // Never transmitted: make sure it never will be, now that it is settled.
            self.client.unqueue(id.as_str());
        }
        match p.purpose {
            Purpose::App => self.client.emit(Event::RequestCompleted { id, result }),
            Purpose::Discovery(participant) => {
                self.discovery_result(now, &participant, result);
            }
            Purpose::Fulfil(proposal) => {
                self.review_fulfil_done(&proposal, result.is_ok());
                self.client.emit(Event::RequestCompleted { id, result });
            }
        }
    }

    pub(super) fn fail_direct_requests(&mut self, now: Time, error: RequestError) {
        let ids: Vec<RequestId> = self
            .requests
            .pending
            .iter()
            .filter(|(_, p)| p.route == RequestRoute::Request && p.in_flight)
            .map(|(k, _)| k.clone())
            .collect();
        for id in ids {
            self.settle(now, id.as_str(), Err(error.clone()));
        }
    }

    pub(super) fn fail_all_requests(&mut self, now: Time, error: RequestError) {
        let ids: Vec<RequestId> = self.requests.pending.keys().cloned().collect();
        for id in ids {
            if self
                .requests
                .pending
                .get(id.as_str())
                .map(|p| (p.route, p.in_flight))
                == Some((RequestRoute::Proposal, true))
            {
                self.send_withdraw(now, id.as_str(), "no_longer_needed");
            }
            self.settle(now, id.as_str(), Err(error.clone()));
        }
    }

    pub(super) fn requests_timeout(&mut self, now: Time) {
        while let Some((t, id)) = self.requests.deadlines.first().cloned() {
            if t > now {
                break;
            }
            let route = self.requests.pending.get(id.as_str()).map(|p| p.route);
            let in_flight = self
                .requests
                .pending
                .get(id.as_str())
                .is_some_and(|p| p.in_flight);
            if route == Some(RequestRoute::Proposal) && in_flight {
                self.send_withdraw(now, id.as_str(), "timeout");
            }
            if route.is_none() {
                // Index out of step with the table would be a bug; drop the stale entry.
                self.requests.deadlines.remove(&(t, id));
                continue;
            }
            self.settle(now, id.as_str(), Err(RequestError::Timeout));
        }
    }

    /// An `mcp/request` seen in the space: a fulfilment of one of our proposals, or of a
    /// proposal under review.
    pub(super) fn on_request_seen(&mut self, _now: Time, env: &Envelope) {
        let Some(c) = env.first_correlation() else {
            return;
        };
        if let Some(p) = self.requests.pending.get_mut(c)
            && p.route == RequestRoute::Proposal
        {
            if p.fulfilments.len() < 8 && !p.fulfilments.contains(&env.id) {
                p.fulfilments.push(env.id.clone());
                let id = RequestId(c.to_owned());
                let targets = env.to.clone().unwrap_or_default();
                self.requests
                    .fulfilments
                    .insert(env.id.clone(), (id.clone(), targets));
                self.client.emit(Event::ProposalFulfilling {
                    id,
                    by: env.from.clone(),
                    fulfilment_id: env.id.clone(),
                });
            }
            return;
        }
        let c = c.to_owned();
        self.review_fulfilment_seen(&c, env);
    }

    pub(super) fn on_response(&mut self, now: Time, env: &Envelope) {
        let Some(c) = env.first_correlation() else {
            return self.invalid(env, "mcp/response without correlation_id");
        };
        // Under unified delivery everyone sees request ids: only a target may answer.
        let from_target = |targets: &[String]| targets.is_empty() || targets.contains(&env.from);
        if let Some(p) = self.requests.pending.get(c) {
            if !from_target(&p.targets) {
                return self.invalid(
                    env,
                    "response from a participant the request was not sent to",
                );
            }
            let id = c.to_owned();
            self.settle(now, &id, response_outcome(env.payload.as_ref()));
        } else if let Some((proposal, targets)) = self.requests.fulfilments.get(c) {
            if !from_target(targets) {
                return self.invalid(
                    env,
                    "response from a participant the fulfilment was not sent to",
                );
            }
            // First response to any fulfilment settles the proposal; later ones find
            // nothing pending.
            let proposal = proposal.clone();
            self.settle(
                now,
                proposal.as_str(),
                response_outcome(env.payload.as_ref()),
            );
        } else {
            let c = c.to_owned();
            self.discovery_overhear_response(now, &c, env);
            self.review_response_seen(&c, env);
        }
    }

    pub(super) fn on_reject(&mut self, now: Time, env: &Envelope) {
        let Some(c) = env.first_correlation() else {
            return self.invalid(env, "mcp/reject without correlation_id");
        };
        let reason = env
            .payload
            .as_ref()
            .and_then(|p| p.get("reason"))
            .and_then(Value::as_str)
            .unwrap_or("other")
            .to_owned();
        if self.requests.pending.get(c).map(|p| p.route) == Some(RequestRoute::Proposal) {
            let id = c.to_owned();
            self.settle(
                now,
                &id,
                Err(RequestError::Rejected {
                    by: env.from.clone(),
                    reason,
                }),
            );
        } else {
            let c = c.to_owned();
            self.review_rejected(&c, &env.from, &reason);
        }
    }

    pub(super) fn on_withdraw(&mut self, _now: Time, env: &Envelope) {
        let Some(c) = env.first_correlation() else {
            return self.invalid(env, "mcp/withdraw without correlation_id");
        };
        // Our own proposals are withdrawn by our own commands only; a withdrawal naming
        // them from anyone else is ignored.
        if self.requests.pending.contains_key(c) {
            return;
        }
        let c = c.to_owned();
        let reason = env
            .payload
            .as_ref()
            .and_then(|p| p.get("reason"))
            .and_then(Value::as_str)
            .unwrap_or("other")
            .to_owned();
        self.review_withdrawn(&c, &env.from, &reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_of_responses() {
        assert_eq!(
            response_outcome(Some(&json!({"jsonrpc":"2.0","id":1,"result":{"x":1}}))),
            Ok(json!({"x":1}))
        );
        assert_eq!(
            response_outcome(Some(
                &json!({"error":{"code":-32601,"message":"nope","data":[1]}})
            )),
            Err(RequestError::Rpc {
                code: -32601,
                message: "nope".into(),
                data: Some(json!([1]))
            })
        );
        assert!(matches!(
            response_outcome(Some(&json!({}))),
            Err(RequestError::MalformedResponse(_))
        ));
        assert!(matches!(
            response_outcome(None),
            Err(RequestError::MalformedResponse(_))
        ));
    }

    #[test]
    fn jsonrpc_fields_are_added_not_overwritten() {
        let v = with_jsonrpc(
            json!({"method":"tools/list","id":"keep"})
                .as_object()
                .unwrap()
                .clone(),
            7,
        );
        assert_eq!(
            v,
            json!({"method":"tools/list","id":"keep","jsonrpc":"2.0"})
        );
    }
}
