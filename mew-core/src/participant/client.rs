//! Layer 1: the connection machine (disconnected -> connecting -> connected -> joined ->
//! ready), join, liveness, reconnect with backoff, the not-ready queue and stream frames.

use super::config::{HeartbeatPolicy, NotReadyPolicy, ReconnectPolicy};
use super::error::SendError;
use super::event::{Event, Output};
use crate::backoff::Backoff;
use crate::envelope::{Envelope, Kind, Limits, ParseError};
use crate::ids::IdGen;
use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// Connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// No connection, none scheduled or waiting for a reconnect.
    Disconnected,
    /// The driver is opening the socket.
    Connecting,
    /// Socket open, join not yet sent (transient).
    Connected,
    /// Join sent, waiting for the welcome.
    Joined,
    /// Welcome received.
    Ready,
    /// Shut down for good; no reconnect.
    Closed,
}

/// The `Authorization` header of a connection that presents `token`.
pub fn authorization(token: &str) -> (String, String) {
    ("Authorization".into(), format!("Bearer {token}"))
}

/// Settings of the connection machine.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// Gateway URL.
    pub gateway_url: String,
    /// Space name.
    pub space: String,
    /// Bearer token.
    pub token: String,
    /// Requested id.
    pub participant_id: Option<String>,
    /// Reconnection.
    pub reconnect: ReconnectPolicy,
    /// Liveness.
    pub heartbeat: HeartbeatPolicy,
    /// Sending before ready.
    pub not_ready: NotReadyPolicy,
    /// Inbound frame limits.
    pub limits: Limits,
}

/// What one inbound frame turned out to be.
#[derive(Debug)]
pub enum Inbound {
    /// A valid envelope (boxed: it moves on into [`Event::Message`] unchanged).
    Envelope(Box<Envelope>),
    /// A stream data frame (already surfaced as an event).
    Stream,
    /// Garbage (already surfaced as an event).
    Malformed,
    /// A frame on a connection being given up (a welcome for another participant than
    /// the configured one): nothing more to do with it.
    Dropped,
}

/// The connection machine. Used alone it is a bare MEW client; [`Participant`] owns one.
///
/// | input | what it may queue |
/// |---|---|
/// | [`start`](Self::start) | `Connect` |
/// | [`handle_connected`](Self::handle_connected) | `Transmit` (the join), `Event` (`Connected`) |
/// | [`handle_frame`](Self::handle_frame) | returns what the frame is ([`Inbound`]); `Transmit` (envelopes queued until the welcome), `Event` (`Ready`, `Malformed`, `StreamData`) |
/// | [`handle_pong`](Self::handle_pong) | nothing (liveness) |
/// | [`handle_disconnected`](Self::handle_disconnected), [`handle_refused`](Self::handle_refused) | `Event` (`Disconnected`, then `Reconnecting`, or `Replaced` or `GaveUp`) |
/// | [`handle_timeout`](Self::handle_timeout) | `Connect` (a reconnection due), `Ping`, `Disconnect` (no welcome or no pong in time) |
/// | [`send`](Self::send), [`send_stream_frame`](Self::send_stream_frame) | `Transmit`, or queued until the welcome |
/// | [`close`](Self::close) | `Disconnect` |
///
/// [`Participant`]: super::Participant
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    state: ClientState,
    me: Option<String>,
    ids: IdGen,
    out: VecDeque<Output>,
    queue: VecDeque<Envelope>,
    was_ready: bool,
    attempts: u32,
    reconnect_at: Option<Time>,
    next_ping: Option<Time>,
    /// When the welcome must have come, while connecting.
    welcome_by: Option<Time>,
    last_heard: Time,
}

impl Client {
    /// A disconnected client; `seed` fixes the jitter.
    pub fn new(config: ClientConfig, seed: u64) -> Client {
        let me = config.participant_id.clone();
        Client {
            config,
            state: ClientState::Disconnected,
            me,
            ids: IdGen::new(seed),
            out: VecDeque::new(),
            queue: VecDeque::new(),
            was_ready: false,
            attempts: 0,
            reconnect_at: None,
            next_ping: None,
            welcome_by: None,
            last_heard: Time::ZERO,
        }
    }

    /// Current state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// Our id: the welcome's, else the configured one.
    pub fn participant_id(&self) -> Option<&str> {
        self.me.as_deref()
    }

