//! Reviewer side of proposals: a bounded queue of others' proposals with their state,
//! and the `fulfil` / `reject` commands.

use super::Participant;
use super::error::{CommandError, RequestError};
use super::event::{Event, RequestId, ReviewState};
use super::requests::{Purpose, RequestOptions};
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};

impl ReviewState {
    fn is_final(&self) -> bool {
        matches!(
            self,
            ReviewState::Fulfilled
                | ReviewState::Rejected { .. }
                | ReviewState::Withdrawn { .. }
                | ReviewState::Expired
        )
    }

    fn name(&self) -> &'static str {
        match self {
            ReviewState::Open => "open",
            ReviewState::Fulfilling { .. } => "fulfilling",
            ReviewState::Fulfilled => "fulfilled",
            ReviewState::Rejected { .. } => "rejected",
            ReviewState::Withdrawn { .. } => "withdrawn",
            ReviewState::Expired => "expired",
        }
    }
}

/// A proposal by another participant.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewedProposal {
    /// Proposal envelope id.
    pub id: String,
    /// Proposer.
    pub from: String,
    /// Targets (`to` of the proposal).
    pub to: Vec<String>,
    /// The proposed MCP payload.
    pub payload: Value,
    /// When it was seen.
    pub seen_at: Time,
    /// Its state.
    pub state: ReviewState,
}

#[derive(Debug, Default)]
pub(super) struct Review {
    proposals: BTreeMap<String, ReviewedProposal>,
    order: VecDeque<String>,
    /// Fulfilment request id -> proposal id.
    fulfilments: BTreeMap<String, String>,
}

impl Review {
    /// When the oldest open proposal expires (proposals are kept in arrival order).
    pub(super) fn next_expiry(&self, timeout: std::time::Duration) -> Option<Time> {
        self.order
            .iter()
            .filter_map(|id| self.proposals.get(id))
            .find(|p| p.state == ReviewState::Open)
            .map(|p| p.seen_at + timeout)
    }

    fn evict_one(&mut self) {
        // Settled proposals go first, then the oldest open one.
        let pos = self
            .order
            .iter()
            .position(|id| self.proposals.get(id).is_none_or(|p| p.state.is_final()))
            .unwrap_or(0);
        if let Some(id) = self.order.remove(pos) {
            self.proposals.remove(&id);
            self.fulfilments.retain(|_, p| *p != id);
        }
    }
}

impl Participant {
    /// Proposals of others seen in the space, oldest first.
    pub fn proposals(&self) -> impl Iterator<Item = &ReviewedProposal> {
        self.review
            .order
            .iter()
            .filter_map(|id| self.review.proposals.get(id))
    }

    /// One reviewed proposal.
    pub fn proposal(&self, id: &str) -> Option<&ReviewedProposal> {
        self.review.proposals.get(id)
    }

    /// Fulfils a proposal: sends its payload as an `mcp/request` to the proposal's
    /// targets with `correlation_id: [proposal id]`. Completes as
    /// [`Event::RequestCompleted`] with the returned id.
    pub fn fulfil(&mut self, now: Time, proposal: &str) -> Result<RequestId, RequestError> {
        let me = self.me().to_owned();
        let p = self.expire_check(now, proposal)?;
        if matches!(&p.state, ReviewState::Fulfilling { by } if *by == me) {
            return Err(CommandError::WrongState {
                what: "proposal",
                id: proposal.to_owned(),
                state: "already being fulfilled by this participant".into(),
            }
            .into());
        }
        let (to, payload) = (p.to.clone(), p.payload.clone());
        let id = self.start_request(
            now,
            to,
            payload,
            RequestOptions::default(),
            Purpose::Fulfil(proposal.to_owned()),
            Some(proposal.to_owned()),
        )?;
        self.review
            .fulfilments
            .insert(id.as_str().to_owned(), proposal.to_owned());
        self.set_review(proposal, ReviewState::Fulfilling { by: me });
        Ok(id)
    }

    /// Rejects a proposal (`mcp/reject` to the proposer).
    pub fn reject(&mut self, now: Time, proposal: &str, reason: &str) -> Result<(), RequestError> {
        let p = self.expire_check(now, proposal)?;
        let from = p.from.clone();
        let env = self.build(
            now,
            Kind::McpReject,
            vec![from],
            vec![proposal.to_owned()],
            None,
            Some(json!({ "reason": reason })),
        );
        self.send_checked(env)?;
        let me = self.me().to_owned();
        self.set_review(
            proposal,
            ReviewState::Rejected {
                by: me,
                reason: reason.to_owned(),
            },
        );
        Ok(())
    }

