//! One space served by several `mew gateway` nodes, replicated over a NATS JetStream log.
//!
//! This crate is the node's I/O: NATS, the stream, the object store, sockets. What a node
//! publishes for each input, what the entries it reads mean for its sockets, its beats and
//! ticks, and whether it writes the next snapshot are decided by
//! [`mew_core::cluster::Node`].
//!
//! Each node publishes the inputs that arise at it (joins with their token's digest,
//! frames, closes, pongs, HTTP posts, heartbeats, timer ticks) to the space's stream
//! `MEW_<space>_<hash>` (subject `mew.<stream>.log`), reads the stream in order and applies
//! every entry to its replica of the space ([`mew_core::cluster::Replica`]); it carries out
//! only the outputs for the connections it holds. Entries are read as the stream
//! republishes them (`mew.<stream>.live`, one hop sooner than a consumer), with an ordered
//! consumer filling any gap and catching a starting node up (module `feed`). An envelope
//! counts as accepted once its entry is in the stream: an input the stream did not take
//! (NATS unreachable past the publish timeout) is refused to its sender with a
//! `system/error` (`log_unavailable`), an HTTP post with 503.
//!
//! Snapshots: every `snapshot_every` entries the live node with the smallest id writes the
//! replica's state to the object store `mew-snapshots` (object `<space>`) and trims the
//! stream to the entries after it plus `keep_entries`; a node that starts restores the
//! latest snapshot and applies what follows.
//!
//! Audit logs: every node writes the whole space's audit trail to its own log folder (the
//! replicas produce identical records); a node that restarts writes again what it replays
//! after its snapshot.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use mew_core::cluster::{Node, NodeInput, NodeOptions, NodeOutput, Record, Replica, Undo};
use mew_core::gateway::{IdentityVerifier, SpaceConfig};
use mew_core::secret::TokenHash;
use mew_driver_common::Response;
use mew_driver_common::clock;
use mew_driver_common::server::conn::CoreTask;
use mew_driver_common::server::conn::{CoreInput, SocketLink};
use mew_driver_common::server::host::{GatewayHost, Reply};
use mew_driver_common::server::node_inputs::{NodeInputs, Unhandled};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::jetstream;
use feed::{Feed, Read};

mod feed;

/// The host of a cluster node: the node owns the space's gateway.
type Host = GatewayHost<SocketLink, Node>;

/// How a node joins the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The NATS server (`nats://127.0.0.1:4222`).
    pub url: String,
    /// This node's id, unique in the cluster and stable across its restarts.
    pub node_id: String,
    /// How often the node beats into the log.
    pub heartbeat: Duration,
    /// Silence after which the other nodes declare this one gone.
    pub node_timeout: Duration,
    /// Entries between snapshots.
    pub snapshot_every: u64,
    /// Entries kept in the stream before the latest snapshot (for nodes a little behind).
    pub keep_entries: u64,
    /// How long an input may wait for the stream to take it before it is refused.
    pub publish_timeout: Duration,
    /// The most the space's log stream may hold. JetStream reserves this much of its
    /// storage when the stream is made, so it must fit what the NATS server offers.
    pub max_log_bytes: u64,
}

impl ClusterOptions {
    /// Defaults for a node: 1 s heartbeat, 5 s timeout, a snapshot every 10,000 entries.
    pub fn new(url: &str, node_id: &str) -> ClusterOptions {
        ClusterOptions {
            url: url.to_owned(),
            node_id: node_id.to_owned(),
            heartbeat: Duration::from_secs(1),
            node_timeout: Duration::from_secs(5),
            snapshot_every: 10_000,
            keep_entries: 100_000,
            publish_timeout: Duration::from_secs(10),
            max_log_bytes: DEFAULT_MAX_LOG_BYTES,
        }
    }
}

/// The log stream's default bound: 1 GiB, far above what snapshots leave in it.
pub const DEFAULT_MAX_LOG_BYTES: u64 = 1 << 30;