    /// Whether the welcome has arrived on the current connection.
    pub fn is_ready(&self) -> bool {
        self.state == ClientState::Ready
    }

    /// Envelopes waiting for ready.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Asks the driver to connect.
    pub fn start(&mut self, now: Time) {
        if matches!(self.state, ClientState::Disconnected) {
            self.connect(now);
        }
    }

    fn connect(&mut self, now: Time) {
        self.state = ClientState::Connecting;
        self.reconnect_at = None;
        self.welcome_by = Some(now + self.config.heartbeat.connect_timeout);
        self.last_heard = now;
        self.out.push_back(Output::Connect {
            url: self.config.gateway_url.clone(),
            headers: vec![authorization(&self.config.token)],
        });
    }

    /// Replaces the token for the connection being opened and later ones (a token that
    /// expires is fetched afresh before each connection). The join sent once the socket
    /// opens carries it; the driver puts [`authorization`] of it on the opening request.
    pub fn set_token(&mut self, token: String) {
        self.config.token = token;
    }

    /// The token the next join carries.
    pub fn token(&self) -> &str {
        &self.config.token
    }

    /// The socket opened: send the compatibility join and wait for the welcome.
    pub fn handle_connected(&mut self, now: Time) {
        if self.state != ClientState::Connecting {
            return;
        }
        self.state = ClientState::Connected;
        self.last_heard = now;
        let mut join = serde_json::json!({
            "type": "join",
            "space": self.config.space,
            "token": self.config.token,
        });
        if let Some(id) = &self.me {
            join["participantId"] = serde_json::Value::String(id.clone());
        }
        self.out.push_back(Output::Transmit(join.to_string()));
        self.state = ClientState::Joined;
        self.next_ping = self.config.heartbeat.interval.map(|i| now + i);
        self.out.push_back(Output::Event(Event::Connected));
    }

    /// Any pong (or other sign of life) from the socket.
    pub fn handle_pong(&mut self, now: Time) {
        self.last_heard = now;
    }

    /// Classifies one inbound text frame. Envelopes are returned for the caller to act on;
    /// stream frames and garbage become events here.
    pub fn handle_frame(&mut self, now: Time, frame: &str) -> Inbound {
        if !matches!(self.state, ClientState::Joined | ClientState::Ready) {
            return Inbound::Malformed;
        }
        self.last_heard = now;
        if let Some(rest) = frame.strip_prefix('#')
            && let Some((id, data)) = rest.split_once('#')
        {
            if frame.len() > self.config.limits.max_frame_bytes {
                self.out.push_back(Output::Event(Event::Malformed {
                    error: ParseError::TooLarge {
                        size: frame.len(),
                        max: self.config.limits.max_frame_bytes,
                    },
                }));
                return Inbound::Malformed;
            }
            self.out.push_back(Output::Event(Event::StreamData {
                stream_id: id.to_owned(),
                data: data.to_owned(),
            }));
            return Inbound::Stream;
        }
        match Envelope::parse(frame.as_bytes(), &self.config.limits) {
            Ok(env) => {
                if env.kind == Kind::SystemWelcome && env.from == crate::GATEWAY_ID {
                    self.on_welcome(&env);
                    if self.state == ClientState::Closed {
                        return Inbound::Dropped;
                    }
                }
                Inbound::Envelope(Box::new(env))
            }
            Err(error) => {
                self.out
                    .push_back(Output::Event(Event::Malformed { error }));
                Inbound::Malformed
            }
        }
    }

