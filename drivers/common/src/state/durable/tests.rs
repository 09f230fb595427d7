//! A simulation of crashes: 200 seeded runs of grants, revocations, invitations and
//! chats through the node and its files, each killed at a random point (before a pass
//! is written, halfway through writing it, after it, halfway through a snapshot). The
//! space always starts again, every acknowledged change is there, and the state is
//! exactly that after the last acknowledged change or after the one that was in
//! flight: never half of one.

use std::fs;

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::journal;
use mew_core::cluster::{Node, NodeInput, NodeOutput, Replica};
use mew_core::gateway::{Fsync, SpaceConfig};

use super::log::LogEvent;
use super::recovery::discard_outputs;
use super::task::{Host, Running};
use super::*;
use crate::server::host::{GatewayHost, Input};
use mew_core::gateway::{Bearer, ConnId};
use mew_core::secret::TokenHash;

const SPACE: &str = r#"
space: {id: durable-sim}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}
"#;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The replicated state, as a snapshot at rest would keep it.
fn state(r: &Restored) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_slice(&r.node.replica().snapshot_at_rest().unwrap()).unwrap();
    // The log's clock and node bookkeeping move with entries that change nothing.
    v["now"] = serde_json::Value::Null;
    v["nodes"] = serde_json::Value::Null;
    v["applied"] = serde_json::Value::Null;
    v
}

/// One pass as the core task makes it; `Err` when the run is killed in it.
fn pass(r: &mut Restored, kill: Option<u8>, rng: &mut Rng) -> Result<(), ()> {
    while let Some(o) = r.node.poll_output() {
        if let NodeOutput::Publish { record, .. } = o {
            let seq = r.node.applied() + 1;
            let bytes = Bytes::from(record.encode());
            r.state.append(seq, &bytes);
            r.node
                .handle_input(record.at, NodeInput::Entry { seq, bytes });
            if r.node.replica().used_entropy() {
                r.node.request_snapshot();
            }
        }
    }
    match kill {
        Some(0) => return Err(()),
        Some(1) => {
            // Part of the pass reached the file.
            let n = rng.below(r.state.pending.len() as u64 + 1) as usize;
            let at = r.state.log_bytes;
            std::os::unix::fs::FileExt::write_all_at(
                r.state.log.as_ref().unwrap(),
                &r.state.pending[..n],
                at,
            )
            .unwrap();
            return Err(());
        }
        _ => {}
    }
    r.state.commit().unwrap();
    discard_outputs(r.node.gateway_mut());
    let at = r.node.replica().now();
    r.node.handle_input(at, NodeInput::Drained);
    while let Some(o) = r.node.poll_output() {
        if let NodeOutput::Snapshot { applied, bytes } = o {
            if kill == Some(2) {
                // Killed while writing the snapshot: a partial temporary file.
                let enc = journal::encode_snapshot(applied, &bytes);
                let n = rng.below(enc.len() as u64) as usize;
                fs::write(r.state.dir.join("snapshot.tmp"), &enc[..n]).unwrap();
                return Err(());
            }
            r.state.write_snapshot(applied, bytes).unwrap();
        }
    }
    Ok(())
}

