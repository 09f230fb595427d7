//! How `mew client`, `mew bridge` and `mew agent` reach a space: the same options and the
//! same environment variables for each (TLS included: `--ca-file` / `MEW_CA_FILE`,
//! `--insecure-skip-verify`).

use std::path::PathBuf;

use mew_core::participant::ParticipantConfig;
use mew_driver_common::client::tls::{self as client_tls, ClientTlsOptions};
use mew_driver_common::exit;

use crate::Failure;

/// Environment variable of the gateway URL.
pub const GATEWAY_ENV: &str = "MEW_GATEWAY";
/// Environment variable of the space id.
pub const SPACE_ENV: &str = "MEW_SPACE";
/// Environment variable of the bearer token (preferred over `--token`: `ps` does not show it).
pub const TOKEN_ENV: &str = "MEW_TOKEN";
/// Environment variable of the participant id.
pub const ID_ENV: &str = "MEW_PARTICIPANT_ID";

/// Gateway, space, token and id, from flags or the environment.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Gateway URL, e.g. ws://127.0.0.1:8080 (`/ws?space=` is added when absent).
    #[arg(long, short, env = GATEWAY_ENV)]
    pub gateway: String,
    /// Space id.
    #[arg(long, short, env = SPACE_ENV)]
    pub space: String,
    /// Bearer token (prefer the environment variable, which `ps` does not show). May begin
    /// with `-`, as a token of another implementation can. Not needed with MEW_TOKEN_FILE.
    #[arg(
        long,
        short,
        env = TOKEN_ENV,
        hide_env_values = true,
        allow_hyphen_values = true,
        required_unless_present = "token_file"
    )]
    pub token: Option<String>,
    /// The environment variable MEW_TOKEN_FILE: a file holding the token, read again before
    /// every (re)connection, for tokens that expire (JWTs an identity provider renews).
    #[arg(long = "token-file", env = mew_driver_common::client::token_file::TOKEN_FILE_ENV, hide = true)]
    pub token_file: Option<std::path::PathBuf>,
    /// Participant id named in the join. A mew-rs gateway checks it against the token; the
    /// reference's gateway takes the id from here, so give it when joining one. A welcome
    /// for another participant (the token is someone else's) stops the program (exit 5).
    #[arg(long, alias = "participant", env = ID_ENV, value_parser = participant_id)]
    pub id: Option<String>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// What a client trusts for `wss://` gateways.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// PEM file of CA certificates trusted for wss:// gateways besides the system's roots.
    #[arg(long, value_name = "FILE", env = client_tls::CA_FILE_ENV)]
    pub ca_file: Option<PathBuf>,
    /// Do not verify the gateway's TLS certificate (testing only: a warning is printed on
    /// every start).
    #[arg(long)]
    pub insecure_skip_verify: bool,
}

impl TlsArgs {
    /// Makes these settings the ones every gateway connection of this process uses; a CA
    /// file that cannot be used is a one-line error.
    pub fn install(&self) -> Result<(), Failure> {
        let opts = ClientTlsOptions {
            ca_file: self.ca_file.clone(),
            insecure_skip_verify: self.insecure_skip_verify,
        };
        if opts.insecure_skip_verify {
            eprintln!("{}", client_tls::INSECURE_WARNING);
        }
        let config =
            client_tls::client_config(&opts).map_err(|e| Failure::new(exit::UNREADABLE, e))?;
        client_tls::install(config);
        Ok(())
    }
}

impl ConnectArgs {
    /// The participant configuration these options describe (other settings at defaults).
    pub fn participant(&self) -> ParticipantConfig {
        ParticipantConfig {
            gateway_url: url_for(&self.gateway, &self.space),
            space: self.space.clone(),
            // With only a token file, the runtime also reads it before every connection
            // (MEW_TOKEN_FILE); this is the first.
            token: self
                .token
                .clone()
                .or_else(|| {
                    let f =
                        mew_driver_common::client::token_file::TokenFile(self.token_file.clone()?);
                    f.read().ok()
                })
                .unwrap_or_default(),
            participant_id: self.id.clone(),
            ..ParticipantConfig::default()
        }
    }
}

/// The WebSocket URL of a space: `/ws?space=` is added to a bare gateway address.
pub fn url_for(gateway: &str, space: &str) -> String {
    if gateway.contains("space=") {
        return gateway.to_owned();
    }
    let base = gateway.trim_end_matches('/');
    let after_scheme = base.split_once("://").map(|(_, r)| r).unwrap_or(base);
    if after_scheme.contains('/') {
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}space={space}")
    } else {
        format!("{base}/ws?space={space}")
    }
}

/// `--id`: the space's id rule ([`mew_core::participant_id`]), before anything connects.
fn participant_id(id: &str) -> Result<String, String> {
    mew_core::participant_id::check(id)
        .map(|()| id.to_owned())
        .map_err(|e| e.to_string())
}

/// What a client says when another connection of the same participant replaced it.
pub(crate) fn replaced_message(reason: &str) -> String {
    format!(
        "{reason}: another connection joined as this participant; not reconnecting (run one process per participant id)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(url_for("ws://h:1", "s"), "ws://h:1/ws?space=s");
        assert_eq!(url_for("ws://h:1/", "s"), "ws://h:1/ws?space=s");
        assert_eq!(url_for("ws://h:1/ws", "s"), "ws://h:1/ws?space=s");
        assert_eq!(url_for("ws://h:1/x", "s"), "ws://h:1/x?space=s");
        assert_eq!(url_for("ws://h:1/x?a=b", "s"), "ws://h:1/x?a=b&space=s");
        assert_eq!(url_for("ws://h:1/ws?space=t", "s"), "ws://h:1/ws?space=t");
    }
}