    fn on_welcome(&mut self, env: &Envelope) {
        let you = env
            .payload
            .as_ref()
            .and_then(|p| p.get("you"))
            .and_then(|y| y.get("id"))
            .and_then(|i| i.as_str());
        // A welcome for someone else (observed under unified delivery) changes nothing.
        if let (Some(me), Some(you)) = (&self.me, you)
            && self.state == ClientState::Ready
            && me != you
        {
            return;
        }
        // Our own welcome naming someone else: the token is another participant's. Acting
        // as it, under the id we were asked to be, would be worse than not joining.
        if self.state != ClientState::Ready
            && let (Some(wanted), Some(you)) = (&self.config.participant_id, you)
            && wanted != you
        {
            let reason = format!(
                "identity_mismatch: the token is participant `{you}`'s, not `{wanted}`'s; not joining as another participant"
            );
            self.out.push_back(Output::Disconnect {
                reason: reason.clone(),
            });
            self.state = ClientState::Closed;
            self.next_ping = None;
            self.welcome_by = None;
            self.reconnect_at = None;
            self.queue.clear();
            self.out
                .push_back(Output::Event(Event::Disconnected { reason }));
            self.out.push_back(Output::Event(Event::GaveUp {
                attempts: self.attempts,
            }));
            return;
        }
        if let Some(you) = you {
            self.me = Some(you.to_owned());
        }
        if self.state == ClientState::Ready {
            return; // an updated welcome (after a grant)
        }
        let reconnected = self.was_ready;
        self.state = ClientState::Ready;
        self.welcome_by = None;
        self.was_ready = true;
        self.attempts = 0;
        self.out.push_back(Output::Event(Event::Ready {
            id: self.me.clone().unwrap_or_default(),
            reconnected,
        }));
        while let Some(mut env) = self.queue.pop_front() {
            if let Some(me) = &self.me {
                env.from.clone_from(me);
            }
            self.out.push_back(Output::Transmit(env.to_json()));
        }
    }

    /// The connection closed or failed to open.
    pub fn handle_disconnected(&mut self, now: Time, reason: &str) {
        if matches!(self.state, ClientState::Disconnected | ClientState::Closed) {
            return;
        }
        self.lost(now, reason);
    }

    /// The connection cannot succeed by trying again (a gateway certificate that does not
    /// verify): reported as disconnected and given up at once, whatever the reconnect policy.
    pub fn handle_refused(&mut self, now: Time, reason: &str) {
        if matches!(self.state, ClientState::Disconnected | ClientState::Closed) {
            return;
        }
        let _ = now;
        self.state = ClientState::Disconnected;
        self.next_ping = None;
        self.welcome_by = None;
        self.reconnect_at = None;
        self.out.push_back(Output::Event(Event::Disconnected {
            reason: reason.to_owned(),
        }));
        self.out.push_back(Output::Event(Event::GaveUp {
            attempts: self.attempts,
        }));
    }

    fn lost(&mut self, now: Time, reason: &str) {
        self.state = ClientState::Disconnected;
        self.next_ping = None;
        self.welcome_by = None;
        self.out.push_back(Output::Event(Event::Disconnected {
            reason: reason.to_owned(),
        }));
        let policy = &self.config.reconnect;
        if !policy.enabled {
            return;
        }
        if reason.contains(crate::REPLACED_REASON) {
            // Another connection holds our identity now: reconnecting would close it, and
            // it would do the same to us, forever.
            self.out.push_back(Output::Event(Event::Replaced {
                reason: reason.to_owned(),
            }));
            self.out.push_back(Output::Event(Event::GaveUp {
                attempts: self.attempts,
            }));
            return;
        }
        if self.attempts >= policy.max_attempts {
            self.out.push_back(Output::Event(Event::GaveUp {
                attempts: self.attempts,
            }));
            return;
        }
        let delay = self.backoff(self.attempts);
        self.attempts += 1;
        let at = now + delay;
        self.reconnect_at = Some(at);
        self.out.push_back(Output::Event(Event::Reconnecting {
            attempt: self.attempts,
            at,
        }));
    }

    /// Delay before attempt `n` (0-based): base * 2^n capped, plus seeded jitter.
    fn backoff(&mut self, n: u32) -> Duration {
        let p = &self.config.reconnect;
        let ids = &mut self.ids;
        Backoff::new(p.base_delay, p.max_delay).delay_with_jitter(n, p.jitter, |b| ids.below(b))
    }

    /// Closes the connection for good (shutdown).
    pub fn close(&mut self, _now: Time, reason: &str) {
        if !matches!(self.state, ClientState::Disconnected | ClientState::Closed) {
            self.out.push_back(Output::Disconnect {
                reason: reason.to_owned(),
            });
        }
        self.state = ClientState::Closed;
        self.reconnect_at = None;
        self.next_ping = None;
        self.welcome_by = None;
        self.queue.clear();
    }