/// Why a node could not join its cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// NATS could not be reached.
    #[error("cannot reach NATS at {url}: {reason}")]
    Connect {
        /// The URL tried.
        url: String,
        /// Why.
        reason: String,
    },
    /// JetStream refused to create or open the space's stream or snapshot store.
    #[error("JetStream: {0}")]
    JetStream(String),
    /// JetStream cannot reserve the log's bound (`--cluster-log-max`).
    #[error(
        "JetStream cannot reserve {asked} bytes for the space's log (its error 10047): lower \
         --cluster-log-max or give nats-server more storage (max_file_store)"
    )]
    Storage {
        /// The bound asked for.
        asked: u64,
    },
    /// The stored snapshot could not be used.
    #[error("the space's snapshot cannot be restored: {0}")]
    Snapshot(String),
    /// A node id that would not make a clean log entry.
    #[error("invalid node id {0:?}: use 1 to 64 of [A-Za-z0-9_-]")]
    NodeId(String),
}

const SNAPSHOT_BUCKET: &str = "mew-snapshots";

/// A node connected to its cluster, its replica restored; [`ClusterNode::core_task`] serves it.
pub struct ClusterNode {
    nats: Nats,
    replica: Replica,
    /// The log's last entry when the node joined: inputs wait until it is applied.
    log_last: u64,
}

/// The node's connection to NATS and its space's stream and store.
struct Nats {
    opts: ClusterOptions,
    client: async_nats::Client,
    js: jetstream::Context,
    stream: jetstream::stream::Stream,
    store: jetstream::object_store::ObjectStore,
    subject: String,
    /// Where the stream republishes each entry it stored.
    live_subject: String,
    space: String,
}

/// The stream's name for a space: JetStream names allow no dots, spaces or wildcards.
fn stream_name(space: &str) -> String {
    let clean: String = space
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // Distinct spaces whose ids clean up alike still get distinct streams.
    let h = &TokenHash::of(space).to_hex()[..8];
    format!("MEW_{clean}_{h}")
}

/// Connects to NATS, opens (or creates) the space's stream and snapshot store, and
/// restores the latest snapshot.
pub async fn connect(
    opts: ClusterOptions,
    config: SpaceConfig,
    verifier: Option<Arc<dyn IdentityVerifier>>,
) -> Result<ClusterNode, ClusterError> {
    let id_ok = !opts.node_id.is_empty()
        && opts.node_id.len() <= 64
        && opts
            .node_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !id_ok {
        return Err(ClusterError::NodeId(opts.node_id));
    }
    let client = async_nats::ConnectOptions::new()
        .name(format!("mew-gateway-{}", opts.node_id))
        .connection_timeout(Duration::from_secs(5))
        .connect(&opts.url)
        .await
        .map_err(|e| ClusterError::Connect {
            url: opts.url.clone(),
            reason: e.to_string(),
        })?;
    let js = jetstream::ContextBuilder::new()
        .timeout(opts.publish_timeout)
        .build(client.clone());
    let name = stream_name(&config.id);
    let subject = format!("mew.{name}.log");
    let js_err = |e: &dyn std::fmt::Display| ClusterError::JetStream(e.to_string());
    let live_subject = format!("mew.{name}.live");
    let config_js = jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        storage: jetstream::stream::StorageType::File,
        // Trimmed after snapshots; this only bounds a cluster whose snapshots stopped.
        max_bytes: i64::try_from(opts.max_log_bytes).unwrap_or(i64::MAX),
        // Each stored entry is republished, with its sequence number, on a plain subject:
        // the nodes' fast path (see `Feed`), one hop shorter than a consumer.
        republish: Some(jetstream::stream::Republish {
            source: subject.clone(),
            destination: live_subject.clone(),
            headers_only: false,
        }),
        ..Default::default()
    };
    js.create_or_update_stream(config_js).await.map_err(|e| {
        let text = e.to_string();
        // JetStream's 10047: the bound asked for is more than the server can reserve.
        if text.contains("10047") || text.contains("insufficient storage") {
            ClusterError::Storage {
                asked: opts.max_log_bytes,
            }
        } else {
            js_err(&e)
        }
    })?;
    let stream = js.get_stream(&name).await.map_err(|e| js_err(&e))?;
    let store = match js.get_object_store(SNAPSHOT_BUCKET).await {
        Ok(s) => s,
        Err(_) => js
            .create_object_store(jetstream::object_store::Config {
                bucket: SNAPSHOT_BUCKET.into(),
                ..Default::default()
            })
            .await
            .map_err(|e| js_err(&e))?,
    };
    let snapshot = match store.get(&name).await {
        Ok(mut obj) => {
            let mut buf = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut obj, &mut buf)
                .await
                .map_err(|e| ClusterError::Snapshot(e.to_string()))?;
            Some(buf)
        }
        Err(_) => None,
    };
    // The same restore path as a single node's files (`mew_driver_common::state::durable`).
    let replica = Replica::open(&opts.node_id, config.clone(), snapshot.as_deref(), verifier)
        .map_err(|e| ClusterError::Snapshot(e.to_string()))?;
    let mut stream = stream;
    let info = stream.info().await.map_err(|e| js_err(&e))?.clone();
    if info.state.messages > 0 && info.state.first_sequence > replica.applied() + 1 {
        return Err(ClusterError::Snapshot(format!(
            "the log starts at entry {} but the latest snapshot ends at {}",
            info.state.first_sequence,
            replica.applied()
        )));
    }
    tracing::info!(
        node = %opts.node_id, stream = %name, snapshot = replica.applied(),
        log_last = info.state.last_sequence, "joined the cluster"
    );
    Ok(ClusterNode {
        nats: Nats {
            opts,
            client,
            js,
            stream,
            store,
            subject,
            live_subject,
            space: name,
        },
        log_last: info.state.last_sequence,
        replica,
    })
}

