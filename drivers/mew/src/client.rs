//! `mew client`.

use std::time::Duration;

use mew_core::Envelope;
use mew_core::participant::{Event, ParticipantConfig, ReconnectPolicy};
use mew_driver_common::exit;
use mew_tokio::{ParticipantRuntime, SendJsonError};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Failure;
use crate::connect::replaced_message;

/// Options of `mew client`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    connect: crate::connect::ConnectArgs,
    /// Print raw JSON envelopes, one per line.
    #[arg(long)]
    json: bool,
    /// Send this envelope (JSON; `kind` required, `id`/`from`/`ts` filled in) and exit.
    #[arg(long)]
    send: Option<String>,
    /// Log filter.
    #[arg(long, default_value = "warn")]
    log_level: String,
}

/// One human-readable line for an envelope.
fn human(env: &Envelope) -> String {
    let to = match &env.to {
        Some(t) if !t.is_empty() => format!(" -> {}", t.join(",")),
        _ => String::new(),
    };
    let body = match (env.kind.as_str(), &env.payload) {
        ("chat", Some(p)) => p
            .get("text")
            .and_then(|t| t.as_str())
            .map(|t| format!("{t:?}"))
            .unwrap_or_else(|| p.to_string()),
        (_, Some(p)) => p.to_string(),
        (_, None) => String::new(),
    };
    let ts = env.ts.as_deref().unwrap_or("-");
    format!("{ts} {}{to} [{}] {body}", env.from, env.kind.as_str())
}

pub async fn run(args: Args) -> Result<(), Failure> {
    let interactive = !args.json
        && args.send.is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::io::IsTerminal::is_terminal(&std::io::stdin());
    // Log lines would draw over the full-screen interface.
    crate::init_logging(if interactive { "off" } else { &args.log_level })?;
    args.connect.tls.install()?;
    let mut config = ParticipantConfig {
        // A one-shot send must not retry forever against a wrong address.
        reconnect: if args.send.is_some() {
            ReconnectPolicy {
                enabled: false,
                ..ReconnectPolicy::default()
            }
        } else {
            ReconnectPolicy::default()
        },
        ..args.connect.participant()
    };
    // The interface shows each participant's tools: list them (when allowed).
    config.discovery.auto = interactive;
    let (rt, mut events, me) = ParticipantRuntime::connect(config, None)
        .await
        .map_err(|e| Failure::new(exit::CONNECT, format!("cannot join: {e}")))?;
    if let Some(json) = &args.send {
        let id = rt.send_json(json).await.map_err(|e| match e {
            // A body that is no envelope is a bad argument; a send refused (by the
            // capabilities the welcome gave, a pause, a reserved kind) is a refusal,
            // as when the gateway refuses it: README's exit 1.
            SendJsonError::Invalid(_) => Failure::new(exit::USAGE, format!("not sent: {e}")),
            _ => Failure::new(exit::RUNTIME, format!("refused: {e}")),
        })?;
        // The gateway answers a refusal with a system/error naming our envelope.
        let verdict = tokio::time::timeout(Duration::from_millis(500), async {
            while let Some(ev) = events.recv().await {
                if let Event::Message(env) = &ev
                    && env.kind.as_str() == "system/error"
                    && env.correlation_id.as_ref().is_some_and(|c| c.contains(&id))
                {
                    return Some(env.payload.clone().unwrap_or_default().to_string());
                }
            }
            None
        })
        .await;
        rt.close().await;
        if let Ok(Some(err)) = verdict {
            return Err(Failure::new(exit::RUNTIME, format!("refused: {err}")));
        }
        say!("{id}");
        return Ok(());
    }
    // On a terminal, the full-screen interface; `--json` and pipes keep the line mode.
    if interactive {
        return crate::tui::run(rt, events, me).await;
    }
    eprintln!(
        "joined {} as {me}; type a line to chat, Ctrl-C to leave",
        args.connect.space
    );
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(Event::Message(env)) => {
                    if args.json {
                        say!("{}", env.to_json());
                    } else {
                        say!("{}", human(&env));
                    }
                }
                Some(Event::Disconnected { reason }) => eprintln!("disconnected: {reason}"),
                Some(Event::Ready { reconnected: true, .. }) => eprintln!("rejoined"),
                Some(Event::Replaced { reason }) => {
                    return Err(Failure::new(exit::CONNECT, replaced_message(&reason)));
                }
                Some(Event::GaveUp { attempts }) => {
                    return Err(Failure::new(exit::CONNECT, format!("connection lost; gave up after {attempts} attempts")));
                }
                Some(_) => {}
                None => return Err(Failure::new(exit::RUNTIME, "the participant stopped")),
            },
            line = stdin.next_line(), if stdin_open => match line {
                Ok(Some(text)) if !text.trim().is_empty() => {
                    match rt.chat(text, Vec::new()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => eprintln!("not sent: {e}"),
                        Err(_) => return Err(Failure::new(exit::RUNTIME, "the participant stopped")),
                    }
                }
                Ok(Some(_)) => {}
                _ => stdin_open = false,
            },
            _ = crate::signal() => {
                rt.close().await;
                return Ok(());
            }
        }
    }
}
