//! What runs at a simulated node: a participant, or an agent with a scripted model.
//!
//! An agent's model calls never leave the simulation: the script answers each one, and the
//! answer arrives after the node's model latency, as a timer of the node. Everything else
//! the agent does reaches the world as its participant's outputs, so the world treats both
//! kinds alike.

use mew_core::Time;
use mew_core::agent::{AgentEvent, ModelCallId, ModelOutcome, ModelRequest, Output};
use mew_core::participant::{GatewayInputs, Input};
use mew_core::participant::{Output as POutput, Participant};
use mew_core::tools::ToolsAgent;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// Answers an agent's model calls: the request, and how many calls came before it.
pub type ModelScript = Box<dyn FnMut(&ModelRequest, usize) -> ModelOutcome>;

/// An agent and its scripted model.
pub struct AgentNode {
    /// The agent under test (a tools-mode agent is a plain one when it has no tools).
    pub agent: ToolsAgent,
    script: ModelScript,
    /// Every model request, in order.
    pub requests: Vec<ModelRequest>,
    /// Every agent event other than its participant's, in order.
    pub events: Vec<AgentEvent>,
    /// How long the model takes to answer.
    pub latency: Duration,
    pending: BTreeMap<(Time, u64), (ModelCallId, ModelOutcome)>,
    seq: u64,
}

/// A simulated node's state machine.
pub enum Machine {
    /// A participant (SDK layer 2).
    Participant(Box<Participant>),
    /// An agent (SDK layer 3).
    Agent(Box<AgentNode>),
}

impl Machine {
    /// An agent machine.
    pub fn agent(agent: ToolsAgent, script: ModelScript, latency: Duration) -> Machine {
        Machine::Agent(Box::new(AgentNode {
            agent,
            script,
            requests: Vec::new(),
            events: Vec::new(),
            latency,
            pending: BTreeMap::new(),
            seq: 0,
        }))
    }

    /// The participant (an agent's own).
    pub fn p(&self) -> &Participant {
        match self {
            Machine::Participant(p) => p,
            Machine::Agent(a) => a.agent.agent().participant(),
        }
    }

    /// The participant, mutably.
    pub fn p_mut(&mut self) -> &mut Participant {
        match self {
            Machine::Participant(p) => p,
            Machine::Agent(a) => a.agent.agent_mut().participant_mut(),
        }
    }

    /// The agent node, if this is one.
    pub fn agent_node(&self) -> Option<&AgentNode> {
        match self {
            Machine::Agent(a) => Some(a),
            Machine::Participant(_) => None,
        }
    }

    /// The agent node, mutably.
    pub fn agent_node_mut(&mut self) -> Option<&mut AgentNode> {
        match self {
            Machine::Agent(a) => Some(a),
            Machine::Participant(_) => None,
        }
    }

    /// Starts the machine.
    pub fn start(&mut self, now: Time) {
        match self {
            Machine::Participant(p) => p.start(now),
            Machine::Agent(a) => a.agent.start(now),
        }
    }

    /// The socket opened.
    pub fn handle_connected(&mut self, now: Time) {
        match self {
            Machine::Participant(p) => p.handle_input(now, Input::Connected),
            Machine::Agent(a) => a.agent.handle_input(now, Input::Connected),
        }
    }

    /// A frame arrived.
    pub fn handle_frame(&mut self, now: Time, frame: &str) {
        match self {
            Machine::Participant(p) => p.handle_input(now, Input::Frame(frame)),
            Machine::Agent(a) => a.agent.handle_input(now, Input::Frame(frame)),
        }
    }

    /// A pong arrived.
    pub fn handle_pong(&mut self, now: Time) {
        match self {
            Machine::Participant(p) => p.handle_input(now, Input::Pong),
            Machine::Agent(a) => a.agent.handle_input(now, Input::Pong),
        }
    }

