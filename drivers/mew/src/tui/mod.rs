//! The interactive `mew client` (on a terminal): a full-screen interface (ratatui on
//! crossterm) for the humans of a space: messages, participants, an input line, and a review
//! dialog for every proposal of someone else (`y` approve once, `n` reject with a reason,
//! `a` always allow: grant exactly this call then approve, `Esc` later).
//!
//! What the person sees is the core's space view ([`mew_core::view::View`]): members,
//! review queue, folds, background chatter, suggestions and slash commands are decided
//! there. The screen ([`screen::Screen`], tested without a terminal) draws it and turns keys
//! into its commands; this module only wires it to the participant runtime (the view's
//! actions become the runtime's calls), the history fetch and the keyboard. Keys are read on a thread of
//! their own; envelopes arriving in a burst are applied together before one redraw, so a
//! busy space never waits on the terminal.

mod history;
pub mod screen;

use std::time::Duration;

use mew_core::participant::{CallId, Event, ToolError};
use mew_core::view::{Action, FORWARDED};
use mew_driver_common::exit;
use mew_tokio::ParticipantRuntime;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind};

use crate::Failure;
use crate::connect::replaced_message;
use screen::Screen;

/// Events applied at most per redraw.
const BURST: usize = 512;

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
    // A server's questions to the person come to the view instead of being refused.
    let _ = rt
        .with(|p, _| FORWARDED.iter().for_each(|m| p.forward_method(*m)))
        .await;
    let mut terminal = ratatui::init();
    let mut screen = Screen::new(&me);
    // The join `connect` waited for; its welcome is among the events that follow.
    screen.handle_event(&Event::Ready {
        id: me.clone(),
        reconnected: false,
    });
    let result = loop {
        // What the view asks the participant to do.
        let mut quit = false;
        while let Some(a) = screen.poll_action() {
            match a {
                Action::FetchHistory { since } => fetch_history(since),
                a => quit |= perform(&rt, a, &note_tx).await,
            }
        }
        if quit {
            break Ok(());
        }
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
                    match &ev {
                        Event::Discovery { .. } | Event::DiscoverySettled => {
                            let tools = rt.available_tools().await.unwrap_or_default();
                            screen.handle_tools(&tools);
                        }
                        Event::Replaced { reason } => {
                            ratatui::restore();
                            return Err(Failure::new(exit::CONNECT, replaced_message(reason)));
                        }
                        Event::GaveUp { attempts } => {
                            ratatui::restore();
                            return Err(Failure::new(exit::CONNECT, format!("connection lost; gave up after {attempts} attempts")));
                        }
                        _ => screen.handle_event(&ev),
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
                if screen.on_key(key) {
                    break Ok(());
                }
            }
            Some(n) = notes.recv() => screen.note(n),
            Some(h) = hist.recv() => screen.handle_history(h),
            _ = crate::signal() => break Ok(()),
        }
        // Give a burst of keys or envelopes a moment to arrive before the next frame.
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    ratatui::restore();
    rt.close().await;
    result
}

/// Carries out an action of the view; `true` to quit.
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
        Action::Chat { text } => {
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
        Action::Fulfil { proposal } => fulfil(rt, proposal, notes.clone()),
        Action::Grant {
            recipient,
            capabilities,
            reason,
        } => {
            let shown = capabilities
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            match rt.grant(recipient.clone(), capabilities, reason).await {
                Ok(Ok(_)) => say(format!("granted {recipient} {shown}")).await,
                Ok(Err(e)) => say(format!("grant not sent: {e}")).await,
                Err(e) => say(format!("grant not sent: {e}")).await,
            }
        }
        Action::Revoke {
            recipient,
            capabilities,
            reason,
        } => {
            let revoked = rt
                .with(move |p, now| p.revoke(now, &recipient, capabilities, &reason))
                .await;
            if let Ok(Err(e)) = revoked {
                say(format!("revoke not sent: {e}")).await;
            }
        }
        Action::Answer { call, result } => {
            let done = rt
                .with(move |p, now| p.complete_call(now, CallId(call), Ok(result)))
                .await;
            if let Ok(Err(e)) = done {
                say(format!("answer not sent: {e}")).await;
            }
        }
        Action::Refuse {
            call,
            code,
            message,
        } => {
            let error = ToolError {
                code,
                message,
                data: None,
            };
            let _ = rt
                .with(move |p, now| p.complete_call(now, CallId(call), Err(error)))
                .await;
        }
        Action::Ignore { call } => {
            let _ = rt.with(move |p, _| p.decline_call(CallId(call))).await;
        }
        // Carried out by the loop, which owns the history channel.
        Action::FetchHistory { .. } => {}
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