    /// Fires due timers.
    pub fn handle_timeout(&mut self, now: Time) {
        if let Some(by) = self.welcome_by
            && now >= by
            && matches!(
                self.state,
                ClientState::Connecting | ClientState::Connected | ClientState::Joined
            )
        {
            // The socket never opened, or opened and no welcome came: the driver closes the
            // attempt on this Disconnect (waiting a bounded while for it to open and be
            // answered, so that it cannot join after its successor), and the reconnect
            // policy takes over.
            self.out.push_back(Output::Disconnect {
                reason: "connect timeout".into(),
            });
            self.lost(now, "no welcome within the connect timeout");
            return;
        }
        if let Some(at) = self.reconnect_at
            && now >= at
            && self.state == ClientState::Disconnected
        {
            self.connect(now);
        }
        if let (Some(at), Some(interval)) = (self.next_ping, self.config.heartbeat.interval)
            && now >= at
        {
            if now.saturating_since(self.last_heard) >= self.config.heartbeat.idle_timeout {
                self.out.push_back(Output::Disconnect {
                    reason: "heartbeat timeout".into(),
                });
                self.lost(now, "heartbeat timeout");
            } else {
                self.out.push_back(Output::Ping);
                self.next_ping = Some(now + interval);
            }
        }
    }

    /// The earliest time `handle_timeout` has something to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        [self.reconnect_at, self.next_ping, self.welcome_by]
            .into_iter()
            .flatten()
            .min()
    }

    /// Sends an envelope now, or queues it while not ready, per the not-ready policy.
    pub fn send(&mut self, env: Envelope) -> Result<(), SendError> {
        match self.state {
            ClientState::Ready => {
                self.out.push_back(Output::Transmit(env.to_json()));
                Ok(())
            }
            ClientState::Closed => Err(SendError::ShutDown),
            _ => match self.config.not_ready {
                NotReadyPolicy::Refuse => Err(SendError::NotReady),
                NotReadyPolicy::Queue { max } if self.queue.len() >= max => {
                    Err(SendError::QueueFull { max })
                }
                NotReadyPolicy::Queue { .. } => {
                    self.queue.push_back(env);
                    Ok(())
                }
            },
        }
    }

    /// Drops a queued (never transmitted) envelope; whether it was queued.
    pub fn unqueue(&mut self, id: &str) -> bool {
        let before = self.queue.len();
        self.queue.retain(|e| e.id != id);
        self.queue.len() != before
    }

    /// Writes a raw stream data frame; only when ready (streams do not survive a reconnect
    /// unannounced, so nothing is queued).
    pub fn send_stream_frame(&mut self, stream_id: &str, data: &str) -> Result<(), SendError> {
        if self.state != ClientState::Ready {
            return Err(SendError::NotReady);
        }
        let mut f = String::with_capacity(stream_id.len() + data.len() + 2);
        f.push('#');
        f.push_str(stream_id);
        f.push('#');
        f.push_str(data);
        self.out.push_back(Output::Transmit(f));
        Ok(())
    }

    /// Queues an event for the application.
    pub(crate) fn emit(&mut self, e: Event) {
        self.out.push_back(Output::Event(e));
    }

    /// Next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ClientConfig {
        ClientConfig {
            gateway_url: "ws://gw/ws?space=s".into(),
            space: "s".into(),
            token: "t".into(),
            participant_id: Some("me".into()),
            reconnect: ReconnectPolicy {
                jitter: 0.0,
                ..Default::default()
            },
            heartbeat: HeartbeatPolicy::default(),
            not_ready: NotReadyPolicy::Queue { max: 1 },
            limits: Limits::default(),
        }
    }

    fn drain(c: &mut Client) -> Vec<Output> {
        std::iter::from_fn(|| c.poll_output()).collect()
    }

    const WELCOME: &str = r#"{"protocol":"mew/v0.4","id":"w","from":"system:gateway","to":["me"],"kind":"system/welcome","payload":{"you":{"id":"me","capabilities":[]},"participants":[]}}"#;

    #[test]
    fn a_welcome_for_another_participant_is_refused_for_good() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        drain(&mut c);
        // The token was someone else's: the gateway welcomes its owner.
        let other = WELCOME.replace(r#""id":"me""#, r#""id":"boss""#);
        assert!(matches!(
            c.handle_frame(Time::ZERO, &other),
            Inbound::Dropped
        ));
        let out = drain(&mut c);
        assert!(
            matches!(&out[0], Output::Disconnect { reason } if reason.contains("identity_mismatch") && reason.contains("`boss`")),
            "{out:?}"
        );
        assert!(matches!(&out[1], Output::Event(Event::Disconnected { .. })));
        assert!(matches!(&out[2], Output::Event(Event::GaveUp { .. })));
        assert_eq!(c.state(), ClientState::Closed);
        assert_eq!(c.participant_id(), Some("me"));
        assert_eq!(c.poll_timeout(), None, "no reconnection");
        assert!(
            c.send(Envelope::parse(WELCOME.as_bytes(), &Limits::default()).unwrap())
                .is_err()
        );
    }

    #[test]
    fn connects_joins_and_becomes_ready() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        let out = drain(&mut c);
        assert!(matches!(&out[0], Output::Connect { headers, .. } if headers[0].1 == "Bearer t"));
        c.handle_connected(Time::ZERO);
        let out = drain(&mut c);
        let Output::Transmit(join) = &out[0] else {
            panic!("{out:?}")
        };
        let j: serde_json::Value = serde_json::from_str(join).unwrap();
        assert_eq!(j["type"], "join");
        assert_eq!(j["participantId"], "me");
        assert_eq!(c.state(), ClientState::Joined);
        assert!(matches!(
            c.handle_frame(Time::ZERO, WELCOME),
            Inbound::Envelope(_)
        ));
        assert!(c.is_ready());
    }

    #[test]
    fn a_gateway_that_never_welcomes_is_given_up_on_and_retried() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        drain(&mut c);
        // The socket never opens.
        let deadline = c.poll_timeout().unwrap();
        assert_eq!(deadline, Time::ZERO + Duration::from_secs(15));
        c.handle_timeout(deadline);
        let out = drain(&mut c);
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Disconnect { reason } if reason == "connect timeout")),
            "{out:?}"
        );
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Event(Event::Reconnecting { attempt: 1, .. }))),
            "{out:?}"
        );
        assert_eq!(c.state(), ClientState::Disconnected);
        // The next attempt opens, but no welcome comes.
        let at = c.poll_timeout().unwrap();
        c.handle_timeout(at);
        c.handle_connected(at);
        drain(&mut c);
        let by = at + Duration::from_secs(15);
        c.handle_timeout(at + Duration::from_millis(14_999));
        assert_eq!(c.state(), ClientState::Joined);
        c.handle_timeout(by);
        assert_eq!(c.state(), ClientState::Disconnected);
        // A welcome in time clears the deadline.
        let at = c.poll_timeout().unwrap();
        c.handle_timeout(at);
        c.handle_connected(at);
        c.handle_frame(at, WELCOME);
        assert!(c.is_ready());
        c.handle_timeout(at + Duration::from_secs(16));
        assert!(c.is_ready());
    }

    #[test]
    fn backoff_doubles_to_cap_then_gives_up() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        c.handle_frame(Time::ZERO, WELCOME);
        let mut now = Time::ZERO;
        let mut delays = vec![];
        for _ in 0..6 {
            c.handle_disconnected(now, "x");
            match c.poll_timeout() {
                Some(at) if c.state() == ClientState::Disconnected => {
                    delays.push((at - now).as_millis());
                    now = at;
                    c.handle_timeout(now);
                    assert_eq!(c.state(), ClientState::Connecting);
                }
                _ => break,
            }
        }
        assert_eq!(delays, vec![1000, 2000, 4000, 8000, 16000]);
        assert!(
            drain(&mut c)
                .iter()
                .any(|o| matches!(o, Output::Event(Event::GaveUp { attempts: 5 })))
        );
    }

    #[test]
    fn a_connection_replaced_by_another_of_the_same_participant_is_not_reconnected() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        c.handle_frame(Time::ZERO, WELCOME);
        drain(&mut c);
        let reason = format!("closed by gateway (1000): {}", crate::REPLACED_REASON);
        c.handle_disconnected(Time::ZERO, &reason);
        let out = drain(&mut c);
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Event(Event::Replaced { reason: r }) if *r == reason)),
            "{out:?}"
        );
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Event(Event::GaveUp { .. }))),
            "{out:?}"
        );
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Event(Event::Reconnecting { .. }))),
            "{out:?}"
        );
        assert_eq!(c.poll_timeout(), None, "nothing scheduled");
        assert_eq!(c.state(), ClientState::Disconnected);
    }

    #[test]
    fn a_refused_connection_is_given_up_at_once_without_a_reconnect() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        drain(&mut c);
        c.handle_refused(Time::ZERO, "certificate not trusted");
        let out = drain(&mut c);
        assert!(
            matches!(
                &out[..],
                [
                    Output::Event(Event::Disconnected { reason }),
                    Output::Event(Event::GaveUp { attempts: 0 })
                ] if reason == "certificate not trusted"
            ),
            "{out:?}"
        );
        assert_eq!(c.state(), ClientState::Disconnected);
        assert_eq!(c.poll_timeout(), None, "no reconnect scheduled");
        // Late reports change nothing.
        c.handle_disconnected(Time::ZERO, "late");
        assert!(drain(&mut c).is_empty());
    }

    #[test]
    fn jitter_is_seeded_and_bounded() {
        let delays = |seed| {
            let mut c = Client::new(
                ClientConfig {
                    reconnect: ReconnectPolicy::default(),
                    ..cfg()
                },
                seed,
            );
            (0..5).map(|n| c.backoff(n).as_millis()).collect::<Vec<_>>()
        };
        let a = delays(1);
        assert_eq!(a, delays(1));
        assert_ne!(a, delays(2));
        for (n, d) in a.iter().enumerate() {
            let base = 1000u128 << n;
            assert!(*d >= base && *d <= base + base / 5, "attempt {n}: {d}");
        }
    }

    #[test]
    fn queue_is_bounded_and_flushed_on_ready() {
        let mut c = Client::new(cfg(), 1);
        let env = Envelope::parse(
            br#"{"protocol":"mew/v0.4","id":"a","from":"me","kind":"chat"}"#,
            &Limits::default(),
        )
        .unwrap();
        assert!(c.send(env.clone()).is_ok());
        assert_eq!(c.send(env), Err(SendError::QueueFull { max: 1 }));
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        drain(&mut c);
        c.handle_frame(Time::ZERO, WELCOME);
        let out = drain(&mut c);
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Transmit(t) if t.contains(r#""id":"a""#)))
        );
    }

    #[test]
    fn the_welcome_decides_the_id() {
        let mut c = Client::new(
            ClientConfig {
                participant_id: None,
                ..cfg()
            },
            1,
        );
        let env = Envelope::parse(
            br#"{"protocol":"mew/v0.4","id":"a","from":"","kind":"chat"}"#,
            &Limits::default(),
        )
        .unwrap();
        c.send(env).unwrap();
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        let join = drain(&mut c)
            .into_iter()
            .find_map(|o| match o {
                Output::Transmit(t) => Some(t),
                _ => None,
            })
            .unwrap();
        assert!(!join.contains("participantId"));
        c.handle_frame(Time::ZERO, &WELCOME.replace("\"me\"", "\"client-7\""));
        assert_eq!(c.participant_id(), Some("client-7"));
        assert!(
            drain(&mut c)
                .iter()
                .any(|o| matches!(o, Output::Transmit(t) if t.contains(r#""from":"client-7""#)))
        );
    }

    #[test]
    fn silence_closes_the_connection() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        c.handle_frame(Time::ZERO, WELCOME);
        drain(&mut c);
        let mut now = Time::ZERO;
        let mut pings = 0;
        while c.state() == ClientState::Ready {
            now = c.poll_timeout().unwrap();
            c.handle_timeout(now);
            pings += drain(&mut c).iter().filter(|o| **o == Output::Ping).count();
        }
        assert_eq!(pings, 2);
        assert_eq!(now, Time::from_unix_millis(90_000));
    }

    #[test]
    fn pongs_keep_the_connection() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        c.handle_frame(Time::ZERO, WELCOME);
        for _ in 0..10 {
            let now = c.poll_timeout().unwrap();
            c.handle_timeout(now);
            c.handle_pong(now);
        }
        assert!(c.is_ready());
        assert_eq!(c.poll_timeout(), Some(Time::from_unix_millis(330_000)));
    }

    #[test]
    fn stream_frames_are_recognised() {
        let mut c = Client::new(cfg(), 1);
        c.start(Time::ZERO);
        c.handle_connected(Time::ZERO);
        drain(&mut c);
        assert!(matches!(
            c.handle_frame(Time::ZERO, "#s-1#hello#x"),
            Inbound::Stream
        ));
        assert_eq!(
            drain(&mut c),
            vec![Output::Event(Event::StreamData {
                stream_id: "s-1".into(),
                data: "hello#x".into()
            })]
        );
        assert!(matches!(
            c.handle_frame(Time::ZERO, "{nope"),
            Inbound::Malformed
        ));
    }
}