    /// The socket closed.
    pub fn handle_disconnected(&mut self, now: Time, reason: &str) {
        match self {
            Machine::Participant(p) => p.handle_input(now, Input::Disconnected { reason }),
            Machine::Agent(a) => a.agent.handle_input(now, Input::Disconnected { reason }),
        }
    }

    /// A timer fired: model answers due are delivered first.
    pub fn handle_timeout(&mut self, now: Time) {
        match self {
            Machine::Participant(p) => p.handle_input(now, Input::Timeout),
            Machine::Agent(a) => {
                while let Some(entry) = a.pending.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let (call, outcome) = entry.remove();
                    // A streamed body reaches the agent an event at a time first, as the
                    // driver hands it over.
                    if let ModelOutcome::Http {
                        status: 200, body, ..
                    } = &outcome
                        && body.starts_with("data:")
                    {
                        for event in body.split_inclusive("\n\n") {
                            a.agent.handle_model_data(now, call, event);
                        }
                    }
                    a.agent.handle_model(now, call, outcome);
                }
                if a.agent.poll_timeout().is_some_and(|t| t <= now) {
                    a.agent.handle_input(now, Input::Timeout);
                }
            }
        }
    }

    /// The next timer.
    pub fn poll_timeout(&self) -> Option<Time> {
        match self {
            Machine::Participant(p) => p.poll_timeout(),
            Machine::Agent(a) => [a.agent.poll_timeout(), a.pending.keys().next().map(|k| k.0)]
                .into_iter()
                .flatten()
                .min(),
        }
    }

    /// The next output for the network (model calls are answered inside).
    pub fn poll_output(&mut self, now: Time) -> Option<POutput> {
        match self {
            Machine::Participant(p) => p.poll_output(),
            Machine::Agent(a) => loop {
                match a.agent.poll_output()? {
                    Output::Gateway(o) => return Some(o),
                    Output::Event(AgentEvent::Participant(e)) => return Some(POutput::Event(e)),
                    Output::Event(e) => a.events.push(e),
                    // No MCP host in a simulation: tools mode is reached through the space.
                    Output::Mcp(_) => {}
                    Output::Model { call, request, .. } => {
                        let outcome = (a.script)(&request, a.requests.len());
                        a.requests.push(request);
                        a.seq += 1;
                        a.pending.insert((now + a.latency, a.seq), (call, outcome));
                    }
                }
            },
        }
    }
}

/// A 200 chat-completions answer whose message says `text`.
pub fn model_text(text: &str) -> ModelOutcome {
    model_message(json!({"role": "assistant", "content": text}))
}

/// A 200 answer asking for tool calls `(id, function name, arguments)`.
pub fn model_tool_calls(calls: &[(&str, &str, Value)]) -> ModelOutcome {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    model_message(json!({"role": "assistant", "content": null, "tool_calls": calls}))
}

/// A 200 answer with this message.
pub fn model_message(message: Value) -> ModelOutcome {
    ModelOutcome::Http {
        status: 200,
        retry_after: None,
        body: json!({
            "id": "chatcmpl-sim", "object": "chat.completion", "model": "sim",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        })
        .to_string(),
    }
}

/// A 200 server-sent-events answer made of these `choices[0].delta` objects.
pub fn model_stream(deltas: &[Value]) -> ModelOutcome {
    let mut body: String = deltas
        .iter()
        .map(|d| {
            let chunk = json!({"object": "chat.completion.chunk",
                               "choices": [{"index": 0, "delta": d, "finish_reason": null}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    body.push_str("data: [DONE]\n\n");
    ModelOutcome::Http {
        status: 200,
        retry_after: None,
        body,
    }
}

/// An HTTP error answer.
pub fn model_status(status: u16, retry_after: Option<Duration>) -> ModelOutcome {
    ModelOutcome::Http {
        status,
        retry_after,
        body: json!({"error": {"message": format!("status {status}")}}).to_string(),
    }
}
