//! Streamed replies: the pieces of a stream as they arrive (reasoning shown a paragraph at a
//! time), and telling a server that refuses to stream.

use super::*;
use reply::Delta;

impl Agent {
    /// [`Agent::handle_model_data`]'s work.
    pub(super) fn on_model_data(&mut self, now: Time, call: ModelCallId, piece: &str) {
        let Some(c) = self
            .calls
            .iter_mut()
            .find(|c| c.id == call && c.retry_at.is_none() && c.request.stream)
        else {
            return;
        };
        let Purpose::Step(slot) = c.purpose else {
            return;
        };
        let deltas = c
            .live
            .get_or_insert_with(StreamAssembler::default)
            .push(piece);
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        for d in deltas {
            if let Delta::Reasoning(r) = d {
                task.thinking.push_str(&r);
            }
        }
        // A paragraph at a time: a thought per token would flood the space.
        let cut = match task.thinking.rfind('\n') {
            Some(i) if i >= 200 => Some(i),
            _ if task.thinking.len() >= 2000 => Some(task.thinking.len()),
            _ => None,
        };
        if let Some(cut) = cut {
            let mut cut = cut;
            while !task.thinking.is_char_boundary(cut) {
                cut -= 1;
            }
            let text: String = task.thinking.drain(..cut).collect();
            task.thinking_live = true;
            if !text.trim().is_empty() && self.s.model_reasoning == ModelReasoning::Thoughts {
                self.thought(now, slot, text.trim());
            }
        }
        self.pump(now);
    }
}

/// Whether a streamed request's answer says the server will not stream: a client error
/// that names streaming, or a 501.
pub(super) fn refuses_streaming(outcome: &ModelOutcome) -> bool {
    match outcome {
        ModelOutcome::Http { status: 501, .. } => true,
        ModelOutcome::Http { status, body, .. } if (400..500).contains(status) => {
            *status != 401 && *status != 403 && *status != 429 && {
                let b = body.to_ascii_lowercase();
                b.contains("stream")
            }
        }
        _ => false,
    }
}
