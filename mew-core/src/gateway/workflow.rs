//! The proposal workflow under `addressed` delivery.
//!
//! Strict routing by `to` would hide a proposal from every reviewer (its `to` names the
//! operation's target) and hide the outcome from the proposer (the fulfilment goes to the
//! target, the response to the fulfiller). So in `addressed` mode proposals, withdrawals and
//! rejections are delivered to everyone, and the proposer also receives the fulfilling
//! `mcp/request` (the one whose `correlation_id[0]` is its proposal) and that request's
//! `mcp/response`. Under `all` delivery everyone sees everything anyway and none of this runs.
//! Both lookup tables are bounded: the oldest entries are forgotten first.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How many proposals and fulfilments are remembered.
const REMEMBERED: usize = 4096;

/// A bounded map from an envelope id to the proposer it concerns.
#[derive(Debug, Default)]
pub(super) struct Bounded {
    map: BTreeMap<Box<str>, Arc<str>>,
    order: VecDeque<Box<str>>,
}

impl Bounded {
    pub(super) fn insert(&mut self, id: &str, proposer: Arc<str>) {
        if self.map.contains_key(id) {
            return;
        }
        if self.order.len() == REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.map.remove(&old);
        }
        self.map.insert(id.into(), proposer);
        self.order.push_back(id.into());
    }

    fn get(&self, id: &str) -> Option<&Arc<str>> {
        self.map.get(id)
    }

    /// Entries oldest first (what a snapshot keeps; `insert` in this order restores it).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&str, &Arc<str>)> {
        self.order
            .iter()
            .filter_map(|k| self.map.get(k).map(|v| (&**k, v)))
    }
}

/// What the gateway remembers to keep proposers and reviewers informed.
#[derive(Debug, Default)]
pub(super) struct Workflow {
    /// Proposal id -> proposer.
    pub(super) proposals: Bounded,
    /// Fulfilling request id -> proposer of the proposal it fulfils.
    pub(super) fulfilments: Bounded,
}

/// How an envelope of the proposal workflow is routed in `addressed` mode.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Not part of the workflow: strict routing by `to`.
    Strict,
    /// To everyone (as a broadcast).
    Everyone,
    /// To its `to` and also to this proposer.
    AlsoTo(Arc<str>),
}

impl Workflow {
    /// Records what is needed and decides the route of one accepted envelope.
    pub(super) fn route(
        &mut self,
        kind: &str,
        id: &str,
        sender: &Arc<str>,
        correlation: Option<&str>,
    ) -> Route {
        match kind {
            "mcp/proposal" => {
                self.proposals.insert(id, sender.clone());
                Route::Everyone
            }
            "mcp/withdraw" | "mcp/reject" => Route::Everyone,
            "mcp/request" => match correlation.and_then(|c| self.proposals.get(c)).cloned() {
                Some(proposer) => {
                    self.fulfilments.insert(id, proposer.clone());
                    Route::AlsoTo(proposer)
                }
                None => Route::Strict,
            },
            "mcp/response" => match correlation.and_then(|c| self.fulfilments.get(c)) {
                Some(proposer) => Route::AlsoTo(proposer.clone()),
                None => Route::Strict,
            },
            _ => Route::Strict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_correlation_chain() {
        let mut w = Workflow::default();
        let agent: Arc<str> = Arc::from("agent");
        let human: Arc<str> = Arc::from("human");
        let svc: Arc<str> = Arc::from("service");
        assert_eq!(w.route("mcp/proposal", "p1", &agent, None), Route::Everyone);
        assert_eq!(
            w.route("mcp/request", "f1", &human, Some("p1")),
            Route::AlsoTo(agent.clone())
        );
        assert_eq!(
            w.route("mcp/response", "r1", &svc, Some("f1")),
            Route::AlsoTo(agent.clone())
        );
        assert_eq!(
            w.route("mcp/request", "x", &human, Some("nope")),
            Route::Strict
        );
        assert_eq!(w.route("mcp/response", "y", &svc, Some("x")), Route::Strict);
        assert_eq!(
            w.route("mcp/reject", "j", &svc, Some("p1")),
            Route::Everyone
        );
        assert_eq!(w.route("chat", "c", &svc, None), Route::Strict);
    }

    #[test]
    fn memory_is_bounded() {
        let mut w = Workflow::default();
        let a: Arc<str> = Arc::from("a");
        for i in 0..REMEMBERED + 10 {
            w.route("mcp/proposal", &format!("p{i}"), &a, None);
        }
        assert_eq!(w.proposals.map.len(), REMEMBERED);
        assert_eq!(w.proposals.order.len(), REMEMBERED);
        // The oldest were forgotten, the newest kept.
        assert_eq!(w.route("mcp/request", "f", &a, Some("p0")), Route::Strict);
        assert_eq!(
            w.route(
                "mcp/request",
                "g",
                &a,
                Some(&format!("p{}", REMEMBERED + 9))
            ),
            Route::AlsoTo(a.clone())
        );
    }
}