/// The running node's I/O besides the host.
struct Running {
    nats: Nats,
    inputs: NodeInputs,
    /// Inputs the stream did not take, handed back at the end of the loop's pass (at most
    /// one per input of the pass).
    refused: Vec<(Undo, String)>,
    /// Acknowledgements the stream owes; each yields the failure it reports, if any.
    acks: FuturesUnordered<AckWait>,
    /// The replica cannot go on.
    broken: bool,
}

/// An acknowledgement awaited: `Some` when the stream refused the entry.
type AckWait = Pin<Box<dyn Future<Output = Option<(Undo, String)>> + Send>>;

impl ClusterNode {
    /// The task that owns the space's core on this node (for
    /// [`mew_driver_common::server::GatewayServer::serve_with`]).
    pub fn core_task(self) -> CoreTask {
        Box::new(move |host, rx| Box::pin(run(self, host, rx)))
    }

    /// The replica's last applied entry.
    pub fn applied(&self) -> u64 {
        self.replica.applied()
    }
}

impl Running {
    fn connected(&self) -> bool {
        self.nats.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Puts an entry into the stream; a failure lands in `refused` (at once) or comes out of
    /// `acks` (when the stream's acknowledgement says so).
    async fn publish(&mut self, record: Record, undo: Undo) {
        let payload = Bytes::from(record.encode());
        let publish = self.nats.js.publish(self.nats.subject.clone(), payload);
        let sent = if self.connected() {
            match tokio::time::timeout(self.nats.opts.publish_timeout, publish).await {
                Ok(sent) => sent.map_err(|e| e.to_string()),
                Err(_) => Err("timed out".to_owned()),
            }
        } else {
            // While NATS is unreachable the client's buffers fill and each publish would wait
            // for room, holding up everything this node does (its replica's reads, other
            // connections' refusals) for the whole outage: take what fits now, refuse the rest.
            match futures_util::FutureExt::now_or_never(publish) {
                Some(sent) => sent.map_err(|e| e.to_string()),
                None => Err("NATS is unreachable and its client's buffer is full".to_owned()),
            }
        };
        let why = match sent {
            Ok(ack) => {
                // Awaited by the core task's loop rather than a task per entry: the
                // acknowledgements of a burst complete together.
                let ack = std::future::IntoFuture::into_future(ack);
                self.acks.push(Box::pin(async move {
                    ack.await.err().map(|e| (undo, e.to_string()))
                }));
                return;
            }
            Err(why) => why,
        };
        self.refused.push((undo, why));
    }

    /// Carries out what the node decided.
    async fn outputs(&mut self, host: &mut Host) {
        while let Some(o) = host.core_mut().poll_output() {
            match o {
                NodeOutput::Publish { record, undo } => self.publish(record, undo).await,
                NodeOutput::Connected { local, conn } => {
                    if let Some((link, reply)) = self.inputs.conns.remove(&local) {
                        host.register(conn, link);
                        if reply.reply(conn).is_err() {
                            // Gone while waiting: the space learns it through the log.
                            host.unregister(conn);
                            host.core_mut()
                                .handle_input(clock::now(), NodeInput::Disconnected { conn });
                        }
                    }
                }
                NodeOutput::Abandon { local } => {
                    // Dropping the answer channel ends the connection before it is served.
                    self.inputs.conns.remove(&local);
                }
                NodeOutput::Posted { local, result } => {
                    if let Some(reply) = self.inputs.posts.remove(&local) {
                        let _ = reply.reply(Response::posted(result));
                    }
                }
                NodeOutput::PostRefused { local, message } => {
                    if let Some(reply) = self.inputs.posts.remove(&local) {
                        let _ = reply.reply(Response::error(503, "log_unavailable", &message));
                    }
                }
                NodeOutput::Direct { conn, frame } => host.send_direct(conn, Some(frame), None),
                NodeOutput::Close {
                    conn,
                    code,
                    reason,
                    forget,
                } => {
                    host.send_direct(conn, None, Some((code, reason)));
                    if forget {
                        host.unregister(conn);
                    }
                }
                NodeOutput::Snapshot { applied, bytes } => self.store_snapshot(applied, bytes),
                NodeOutput::NodeGone { node, connections } => {
                    tracing::warn!(%node, connections, "node declared gone");
                }
                NodeOutput::Warning(w) => tracing::warn!("{w}"),
                NodeOutput::Broken(why) => {
                    tracing::error!("{why}");
                    self.broken = true;
                }
            }
        }
    }

    /// Writes a snapshot to the object store, then trims the stream before it.
    fn store_snapshot(&self, applied: u64, snap: Vec<u8>) {
        let store = self.nats.store.clone();
        let stream = self.nats.stream.clone();
        let name = self.nats.space.clone();
        let keep = self.nats.opts.keep_entries;
        tokio::spawn(async move {
            let mut r = &snap[..];
            match store.put(name.as_str(), &mut r).await {
                Ok(_) => {
                    tracing::info!(entry = applied, bytes = snap.len(), "snapshot written");
                    if applied > keep
                        && let Err(e) = stream.purge().sequence(applied - keep).await
                    {
                        tracing::warn!("trimming the log failed: {e}");
                    }
                }
                Err(e) => tracing::warn!("writing the snapshot failed: {e}"),
            }
        });
    }

    /// Hands one input from a connection or the HTTP API to the node.
    fn input(&mut self, host: &mut Host, input: CoreInput) -> bool {
        match self.inputs.feed(host, clock::now(), input) {
            None => {}
            Some(Unhandled::Shutdown) => return false,
            Some(Unhandled::Reconfigure(_)) => {
                // Every node would have to apply it at the same point of the log.
                tracing::warn!(
                    "a cluster node does not reload space.yaml; restart the nodes one by one"
                );
            }
        }
        true
    }

    /// After a batch of entries: the gateway's outputs, slow consumers, the node's own.
    async fn after_batch(&mut self, host: &mut Host) {
        host.drain();
        let now = clock::now();
        for conn in host.take_slow() {
            host.core_mut().handle_input(now, NodeInput::Slow { conn });
        }
        host.core_mut().handle_input(now, NodeInput::Drained);
        self.outputs(host).await;
        host.drain();
    }
}

async fn run(
    node: ClusterNode,
    host: GatewayHost<SocketLink>,
    rx: async_channel::Receiver<CoreInput>,
) {
    let ClusterNode {
        nats,
        replica,
        log_last,
    } = node;
    let start = replica.applied();
    let mut core = Node::new(
        NodeOptions {
            node_id: nats.opts.node_id.clone(),
            heartbeat: nats.opts.heartbeat,
            node_timeout: nats.opts.node_timeout,
            snapshot_every: nats.opts.snapshot_every,
            snapshot_at_rest: false,
        },
        replica,
        log_last,
        mew_driver_common::secret::EntropyPool::source(),
    );
    // The node's gateway takes over the address the server gave the one it built.
    let mut host = host.with_core(|built| {
        if let Some(url) = built.connection_url() {
            core.gateway_mut().set_connection_url(url);
        }
        core
    });
    host.track_backlogs();
    let mut run = Running {
        nats,
        inputs: NodeInputs::default(),
        refused: Vec::new(),
        acks: FuturesUnordered::new(),
        broken: false,
    };
    let mut feed = match Feed::open(
        &run.nats.client,
        run.nats.stream.clone(),
        &run.nats.live_subject,
    )
    .await
    {
        Ok(f) => f,
        Err(e) => {
            tracing::error!("cannot read the space's log: {e}");
            return;
        }
    };
    if let Err(e) = feed.catch_up(start + 1).await {
        tracing::error!("cannot read the space's log: {e}");
        return;
    }
    host.core_mut().handle_input(clock::now(), NodeInput::Start);
    run.outputs(&mut host).await;
    let mut stopping: Option<tokio::time::Instant> = None;
    loop {
        if let Some(at) = stopping
            && (host.conn_ids().is_empty() || tokio::time::Instant::now() >= at)
        {
            break;
        }
        let up = run.connected();
        host.core_mut()
            .handle_input(clock::now(), NodeInput::LogState { up });
        let wake = host.core().poll_timeout();
        let timer = async {
            match wake {
                // Not sooner than 20 ms: a timer due is pushed along by a tick through the log.
                Some(at) => {
                    tokio::time::sleep(clock::until(at).max(Duration::from_millis(20))).await
                }
                None => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        tokio::select! {
            biased;
            r = feed.read(host.core().applied()) => {
                // Entries take effect at the time they carry; `now` only fills the input.
                let now = clock::now();
                let mut ok = true;
                let mut batch = 0;
                let mut next = Some(r);
                while let Some(r) = next.take() {
                    match r {
                        Read::Entry(seq, payload) => {
                            host.core_mut().handle_input(now, NodeInput::Entry { seq, bytes: payload });
                        }
                        Read::Nothing => {}
                        Read::Ended(why) => {
                            tracing::error!("{why}");
                            ok = false;
                        }
                    }
                    while ok && let Some((seq, payload)) = feed.next_buffered(host.core().applied()) {
                        host.core_mut().handle_input(now, NodeInput::Entry { seq, bytes: payload });
                    }
                    run.outputs(&mut host).await;
                    if !ok || run.broken {
                        break;
                    }
                    batch += 1;
                    if batch < 256 {
                        next = feed.read_ready(host.core().applied());
                    }
                }
                if !ok || run.broken {
                    break;
                }
                let applied = host.core().applied();
                feed.settle(applied);
                if feed.gap(applied) {
                    tracing::debug!(applied, "entries missing from the republished log; reading the stream");
                    if let Err(e) = feed.catch_up(applied + 1).await {
                        tracing::warn!("cannot read the space's log: {e}");
                    }
                }
                run.after_batch(&mut host).await;
            }
            Some(f) = run.acks.next(), if !run.acks.is_empty() => {
                if let Some((undo, why)) = f {
                    tracing::warn!("an input could not be put into the space's log: {why}");
                    host.core_mut()
                        .handle_input(clock::now(), NodeInput::Refused { undo, why: &why });
                }
            }
            // Inputs wait until the replica has caught up with the log as it was at start.
            input = rx.recv(), if stopping.is_none() && host.core().ready() => {
                let Ok(input) = input else { break };
                if !run.input(&mut host, input) {
                    // This node stops: its connections close; the space goes on elsewhere.
                    for c in host.conn_ids() {
                        host.send_direct(c, None, Some((1001, "gateway node shutting down".into())));
                    }
                    stopping = Some(tokio::time::Instant::now() + Duration::from_secs(2));
                    continue;
                }
                let mut n = 1;
                while n < 64 {
                    match rx.try_recv() {
                        Ok(i) => {
                            if !run.input(&mut host, i) {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                    n += 1;
                }
            }
            _ = timer => {}
        }
        // Checked after every pass rather than as a branch of the biased select, where a
        // node busy with a stream of entries would never beat and be declared gone.
        host.core_mut()
            .handle_input(clock::now(), NodeInput::Timeout);
        run.outputs(&mut host).await;
        for (undo, why) in std::mem::take(&mut run.refused) {
            tracing::warn!("an input could not be put into the space's log: {why}");
            host.core_mut()
                .handle_input(clock::now(), NodeInput::Refused { undo, why: &why });
        }
        run.outputs(&mut host).await;
        host.drain();
    }
    host.cut_all();
}
