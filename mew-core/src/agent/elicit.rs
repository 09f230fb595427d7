//! An MCP server's question (`elicitation/create`, put to the agent by a bridge because the
//! agent's call caused it) is passed on to the space's people, never answered by the model:
//! the same params go as one `mcp/request` `elicitation/create` to every person present
//! (members the gateway marks `"person": true`), correlated to the question, and the first
//! answer (accept with content, decline, cancel, or an error) goes back as the agent's
//! response. With no person present the question is answered with an error saying a person
//! is needed. The wait is bounded by the question's own timeout ([`WAIT`], the bridge's), and
//! at most [`MAX_RELAYED`] questions are held at once.

use super::Agent;
use crate::participant::{CallId, RequestError, RequestId, RequestOptions, ToolError};
use crate::time::Time;
use serde_json::{Value, json};
use std::time::Duration;

/// The method passed on.
pub(super) const METHOD: &str = "elicitation/create";

/// How long a passed-on question waits for a person: a bridge's question timeout, after
/// which nobody waits for the answer any more.
pub const WAIT: Duration = Duration::from_secs(600);

/// Questions held at once; more are answered with an error.
pub const MAX_RELAYED: usize = 16;

impl Agent {
    /// A forwarded `elicitation/create`: passes it on to the people, or answers why not.
    pub(super) fn relay_elicitation(
        &mut self,
        now: Time,
        call: CallId,
        params: Option<Value>,
        explicit: bool,
    ) {
        // A broadcast question is meant for whoever caused it, not for us.
        if !explicit {
            let _ = self.p.decline_call(call);
            return;
        }
        let Some((asker, about)) = self
            .p
            .call_origin(call)
            .map(|(f, id)| (f.to_owned(), id.to_owned()))
        else {
            return;
        };
        let me = self.me();
        let people: Vec<String> = self
            .p
            .participants()
            .map(|(id, _)| id)
            .filter(|id| *id != me && *id != asker && self.p.is_person(id))
            .map(str::to_owned)
            .collect();
        let refusal = if people.is_empty() {
            Some(format!(
                "{asker}'s question needs a person to answer it, and no person is in the space"
            ))
        } else if self.relayed.len() >= MAX_RELAYED {
            Some(format!(
                "{MAX_RELAYED} questions are already waiting for a person"
            ))
        } else {
            let mut payload = json!({"method": METHOD});
            if let Some(p) = params {
                payload["params"] = p;
            }
            let opts = RequestOptions {
                timeout: Some(WAIT),
                prefer_proposal: false,
            };
            match self.p.mcp_request_about(now, people, payload, &about, opts) {
                Ok(id) => {
                    self.relayed.insert(id, call);
                    None
                }
                Err(e) => Some(format!("could not ask the space's people: {e}")),
            }
        };
        if let Some(reason) = refusal {
            let _ = self
                .p
                .complete_call(now, call, Err(ToolError::internal(reason)));
        }
    }

    /// The people's answer to a passed-on question goes back; `false` when `id` was not one.
    pub(super) fn on_relayed_answer(
        &mut self,
        now: Time,
        id: &RequestId,
        result: &Result<Value, RequestError>,
    ) -> bool {
        let Some(call) = self.relayed.remove(id) else {
            return false;
        };
        let answer = match result {
            Ok(v) => Ok(v.clone()),
            Err(RequestError::Rpc {
                code,
                message,
                data,
            }) => Err(ToolError {
                code: *code,
                message: message.clone(),
                data: data.clone(),
            }),
            Err(e) => Err(ToolError::internal(format!("no person answered: {e}"))),
        };
        // The asker may have gone meanwhile; then nothing is owed.
        let _ = self.p.complete_call(now, call, answer);
        true
    }
}
