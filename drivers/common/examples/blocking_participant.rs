//! A participant with no async runtime at all: blocking `std::net` sockets, tungstenite's
//! synchronous WebSocket, and a plain loop over the core's `poll_output` / `poll_timeout`.
//!
//! It joins, says hello, prints every chat addressed to it, and leaves when one says "bye".
//!
//! ```text
//! cargo run -p mew-driver-common --example blocking_participant -- \
//!     ws://127.0.0.1:8080/ws?space=dev dev <token> [greeting]
//! ```

use std::net::TcpStream;
use std::time::Duration;

use mew_core::participant::{Event, Input, Output, Participant, ParticipantConfig};
use mew_driver_common::client::socket::client_request;
use mew_driver_common::clock;
use mew_driver_common::websocket::ws_config;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

/// What the run saw, for whoever started it.
#[derive(Debug, Default)]
pub struct Transcript {
    /// Our id, from the welcome.
    pub me: String,
    /// Chats addressed to us: (from, text).
    pub chats: Vec<(String, String)>,
}

/// Opens the socket the core asked for.
fn open(url: &str, headers: &[(String, String)], max_frame: usize) -> Result<Ws, String> {
    let req = client_request(url, headers)?;
    let host = req.uri().host().unwrap_or("localhost").to_owned();
    let port = req.uri().port_u16().unwrap_or(80);
    let sock = TcpStream::connect((host.trim_matches(['[', ']']), port))
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let _ = sock.set_nodelay(true);
    let (ws, _) = tungstenite::client::client_with_config(req, sock, Some(ws_config(max_frame)))
        .map_err(|e| format!("handshake with {url} failed: {e}"))?;
    Ok(ws)
}

/// Runs the participant until a chat says "bye" (or the core gives up reconnecting).
pub fn run(config: ParticipantConfig, greeting: &str) -> Result<Transcript, String> {
    let max_frame = config.limits.max_frame_bytes;
    let mut p = Participant::new(config, clock::os_seed());
    let mut ws: Option<Ws> = None;
    let mut seen = Transcript::default();
    let mut leaving = false;
    p.start(clock::now());
    loop {
        // 1. Carry out everything the core asked for.
        while let Some(out) = p.poll_output() {
            match out {
                Output::Connect { url, headers } => match open(&url, &headers, max_frame) {
                    Ok(s) => {
                        ws = Some(s);
                        p.handle_input(clock::now(), Input::Connected);
                    }
                    Err(e) => p.handle_input(clock::now(), Input::Disconnected { reason: &e }),
                },
                Output::Transmit(text) => send(&mut ws, Message::text(text)),
                Output::Ping => send(&mut ws, Message::Ping(Default::default())),
                Output::Disconnect { reason } => {
                    if let Some(mut s) = ws.take() {
                        let _ = s.close(Some(tungstenite::protocol::CloseFrame {
                            code: 1000.into(),
                            reason: reason.into(),
                        }));
                        let _ = s.flush();
                    }
                }
                Output::Event(Event::Ready { id, .. }) => {
                    println!("joined as {id}");
                    seen.me = id;
                    p.chat(clock::now(), greeting, vec![])
                        .map_err(|e| format!("cannot greet: {e}"))?;
                }
                Output::Event(Event::ChatReceived { from, text, .. }) => {
                    println!("{from}: {text}");
                    leaving |= text.trim() == "bye";
                    seen.chats.push((from, text));
                }
                Output::Event(Event::GaveUp { attempts }) => {
                    return Err(format!("gave up after {attempts} attempts"));
                }
                Output::Event(_) => {}
            }
        }
        if leaving {
            p.close(clock::now(), "bye");
            leaving = false;
            continue; // carries out the Disconnect above
        }
        if p.state() == mew_core::participant::ClientState::Closed {
            return Ok(seen);
        }
        // 2. Wait for the next frame, but no longer than the core's next timer.
        let wait = p
            .poll_timeout()
            .map(clock::until)
            .unwrap_or(Duration::from_secs(60))
            .max(Duration::from_millis(1));
        match &mut ws {
            None => std::thread::sleep(wait),
            Some(s) => {
                let _ = s.get_mut().set_read_timeout(Some(wait));
                match s.read() {
                    Ok(Message::Text(t)) => p.handle_input(clock::now(), Input::Frame(t.as_str())),
                    Ok(Message::Pong(_)) => p.handle_input(clock::now(), Input::Pong),
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => {
                        ws = None;
                        p.handle_input(
                            clock::now(),
                            Input::Disconnected {
                                reason: &e.to_string(),
                            },
                        );
                    }
                }
            }
        }
        // 3. Fire whatever timers are due (early calls are harmless).
        p.handle_input(clock::now(), Input::Timeout);
    }
}

fn send(ws: &mut Option<Ws>, msg: Message) {
    if let Some(s) = ws
        && s.send(msg).is_err()
    {
        // The read side notices and reports the disconnection.
    }
}

#[allow(dead_code)]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, space, token, rest @ ..] = args.as_slice() else {
        eprintln!("usage: blocking_participant <ws-url> <space> <token> [greeting]");
        std::process::exit(2);
    };
    let config = ParticipantConfig {
        gateway_url: url.clone(),
        space: space.clone(),
        token: token.clone(),
        ..ParticipantConfig::default()
    };
    let greeting = rest
        .first()
        .map_or("hello from a blocking participant", |s| s);
    match run(config, greeting) {
        Ok(t) => println!("left after {} chats", t.chats.len()),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
