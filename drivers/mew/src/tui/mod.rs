//! The interactive `mew client` (on a terminal): a full-screen interface (ratatui on
//! crossterm) for the humans of a space: messages, participants, an input line, and a review
//! dialog for every proposal of someone else (`y` approve once, `n` reject with a reason,
//! `a` always allow: grant exactly this call then approve, `Esc` later).
//!
//! The screen is a plain struct ([`screen::Screen`]) tested without a terminal; this module
//! only wires it to the participant runtime and the keyboard. Keys are read on a thread of
//! their own; envelopes arriving in a burst are applied together before one redraw, so a
//! busy space never waits on the terminal.

mod chatter;
mod history;
pub mod screen;

use std::time::Duration;

use mew_core::participant::Event;
use mew_driver_common::exit;
use mew_tokio::ParticipantRuntime;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind};
use serde_json::{Value, json};

use crate::Failure;
use crate::client::replaced_message;
use screen::{Action, Screen};

/// Envelopes applied at most per redraw.
const BURST: usize = 512;

/// The members as a welcome would show them (the runtime consumed the welcome itself).
async fn welcome(rt: &ParticipantRuntime, me: &str) -> Value {
    let list = rt
        .with(|p, _| {
            p.participants()
                .map(|(id, caps)| json!({"id": id, "capabilities": caps.to_json()}))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
    let mine = rt
        .with(|p, _| p.capabilities().to_json())
        .await
        .unwrap_or_default();
    json!({"kind": "system/welcome", "payload": {"you": {"id": me, "capabilities": mine}, "participants": list}})
}

/// Runs the interface until Ctrl-C, `/quit` or the connection is given up.
pub async fn run(
    rt: ParticipantRuntime,
    mut events: tokio::sync::mpsc::Receiver<Event>,
    me: String,
) -> Result<(), Failure> {
    let (key_tx, mut keys) = tokio::sync::mpsc::channel(256);
    std::thread::Builder::new()
        .name("mew-keys".into())
        .spawn(move || {
            loop {
                let sent = match event::read() {
                    Ok(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => {
                        key_tx.blocking_send(Some(k))
                    }
                    Ok(TermEvent::Resize(..)) => key_tx.blocking_send(None),
                    Ok(_) => Ok(()),
                    Err(_) => return,
                };
                if sent.is_err() {
                    return;
                }
            }
        })
        .map_err(|e| Failure::new(exit::RUNTIME, format!("cannot read the keyboard: {e}")))?;
    let (note_tx, mut notes) = tokio::sync::mpsc::channel::<String>(256);
    let mut terminal = ratatui::init();
    let mut screen = Screen::new(&me);
    screen.on_envelope(&welcome(&rt, &me).await);
    // What happened before this join, for the reviewer: fetched after every join.
    let (hist_tx, mut hist) = tokio::sync::mpsc::channel(4);
    let (url, token) = rt
        .with(|p, _| (p.config().gateway_url.clone(), p.config().token.clone()))
        .await
        .unwrap_or_default();
    let fetch_history = |since: Option<String>| {
        let (url, token, me, tx) = (url.clone(), token.clone(), me.clone(), hist_tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(history::fetch(url, token, me, since).await).await;
        });
    };
    screen.begin_history();
    fetch_history(None);
    let result = loop {
        if let Err(e) = terminal.draw(|f| screen.render(f)) {
            break Err(Failure::new(exit::RUNTIME, format!("cannot draw: {e}")));
        }
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else {
                    break Err(Failure::new(exit::RUNTIME, "the participant stopped"));
                };
                let mut next = Some(ev);
                let mut n = 0;
                while let Some(ev) = next.take() {
                    match ev {
                        Event::Message(env) => {
                            if let Ok(v) = serde_json::to_value(&*env) {
                                screen.on_envelope(&v);
                            }
                        }
                        Event::Ready { reconnected, .. } => {
                            screen.on_envelope(&welcome(&rt, &me).await);
                            screen.note("joined");
                            if reconnected {
                                // What was missed while away.
                                screen.begin_history();
                                fetch_history(screen.last_seen().map(str::to_owned));
                            }
                        }
                        Event::Discovery { .. } | Event::DiscoverySettled => {
                            let tools = rt
                                .available_tools()
                                .await
                                .unwrap_or_default()
                                .into_iter()
                                .map(|t| (t.participant, t.tool.name))
                                .collect::<Vec<_>>();
                            screen.set_tools(tools);
                        }
                        Event::Disconnected { reason } => {
                            screen.set_status(format!("disconnected: {reason}; reconnecting…"));
                        }
                        Event::Replaced { reason } => {
                            ratatui::restore();
                            return Err(Failure::new(exit::CONNECT, replaced_message(&reason)));
                        }
                        Event::GaveUp { attempts } => {
                            ratatui::restore();
                            return Err(Failure::new(exit::CONNECT, format!("connection lost; gave up after {attempts} attempts")));
                        }
                        _ => {}
                    }
                    n += 1;
                    if n < BURST {
                        next = events.try_recv().ok();
                    }
                }
            }
            key = keys.recv() => {
                let Some(key) = key else { break Ok(()) };
                let Some(key) = key else { continue }; // a resize: just redraw
                let mut quit = false;
                for a in screen.on_key(key) {
                    quit |= perform(&rt, a, &note_tx).await;
                }
                if quit {
                    break Ok(());
                }
            }
            Some(n) = notes.recv() => screen.note(n),
            Some(h) = hist.recv() => screen.on_history(h),
            _ = crate::signal() => break Ok(()),
        }
        // Give a burst of keys or envelopes a moment to arrive before the next frame.
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    ratatui::restore();
    rt.close().await;
    result
}

/// Carries out an action; `true` to quit.
async fn perform(
    rt: &ParticipantRuntime,
    a: Action,
    notes: &tokio::sync::mpsc::Sender<String>,
) -> bool {
    let say = |n: String| {
        let notes = notes.clone();
        async move {
            let _ = notes.send(n).await;
        }
    };
    match a {
        Action::Quit => return true,
        Action::Chat(text) => {
            if let Ok(Err(e)) = rt.chat(text, Vec::new()).await {
                say(format!("not sent: {e}")).await;
            }
        }
        Action::Send(v) => {
            if let Err(e) = rt.send_json(&v.to_string()).await {
                say(format!("not sent: {e}")).await;
            }
        }
        Action::Reject { proposal, reason } => {
            if let Ok(Err(e)) = rt.reject(proposal, reason).await {
                say(format!("not rejected: {e}")).await;
            }
        }
        Action::Approve { proposal } => fulfil(rt, proposal, notes.clone()),
        Action::AlwaysAllow {
            proposal,
            recipient,
            capability,
        } => {
            let granted = rt
                .grant(
                    recipient.clone(),
                    vec![capability.clone()],
                    "always allowed from the review dialog",
                )
                .await;
            match granted {
                Ok(Ok(_)) => say(format!("granted {recipient} {capability}")).await,
                Ok(Err(e)) => say(format!("grant not sent: {e}")).await,
                Err(e) => say(format!("grant not sent: {e}")).await,
            }
            fulfil(rt, proposal, notes.clone());
        }
    }
    false
}

/// Fulfils in the background; the result comes back as a note.
fn fulfil(rt: &ParticipantRuntime, proposal: String, notes: tokio::sync::mpsc::Sender<String>) {
    let rt = rt.clone();
    tokio::spawn(async move {
        let n = match rt.fulfil(proposal).await {
            Ok(v) => {
                let text = v["content"][0]["text"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string());
                format!("result: {text}")
            }
            Err(e) => format!("approval failed: {e}"),
        };
        let _ = notes.send(n).await;
    });
}
