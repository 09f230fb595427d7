//! `GET /metrics`: the gateway's figures in the OpenMetrics text format (which Prometheus
//! reads), encoded by `prometheus-client` from the core's counters at each scrape, plus a
//! histogram of the time the core takes per inbound frame.
//!
//! The histogram samples one frame in [`SAMPLE_EVERY`], so that reading the clock twice
//! stays off most frames of a busy space; counts are exact, only the timing is sampled.

use mew_core::gateway::Gateway;
use mew_core::gateway::stats::{KIND_SLOTS, slot_name};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// One inbound frame in this many is timed.
pub const SAMPLE_EVERY: u64 = 8;

/// The `Content-Type` of the answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Time the core takes per inbound frame, sampled.
#[derive(Debug, Clone)]
pub struct CoreTiming {
    histogram: Histogram,
    seen: u64,
}

impl Default for CoreTiming {
    fn default() -> Self {
        CoreTiming {
            // 1 us to about 16 ms.
            histogram: Histogram::new(exponential_buckets(1e-6, 2.0, 15)),
            seen: 0,
        }
    }
}

impl CoreTiming {
    /// Whether to time this frame.
    pub fn sample(&mut self) -> bool {
        self.seen += 1;
        self.seen.is_multiple_of(SAMPLE_EVERY)
    }

    /// Records one timed frame.
    pub fn observe(&self, seconds: f64) {
        self.histogram.observe(seconds);
    }
}

type Labels = Vec<(&'static str, &'static str)>;

fn counter(n: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(n);
    c
}

fn gauge(n: u64) -> Gauge {
    let g = Gauge::default();
    g.set(i64::try_from(n).unwrap_or(i64::MAX));
    g
}

/// The text of one scrape.
pub fn render(g: &Gateway, audit_dropped: u64, timing: &CoreTiming) -> String {
    let mut reg = Registry::with_prefix("mew");
    let h = g.health();
    let s = g.stats();
    let by_kind = |values: &[u64; KIND_SLOTS]| {
        let f = Family::<Labels, Counter>::default();
        for (i, v) in values.iter().enumerate() {
            if *v > 0 {
                f.get_or_create(&vec![("kind", slot_name(i))]).inc_by(*v);
            }
        }
        f
    };
    reg.register(
        "envelopes_received",
        "Envelopes accepted from participants, by kind",
        by_kind(&s.received),
    );
    reg.register(
        "envelopes_delivered",
        "Frames handed out for accepted envelopes (one per recipient), by kind",
        by_kind(&s.delivered),
    );
    let refused = Family::<Labels, Counter>::default();
    for (reason, n) in &s.refused {
        refused.get_or_create(&vec![("reason", *reason)]).inc_by(*n);
    }
    reg.register(
        "refusals",
        "Envelopes and frames refused, by reason",
        refused,
    );
    reg.register(
        "frames_out",
        "Frames handed to connections, of every sort",
        counter(s.frames_out),
    );
    reg.register(
        "slow_consumer_closes",
        "Connections closed because they did not read (1013)",
        counter(s.slow_consumer_closes),
    );
    reg.register(
        "audit_dropped",
        "Audit records dropped because the log writer fell behind",
        counter(audit_dropped),
    );
    reg.register(
        "connections",
        "Open connections",
        gauge(h.connections as u64),
    );
    reg.register(
        "participants_online",
        "Participants online",
        gauge(h.participants_online as u64),
    );
    reg.register(
        "active_streams",
        "Open streams",
        gauge(h.active_streams as u64),
    );
    reg.register(
        "history_envelopes",
        "Envelopes kept for HTTP polling",
        gauge(h.history_len as u64),
    );
    reg.register(
        "history_bytes",
        "Bytes of the envelopes kept for HTTP polling",
        gauge(h.history_bytes as u64),
    );
    let (frames, bytes) = g.outbound_queued();
    reg.register(
        "outbound_queued_frames",
        "Frames handed to connections and not yet written",
        gauge(frames),
    );
    reg.register(
        "outbound_queued_bytes",
        "Bytes handed to connections and not yet written",
        gauge(bytes),
    );
    reg.register(
        "core_frame_seconds",
        "Time the core takes per inbound frame (one frame in 8 timed)",
        timing.histogram.clone(),
    );
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}