    fn expire_check(
        &mut self,
        now: Time,
        proposal: &str,
    ) -> Result<&ReviewedProposal, RequestError> {
        let timeout = self.config.proposal_timeout;
        let Some(p) = self.review.proposals.get(proposal) else {
            return Err(CommandError::Unknown {
                what: "proposal",
                id: proposal.to_owned(),
            }
            .into());
        };
        if p.state == ReviewState::Open && now.saturating_since(p.seen_at) >= timeout {
            self.set_review(proposal, ReviewState::Expired);
        }
        let p = &self.review.proposals[proposal];
        if p.state.is_final() {
            return Err(CommandError::WrongState {
                what: "proposal",
                id: proposal.to_owned(),
                state: p.state.name().into(),
            }
            .into());
        }
        Ok(p)
    }

    fn set_review(&mut self, id: &str, state: ReviewState) {
        if let Some(p) = self.review.proposals.get_mut(id)
            && p.state != state
        {
            p.state = state.clone();
            self.client.emit(Event::ProposalStateChanged {
                id: id.to_owned(),
                state,
            });
        }
    }

    /// Marks open proposals older than the proposal timeout as expired.
    pub(super) fn review_timeout(&mut self, now: Time) {
        let timeout = self.config.proposal_timeout;
        let due: Vec<String> = self
            .review
            .order
            .iter()
            .filter_map(|id| self.review.proposals.get(id))
            .filter(|p| p.state == ReviewState::Open && p.seen_at + timeout <= now)
            .map(|p| p.id.clone())
            .collect();
        for id in due {
            self.set_review(&id, ReviewState::Expired);
        }
    }

    pub(super) fn on_proposal(&mut self, now: Time, env: &Envelope) {
        if env.from == self.me() || self.review.proposals.contains_key(&env.id) {
            return;
        }
        let Some(payload) = env.payload.clone().filter(Value::is_object) else {
            return self.invalid(env, "mcp/proposal without an object payload");
        };
        if self.review.proposals.len() >= self.config.bounds.max_reviewed_proposals {
            self.review.evict_one();
        }
        let to = env.to.clone().unwrap_or_default();
        self.review.order.push_back(env.id.clone());
        self.review.proposals.insert(
            env.id.clone(),
            ReviewedProposal {
                id: env.id.clone(),
                from: env.from.clone(),
                to: to.clone(),
                payload: payload.clone(),
                seen_at: now,
                state: ReviewState::Open,
            },
        );
        self.client.emit(Event::ProposalSeen {
            id: env.id.clone(),
            from: env.from.clone(),
            to,
            payload,
        });
    }

    pub(super) fn review_fulfilment_seen(&mut self, proposal: &str, env: &Envelope) {
        if !self.review.proposals.contains_key(proposal) {
            return;
        }
        if !self.review.fulfilments.contains_key(&env.id) && self.review.fulfilments.len() < 4096 {
            self.review
                .fulfilments
                .insert(env.id.clone(), proposal.to_owned());
        }
        if self.review.proposals[proposal].state == ReviewState::Open {
            self.set_review(
                proposal,
                ReviewState::Fulfilling {
                    by: env.from.clone(),
                },
            );
        }
    }

    pub(super) fn review_response_seen(&mut self, fulfilment: &str, env: &Envelope) {
        let from_target = self
            .review
            .fulfilments
            .get(fulfilment)
            .and_then(|p| self.review.proposals.get(p))
            .is_some_and(|p| p.to.is_empty() || p.to.contains(&env.from));
        if !from_target {
            return;
        }
        if let Some(proposal) = self.review.fulfilments.remove(fulfilment) {
            let ok = env
                .payload
                .as_ref()
                .is_some_and(|p| p.get("result").is_some());
            self.review_fulfil_done(&proposal, ok);
        }
    }

    pub(super) fn review_fulfil_done(&mut self, proposal: &str, ok: bool) {
        let Some(p) = self.review.proposals.get(proposal) else {
            return;
        };
        if p.state.is_final() {
            return;
        }
        if ok {
            self.set_review(proposal, ReviewState::Fulfilled);
        } else {
            // A failed fulfilment leaves the proposal open for another attempt.
            self.set_review(proposal, ReviewState::Open);
        }
    }

    pub(super) fn review_rejected(&mut self, proposal: &str, by: &str, reason: &str) {
        if self
            .review
            .proposals
            .get(proposal)
            .is_some_and(|p| !p.state.is_final())
        {
            self.set_review(
                proposal,
                ReviewState::Rejected {
                    by: by.to_owned(),
                    reason: reason.to_owned(),
                },
            );
        }
    }

    pub(super) fn review_withdrawn(&mut self, proposal: &str, by: &str, reason: &str) {
        // Only the proposer may withdraw.
        if self
            .review
            .proposals
            .get(proposal)
            .is_some_and(|p| p.from == by && !p.state.is_final())
        {
            self.set_review(
                proposal,
                ReviewState::Withdrawn {
                    reason: reason.to_owned(),
                },
            );
        }
    }
}
