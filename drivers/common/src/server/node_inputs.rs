//! A server's inputs fed to a [`mew_core::cluster::Node`], written once for the two hosts of
//! a node: a durable single node ([`crate::state::durable`]) and a cluster member (`mew-cluster`).
//! Inputs that change the space go into the node's log; connections and posts wait here for
//! their entries to come back; reads are answered from the node's replica at once.

use std::collections::HashMap;

use mew_core::Time;
use mew_core::cluster::{Node, NodeInput};
use mew_core::gateway::{Bearer, SpaceConfig};

use crate::server::conn::{ConnReply, CoreInput, HttpReply, SocketLink};
use crate::server::host::{GatewayHost, HttpRequest, Input, Reply};
use crate::server::route::Route;

/// Connections and posts a node has put into its log and not yet answered.
#[derive(Default)]
pub struct NodeInputs {
    /// Connections waiting for their id (the node's `Connected` output).
    pub conns: HashMap<u64, (SocketLink, ConnReply)>,
    /// HTTP posts waiting for their entry to be applied (`Posted`, `PostRefused`).
    pub posts: HashMap<u64, HttpReply>,
    /// Answers to reads, when the host holds them (`None`: they leave at once). A durable
    /// space whose entries are flushed after the core went on must not show a read what a
    /// power loss could still take.
    pub reads: Option<Vec<(HttpReply, crate::Response)>>,
}

/// An input the node does not take: its host decides what it means.
pub enum Unhandled {
    /// The server stops.
    Shutdown,
    /// A re-read `space.yaml`.
    Reconfigure(Box<SpaceConfig>),
}

impl NodeInputs {
    /// Feeds one input to the node `host` serves (or answers it from the node's replica,
    /// for reads and write reports).
    pub fn feed(
        &mut self,
        host: &mut GatewayHost<SocketLink, Node>,
        now: Time,
        input: CoreInput,
    ) -> Option<Unhandled> {
        match input {
            Input::Connect {
                bearer,
                link,
                reply,
            } => {
                let bearer = Bearer::from(bearer.as_deref());
                let answer = host
                    .core_mut()
                    .handle_input(now, NodeInput::Connected { bearer });
                if let Some(local) = answer.local() {
                    self.conns.insert(local, (link, reply));
                }
            }
            Input::Frame(conn, frame) => {
                if crate::server::hops::enabled() {
                    crate::server::hops::applied(&frame, conn.as_u64());
                }
                host.core_mut()
                    .handle_input(now, NodeInput::Frame { conn, frame });
            }
            Input::Oversize(conn, size) => {
                host.core_mut()
                    .handle_input(now, NodeInput::Oversize { conn, size });
            }
            Input::Pong(conn) => {
                host.core_mut().handle_input(now, NodeInput::Pong { conn });
            }
            Input::Sent(conn, frames, bytes) => host.sent(now, conn, frames, bytes),
            Input::Closed(conn) => {
                if host.unregister(conn) {
                    host.core_mut()
                        .handle_input(now, NodeInput::Disconnected { conn });
                }
            }
            Input::Http(req, reply) => match req.route {
                Route::PostMessages { participant } => {
                    let bearer = Bearer::from(req.bearer.as_deref());
                    let post = NodeInput::Post {
                        participant,
                        bearer,
                        body: req.body,
                    };
                    if let Some(local) = host.core_mut().handle_input(now, post).local() {
                        self.posts.insert(local, reply);
                    }
                }
                route => {
                    // Reads are answered from this node's replica.
                    let req = HttpRequest {
                        route,
                        bearer: req.bearer,
                        body: req.body,
                    };
                    let resp = host.http(now, req);
                    match &mut self.reads {
                        Some(held) => held.push((reply, resp)),
                        None => {
                            let _ = reply.reply(resp);
                        }
                    }
                }
            },
            Input::Shutdown => return Some(Unhandled::Shutdown),
            Input::Reconfigure(config) => return Some(Unhandled::Reconfigure(config)),
        }
        None
    }
}