#[test]
fn two_hundred_crashes_lose_nothing_acknowledged_and_apply_nothing_by_half() {
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    // In memory where there is such a folder: the runs test the logic, not the disk.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let base = tmp.join(format!("mew-durable-sim-{}", std::process::id()));
    for seed in 0..200u64 {
        let dir = base.join(seed.to_string());
        let _ = fs::remove_dir_all(&dir);
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        // Some runs restart more than once before the kill, so that they start from a
        // snapshot and a log.
        let ops = 5 + rng.below(40);
        let kill_at = rng.below(ops);
        let kill_how = rng.below(4) as u8;
        // A killed process loses what was not written, never what was: flushing to the
        // disk (a power loss's concern) is left out to keep 200 runs quick.
        let mut r = open(&dir, config.clone(), Fsync::EveryMs(3_600_000), None).unwrap();
        // Few entries between snapshots, so that runs cross several.
        r.node = {
            let mut o = r.node.options().clone();
            o.snapshot_every = 4 + rng.below(30);
            let replica = Replica::open(LOCAL_NODE, config.clone(), None, None).unwrap();
            Node::new(o, replica, 0, Box::new(mew_core::ids::IdGen::new(7)))
        };
        let mut now = Time::from_unix_millis(1_000_000);
        r.node.handle_input(now, NodeInput::Start);
        let bearer = Bearer::Hashed(TokenHash::of("human-token"));
        r.node.handle_input(now, NodeInput::Connected { bearer });
        pass(&mut r, None, &mut rng).unwrap();
        // The human's connection is the replica's first.
        let conn = first_conn(&r);
        let mut acked = state(&r);
        let mut grants = Vec::new();
        for i in 0..ops {
            now = now + Duration::from_millis(1 + rng.below(500));
            let body = match rng.below(5) {
                0 | 1 => {
                    grants.push(format!("g{i}"));
                    format!(
                        r#""kind":"capability/grant","to":["agent"],"payload":{{"recipient":"agent","capabilities":[{{"kind":"x-{i}"}}]}}"#
                    )
                }
                2 if !grants.is_empty() => {
                    let g = grants.remove(rng.below(grants.len() as u64) as usize);
                    format!(
                        r#""kind":"capability/revoke","to":["agent"],"payload":{{"recipient":"agent","grant_id":"{g}"}}"#
                    )
                }
                3 => format!(
                    r#""kind":"space/invite","payload":{{"participant_id":"guest-{i}","initial_capabilities":[{{"kind":"chat"}}]}}"#
                ),
                _ => format!(r#""kind":"chat","payload":{{"text":"chat {i}"}}"#),
            };
            let frame = format!(r#"{{"protocol":"mew/v0.4","id":"g{i}",{body}}}"#);
            r.node.handle_input(
                now,
                NodeInput::Frame {
                    conn,
                    frame: Bytes::from(frame),
                },
            );
            let kill = (i == kill_at).then_some(kill_how);
            let before = acked.clone();
            match pass(&mut r, kill, &mut rng) {
                Ok(()) => acked = state(&r),
                Err(()) => {
                    // The change in flight, applied whole.
                    discard_outputs(r.node.gateway_mut());
                    let in_flight = state(&r);
                    drop(r);
                    let restored = open(&dir, config.clone(), Fsync::EveryMs(3_600_000), None)
                        .unwrap_or_else(|e| panic!("seed {seed}: did not start: {e}"));
                    let got = state(&restored);
                    assert!(
                        got == before || got == in_flight,
                        "seed {seed} (kill {kill_how} at op {i}): the restored state is neither the acknowledged one nor the one in flight"
                    );
                    if kill_how >= 2 {
                        assert_eq!(got, in_flight, "seed {seed}: a written pass is kept");
                    }
                    break;
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
    }
    let _ = fs::remove_dir_all(&base);
}

fn has(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Frames queued for a connection's writer so far.
fn frames(h: &crate::server::conn::Halves) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(cmd) = h.try_next() {
        if let crate::server::host::WriterCmd::Frames(f) = cmd {
            out.extend(
                f.texts()
                    .iter()
                    .map(|t| String::from_utf8_lossy(t).into_owned()),
            );
        }
    }
    out
}

#[test]
fn a_change_and_all_after_it_wait_for_its_flush_and_chats_leave_at_once() {
    use futures_channel::oneshot;
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let dir = scratch("hold");
    let (mut run, mut host, events) = running(&dir, Fsync::Always);
    let now = Time::from_unix_millis(1_000_000);
    // The thread's reports are taken here, one at a time, as the core task takes them:
    // what waits leaves only once the report that covers it is taken.
    let until = |run: &mut Running, host: &mut Host, done: &dyn Fn(&Running) -> bool| {
        while !done(run) {
            let ev = events.recv_blocking().unwrap();
            run.handle_event(host, now, ev);
        }
    };
    let flushed = |run: &Running| run.durable >= run.state.written();
    let log_has = |id: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !has(&fs::read(dir.join(LOG)).unwrap(), id.as_bytes()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{id} is never written"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    host.core_mut().handle_input(now, NodeInput::Start);
    run.settle(&mut host, now);
    until(&mut run, &mut host, &flushed);
    let join = |run: &mut Running, host: &mut Host, token: &str| {
        let (mut rx, halves) = connect(run, host, now, token);
        assert_eq!(rx.try_recv(), Ok(None), "the id waits for the flush");
        assert!(
            frames(&halves).is_empty(),
            "the welcome waits for the flush"
        );
        until(run, host, &flushed);
        let conn = rx.try_recv().unwrap().expect("answered once flushed");
        assert!(frames(&halves)[0].contains("system/welcome"));
        (conn, halves)
    };
    let (human, _human_rx) = join(&mut run, &mut host, "human-token");
    let (_, agent_rx) = join(&mut run, &mut host, "agent-token");
    frames(&agent_rx);
    let envelope = |id: &str, body: &str| {
        Bytes::from(format!(r#"{{"protocol":"mew/v0.4","id":"{id}",{body}}}"#))
    };
    let chat = r#""kind":"chat","payload":{"text":"hi"}"#;
    let grant = r#""kind":"capability/grant","to":["agent"],"payload":{"recipient":"agent","capabilities":[{"kind":"x-1"}]}"#;
    // A chat leaves at once, and reaches the file within MESSAGE_WRITE.
    run.input(
        &mut host,
        now,
        Input::Frame(human, envelope("first-chat", chat)),
    );
    run.settle(&mut host, now);
    assert!(frames(&agent_rx).iter().any(|f| f.contains("first-chat")));
    log_has("first-chat");
    // A grant waits for the flush, and what follows it waits behind it: a chat, a read.
    run.input(
        &mut host,
        now,
        Input::Frame(human, envelope("held-grant", grant)),
    );
    run.settle(&mut host, now);
    run.input(
        &mut host,
        now,
        Input::Frame(human, envelope("after-grant", chat)),
    );
    run.settle(&mut host, now);
    let (tx, mut read) = oneshot::channel();
    let req = crate::server::host::HttpRequest {
        route: crate::server::route::Route::GetMessages {
            participant: "agent".into(),
            since: None,
        },
        bearer: Some("agent-token".into()),
        body: Bytes::new(),
    };
    run.input(&mut host, now, Input::Http(req, tx));
    run.settle(&mut host, now);
    // Written at once (the flush asked for it), and held until the flush is reported.
    log_has("held-grant");
    assert!(
        frames(&agent_rx).is_empty(),
        "nothing leaves before the flush"
    );
    assert_eq!(read.try_recv().map(|r| r.is_some()), Ok(false));
    until(&mut run, &mut host, &flushed);
    let got = frames(&agent_rx);
    let at = |id: &str| got.iter().position(|f| f.contains(id));
    assert!(at("held-grant").is_some(), "{got:?}");
    assert!(at("held-grant") < at("after-grant"), "in order: {got:?}");
    let resp = read
        .try_recv()
        .unwrap()
        .expect("the read is answered once flushed");
    assert!(has(&resp.body, b"held-grant"));
    // An invitation is followed at once by a snapshot, which holds its entry (never
    // written to a log): its answer goes with nothing after it to carry it.
    let (_, human_rx) = (human, &_human_rx);
    frames(human_rx);
    run.input(
        &mut host,
        now,
        Input::Frame(
            human,
            envelope(
                "inv",
                r#""kind":"space/invite","payload":{"participant_id":"guest","initial_capabilities":[{"kind":"chat"}]}"#,
            ),
        ),
    );
    run.settle(&mut host, now);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (mut acked, mut snapshot) = (false, false);
    while !acked {
        assert!(
            std::time::Instant::now() < deadline,
            "the invitation is never answered"
        );
        match events.try_recv() {
            Ok(ev) => {
                snapshot |= matches!(ev, LogEvent::Snapshot(_));
                run.handle_event(&mut host, now, ev)
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        acked = frames(human_rx)
            .iter()
            .any(|f| f.contains("space/invite-ack"));
    }
    // The log thread wrote the snapshot, and the log holding the token's entry is gone,
    // before the answer left.
    assert!(snapshot, "answered before its snapshot");
    assert!(dir.join(SNAPSHOT).exists());
    assert!(!has(&fs::read(dir.join(LOG)).unwrap(), b"guest"));
    // Killed once a change was written, whatever its flush: the restart has it.
    run.input(
        &mut host,
        now,
        Input::Frame(human, envelope("unflushed-grant", grant)),
    );
    run.settle(&mut host, now);
    log_has("unflushed-grant");
    drop(run);
    let r = open(&dir, config, Fsync::Always, None).unwrap();
    let history = r
        .node
        .gateway()
        .http_messages("agent", Some("agent-token"), None)
        .unwrap();
    assert!(history.iter().any(|b| has(b, b"unflushed-grant")));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn with_every_ms_a_change_waits_for_its_write_only() {
    let dir = scratch("every");
    let (mut run, mut host, events) = running(&dir, Fsync::EveryMs(3_600_000));
    let now = Time::from_unix_millis(1_000_000);
    host.core_mut().handle_input(now, NodeInput::Start);
    run.settle(&mut host, now);
    // The node's start is a change: reported written at once, though an hour's flush
    // period has not passed.
    match events.recv_blocking().unwrap() {
        LogEvent::Written(mark) => assert_eq!(mark, run.state.written()),
        other => panic!("{other:?}"),
    }
    assert!(has(&fs::read(dir.join(LOG)).unwrap(), b"node_up"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_log_thread_writes_behind_the_core_and_a_snapshot_starts_a_new_log_file() {
    use std::os::unix::fs::MetadataExt;
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let dir = scratch("thread");
    let mut rng = Rng(7);
    let mut r = open(&dir, config.clone(), Fsync::Always, None).unwrap();
    let now = Time::from_unix_millis(1_000_000);
    let conn = human_joined(&mut r, now, &mut rng);
    let (tx, events) = async_channel::unbounded();
    r.state.start_syncer(tx).unwrap();
    // A pass as the core task makes it with the thread: entries handed over.
    let chat = |r: &mut Restored, id: &str| {
        r.node.handle_input(
            now,
            NodeInput::Frame {
                conn,
                frame: chat_frame(id),
            },
        );
        while let Some(o) = r.node.poll_output() {
            match o {
                NodeOutput::Publish { record, .. } => {
                    let seq = r.node.applied() + 1;
                    r.state.append_record(seq, &record);
                    let at = record.at;
                    r.node
                        .handle_input(at, NodeInput::OwnRecord { seq, record });
                }
                NodeOutput::Snapshot { applied, bytes } => {
                    r.state.write_snapshot(applied, bytes).unwrap();
                }
                _ => {}
            }
        }
        r.state.write().unwrap();
        discard_outputs(r.node.gateway_mut());
        let at = r.node.replica().now();
        r.node.handle_input(at, NodeInput::Drained);
        while let Some(o) = r.node.poll_output() {
            if let NodeOutput::Snapshot { applied, bytes } = o {
                r.state.write_snapshot(applied, bytes).unwrap();
            }
        }
    };
    let flushed = |r: &Restored| {
        let want = r.state.written();
        r.state.want_flush(want);
        loop {
            if let LogEvent::Synced(mark) = events.recv_blocking().unwrap()
                && mark >= want
            {
                break;
            }
        }
    };
    let path = dir.join(LOG);
    for i in 0..20 {
        chat(&mut r, &format!("before-{i}"));
    }
    flushed(&r);
    let bytes = fs::read(&path).unwrap();
    // The entries, then at most a block of zeros (the direct write's padding).
    let end = r.state.log_bytes as usize;
    assert!(bytes.len() >= end && bytes.len() - end < 4096);
    assert!(bytes[end..].iter().all(|b| *b == 0));
    assert!(has(&bytes, b"before-0") && has(&bytes, b"before-19"));
    // A snapshot puts a new file in the old one's place, which holds only its header: the
    // thread's work, reported as the entries it holds kept.
    let before = fs::metadata(&path).unwrap().ino();
    r.node.request_snapshot();
    chat(&mut r, "in-snapshot");
    let mark = r.state.written();
    loop {
        if let LogEvent::Synced(m) = events.recv_blocking().unwrap()
            && m >= mark
        {
            break;
        }
    }
    assert_ne!(fs::metadata(&path).unwrap().ino(), before, "a new log file");
    assert!(!dir.join(LOG_NEXT).exists());
    assert_eq!(r.state.log_bytes, journal::LOG_HEADER.len() as u64);
    for i in 0..5 {
        chat(&mut r, &format!("after-{i}"));
    }
    // Flushes go to the new file and report its bytes.
    flushed(&r);
    let bytes = fs::read(&path).unwrap();
    assert!(bytes.starts_with(journal::LOG_HEADER));
    assert!(has(&bytes, b"after-4") && !has(&bytes, b"before-19"));
    assert!(!has(&bytes, b"in-snapshot"), "held by the snapshot alone");
    // A snapshot that cannot be written leaves the log in place, and the entries it would
    // have held are written to it after all.
    fs::create_dir(dir.join("snapshot.tmp")).unwrap();
    let ino = fs::metadata(&path).unwrap().ino();
    r.node.request_snapshot();
    chat(&mut r, "no-snapshot");
    flushed(&r);
    assert_eq!(fs::metadata(&path).unwrap().ino(), ino, "the same log file");
    assert!(has(&fs::read(&path).unwrap(), b"no-snapshot"));
    fs::remove_dir(dir.join("snapshot.tmp")).unwrap();
    let kept = state(&r);
    drop(r);
    let restored = open(&dir, config, Fsync::Always, None).unwrap();
    assert_eq!(restored.report.cut, None);
    assert_eq!(
        restored.report.replayed, 6,
        "the entries after the snapshot"
    );
    assert_eq!(state(&restored), kept);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn only_an_input_that_may_mint_a_token_carries_entropy_in_the_log() {
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let dir = scratch("entropy");
    let mut rng = Rng(3);
    let mut r = open(&dir, config.clone(), Fsync::EveryMs(3_600_000), None).unwrap();
    let now = Time::from_unix_millis(1_000_000);
    let conn = human_joined(&mut r, now, &mut rng);
    r.node.handle_input(
        now,
        NodeInput::Frame {
            conn,
            frame: chat_frame("plain-chat"),
        },
    );
    pass(&mut r, None, &mut rng).unwrap();
    let log = fs::read(dir.join(LOG)).unwrap();
    let at = log.windows(10).position(|w| w == b"plain-chat").unwrap();
    let head_start = log[..at].iter().rposition(|b| *b == b'{').unwrap();
    let line_start = log[..head_start].iter().rposition(|b| *b == b'\n').unwrap();
    assert!(
        !has(&log[line_start..at], b"\"e\":"),
        "a chat's record has no entropy"
    );
    // An invitation's does, and the token it minted holds after a restart from the
    // log alone (killed before the snapshot that follows an invitation).
    let invite = r#"{"protocol":"mew/v0.4","id":"inv","kind":"space/invite","payload":{"participant_id":"guest","initial_capabilities":[{"kind":"chat"}]}}"#;
    r.node.handle_input(
        now,
        NodeInput::Frame {
            conn,
            frame: Bytes::from(invite),
        },
    );
    while let Some(o) = r.node.poll_output() {
        if let NodeOutput::Publish { record, .. } = o {
            assert!(record.entropy.is_some(), "an invitation carries entropy");
            let seq = r.node.applied() + 1;
            let bytes = Bytes::from(record.encode());
            r.state.append(seq, &bytes);
            r.node
                .handle_input(record.at, NodeInput::Entry { seq, bytes });
        }
    }
    r.state.write().unwrap();
    discard_outputs(r.node.gateway_mut());
    let before_kill = state(&r);
    drop(r);
    let restored = open(&dir, config, Fsync::EveryMs(3_600_000), None).unwrap();
    assert_eq!(
        state(&restored),
        before_kill,
        "the same token digest after replay"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A state folder of this test run, emptied.
/// Where a test's space goes: the folder itself does not exist yet, as for a new space.
fn scratch(name: &str) -> mew_tests::scratch::Scratch {
    let dir = mew_tests::scratch::Scratch::new("durable", name);
    let _ = fs::remove_dir(&*dir);
    dir
}

/// The core task's state over a new space in `dir`, its log thread started: the
/// thread's reports come on the channel, for the test to hand to [`Running::handle_event`].
fn running(dir: &Path, fsync: Fsync) -> (Running, Host, async_channel::Receiver<LogEvent>) {
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let Restored {
        mut state, node, ..
    } = open(dir, config, fsync, None).unwrap();
    let mut host = GatewayHost::new(node, None, dir.to_owned(), Duration::from_secs(1));
    host.track_backlogs();
    let (tx, events) = async_channel::unbounded();
    state.start_syncer(tx).unwrap();
    (Running::new(state, fsync == Fsync::Always), host, events)
}

/// A connection of `token` asked for, in one pass of the core task: where its id comes
/// (once the pass is kept) and the connection's side.
fn connect(
    run: &mut Running,
    host: &mut Host,
    now: Time,
    token: &str,
) -> (
    futures_channel::oneshot::Receiver<ConnId>,
    crate::server::conn::Halves,
) {
    let (link, halves) = crate::server::conn::link();
    let (tx, rx) = futures_channel::oneshot::channel();
    let input = Input::Connect {
        bearer: Some(token.into()),
        link,
        reply: tx,
    };
    run.input(host, now, input);
    run.settle(host, now);
    (rx, halves)
}

/// The node started and the human connected, in one pass: its connection.
fn human_joined(r: &mut Restored, now: Time, rng: &mut Rng) -> ConnId {
    r.node.handle_input(now, NodeInput::Start);
    let bearer = Bearer::Hashed(TokenHash::of("human-token"));
    r.node.handle_input(now, NodeInput::Connected { bearer });
    pass(r, None, rng).unwrap();
    first_conn(r)
}

fn chat_frame(id: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"protocol":"mew/v0.4","id":"{id}","kind":"chat","payload":{{"text":"hi"}}}}"#
    ))
}

fn first_conn(r: &Restored) -> ConnId {
    let v: serde_json::Value =
        serde_json::from_slice(&r.node.replica().snapshot().unwrap()).unwrap();
    let c = &v["owners"][0][0];
    serde_json::from_value(c.clone()).unwrap()
}

/// A reload changes the space outside the log: the snapshot it asks for is made even when
/// nothing was applied since the last one, or the state on disk would keep the old file's.
#[test]
fn a_snapshot_asked_for_is_made_though_nothing_was_applied_since_the_last() {
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let dir = scratch("asked");
    let mut rng = Rng(5);
    let mut r = open(&dir, config, Fsync::Always, None).unwrap();
    let now = Time::from_unix_millis(1_000_000);
    human_joined(&mut r, now, &mut rng);
    let snapshots = |r: &mut Restored| {
        r.node.request_snapshot();
        let at = r.node.replica().now();
        r.node.handle_input(at, NodeInput::Drained);
        let mut made = Vec::new();
        while let Some(o) = r.node.poll_output() {
            if let NodeOutput::Snapshot { applied, .. } = o {
                made.push(applied);
            }
        }
        made
    };
    let first = snapshots(&mut r);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(snapshots(&mut r), first, "made again at the same entry");
}

/// A reload is applied outside the log: what it sends waits for its snapshot, even when
/// nothing was applied since the last snapshot.
#[test]
fn what_a_reload_sends_waits_for_its_snapshot() {
    let dir = scratch("reload");
    let (mut run, mut host, events) = running(&dir, Fsync::Always);
    let now = Time::from_unix_millis(1_000_000);
    // Takes the thread's reports until `done`; whether one was a snapshot's.
    let until = |run: &mut Running, host: &mut Host, done: &dyn Fn(&Running) -> bool| {
        let mut snapshot = false;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done(run) {
            assert!(std::time::Instant::now() < deadline, "never done");
            match events.try_recv() {
                Ok(ev) => {
                    snapshot |= matches!(ev, LogEvent::Snapshot(_));
                    run.handle_event(host, now, ev);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        snapshot
    };
    let flushed = |run: &Running| run.durable >= run.state.written();
    host.core_mut().handle_input(now, NodeInput::Start);
    run.settle(&mut host, now);
    until(&mut run, &mut host, &flushed);
    let mut join = |token: &str| {
        let (mut rx, halves) = connect(&mut run, &mut host, now, token);
        until(&mut run, &mut host, &|r: &Running| flushed(r));
        rx.try_recv().unwrap().expect("joined");
        halves
    };
    let human = join("human-token");
    let _agent = join("agent-token");
    // A snapshot first, so that the reload's follows it with nothing applied between.
    host.core_mut().request_snapshot();
    run.settle(&mut host, now);
    let handed = run.state.snapshots_handed();
    assert_eq!(handed, 1);
    until(&mut run, &mut host, &|_: &Running| {
        dir.join(SNAPSHOT).exists()
    });
    frames(&human);
    let without_agent = SPACE.replace(
        "  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}\n",
        "",
    );
    assert_ne!(without_agent, SPACE);
    let config = SpaceConfig::from_yaml(&without_agent).unwrap();
    run.input(&mut host, now, Input::Reconfigure(Box::new(config)));
    run.settle(&mut host, now);
    assert_eq!(
        run.state.snapshots_handed(),
        handed + 1,
        "a snapshot of its own"
    );
    assert!(
        frames(&human).is_empty(),
        "nothing of the reload leaves before its snapshot"
    );
    let told = std::cell::RefCell::new(Vec::new());
    let snapshot = until(&mut run, &mut host, &|_: &Running| {
        told.borrow_mut().extend(frames(&human));
        !told.borrow().is_empty()
    });
    assert!(snapshot, "told before its snapshot: {:?}", told.borrow());
    assert!(
        told.borrow().iter().any(|f| f.contains("agent")),
        "{:?}",
        told.borrow()
    );
}
