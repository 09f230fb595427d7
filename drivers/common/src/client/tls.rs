//! TLS for the clients of a gateway (`wss://` URLs): which certificates are trusted, and how
//! a certificate that does not verify is told apart from a network failure.
//!
//! Trusted: the system's roots (`rustls-native-certs`) plus, optionally, a private CA from a
//! PEM file (`--ca-file` / `MEW_CA_FILE`). One configuration per process, used by every
//! client link ([`install`]; without it, the system's roots alone). A certificate that does
//! not verify is not retried: the link reports it to the core as a refusal
//! ([`Input::Refused`](mew_core::participant::Input::Refused)), which gives up
//! at once. Verification can be turned off only by [`ClientTlsOptions::insecure_skip_verify`]
//! (`--insecure-skip-verify`), which the programs announce with a warning on every start.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, TcpConnector,
    Transport, TransportAdapter,
};

/// The environment variable naming a PEM file of extra trusted CA certificates.
pub const CA_FILE_ENV: &str = "MEW_CA_FILE";

/// What a client trusts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTlsOptions {
    /// A PEM file of CA certificates trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (testing only: anyone on the path can read and change the
    /// traffic, tokens included).
    pub insecure_skip_verify: bool,
}

/// The warning printed on every start with [`ClientTlsOptions::insecure_skip_verify`].
pub const INSECURE_WARNING: &str = "warning: --insecure-skip-verify: the gateway's TLS certificate is not verified; anyone on the network path can read and change this connection, tokens included";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls client configuration for `opts`; the error is one line naming the file.
pub fn client_config(opts: &ClientTlsOptions) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    if opts.insecure_skip_verify {
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider(), None)))
            .with_no_client_auth();
        return Ok(Arc::new(config));
    }
    let mut roots = RootCertStore::empty();
    // A system without a certificate store still works with a CA file.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = &opts.ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("CA file {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("CA file {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "CA file {}: no PEM certificate in it",
                path.display()
            ));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("CA file {}: {e}", path.display()))?;
        }
    }
    Ok(Arc::new(
        builder.with_root_certificates(roots).with_no_client_auth(),
    ))
}

static INSTALLED: RwLock<Option<Arc<ClientConfig>>> = RwLock::new(None);

/// Makes `config` the one every client link of this process uses for `wss://`.
pub fn install(config: Arc<ClientConfig>) {
    if let Ok(mut c) = INSTALLED.write() {
        *c = Some(config);
    }
}

/// The configuration installed with [`install`], or the system's roots alone.
pub fn current() -> Result<Arc<ClientConfig>, String> {
    if let Some(c) = INSTALLED.read().ok().and_then(|c| c.clone()) {
        return Ok(c);
    }
    let config = client_config(&ClientTlsOptions::default())?;
    install(config.clone());
    Ok(config)
}

/// The name the gateway's certificate must carry, from the URL's host.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| format!("bad TLS server name {host}: {e}"))
}

/// When `e` (from a TLS handshake) says the gateway's certificate was not accepted, the
/// one-line reason; `None` for anything a retry may cure.
pub fn certificate_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(rustls::Error::InvalidCertificate(c)) = err.downcast_ref::<rustls::Error>() {
            return Some(format!(
                "the gateway's TLS certificate is not trusted ({c:?}); pass its CA with --ca-file or MEW_CA_FILE"
            ));
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            cur = Some(inner);
            continue;
        }
        cur = err.source();
    }
    None
}

/// A configuration that trusts exactly the first certificate of the PEM file `cert`,
/// whatever names it carries: for a space's own tools (`mew space status`), which read the
/// certificate the gateway serves from the space's folder and talk to it on loopback.
pub fn pinned_config(cert: &std::path::Path) -> Result<Arc<ClientConfig>, String> {
    let pinned = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("certificate {}: {e}", cert.display()))?
        .next()
        .ok_or_else(|| format!("certificate {}: no PEM certificate in it", cert.display()))?
        .map_err(|e| format!("certificate {}: {e}", cert.display()))?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider(), Some(pinned))))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A blocking HTTP client (`ureq`) whose `https://` requests trust exactly the first
/// certificate of the PEM file `cert`, whatever names it carries (as [`pinned_config`]);
/// each request gives up after `timeout`. For a space's own tools, which ask its gateway on
/// loopback.
pub fn pinned_agent(cert: &std::path::Path, timeout: Duration) -> Result<ureq::Agent, String> {
    Ok(agent(pinned_config(cert)?, timeout))
}

/// A blocking HTTP client (`ureq`) whose `https://` requests use this rustls configuration
/// (for example [`current`]: the roots and CA file the program was given); each request
/// gives up after `timeout`.
pub fn agent(tls: Arc<ClientConfig>, timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build();
    agent_with(tls, config)
}

/// A blocking HTTP client (`ureq`) with `config` whose `https://` requests use this rustls
/// configuration (for callers that bound each phase of an exchange on their own).
pub fn agent_with(tls: Arc<ClientConfig>, config: ureq::config::Config) -> ureq::Agent {
    let connector = TcpConnector::default().chain(PinnedTls(tls));
    ureq::Agent::with_parts(config, connector, DefaultResolver::default())
}

/// `ureq`'s TLS step with a rustls configuration of ours (its own takes root certificates
/// only, which a certificate signed by a private CA does not chain to on its own).
#[derive(Debug)]
struct PinnedTls(Arc<ClientConfig>);

impl<In: Transport> Connector<In> for PinnedTls {
    type Out = Either<In, PinnedTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        // The name only goes out as SNI: the pinned certificate is trusted whatever it says.
        let host = details.uri.host().unwrap_or("localhost");
        let name = server_name(host).map_err(|_| ureq::Error::Tls("bad TLS server name"))?;
        let mut conn = rustls::ClientConnection::new(self.0.clone(), name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(PinnedTransport {
            buffers,
            stream: rustls::StreamOwned { conn, sock },
        })))
    }
}

/// A connection through [`PinnedTls`].
struct PinnedTransport {
    buffers: LazyBuffers,
    stream: rustls::StreamOwned<rustls::ClientConnection, TransportAdapter>,
}

impl std::fmt::Debug for PinnedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedTransport").finish_non_exhaustive()
    }
}

impl Transport for PinnedTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let n = self.stream.read(input)?;
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

/// Accepts any certificate ([`ClientTlsOptions::insecure_skip_verify`]), or only the one it
/// pins ([`pinned_config`]). Signatures are still checked, so the session is at least with
/// the holder of the presented key.
#[derive(Debug)]
struct AnyCertificate(
    Arc<rustls::crypto::CryptoProvider>,
    Option<CertificateDer<'static>>,
);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.1 {
            Some(pinned) if pinned.as_ref() != end_entity.as_ref() => {
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure,
                ))
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_one_line_naming_it() {
        let missing = ClientTlsOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let e = client_config(&missing).unwrap_err();
        assert!(e.starts_with("CA file /nonexistent/ca.pem"), "{e}");
        assert!(!e.contains('\n'));
        let empty = std::env::temp_dir().join(format!("mew-empty-ca-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(&ClientTlsOptions {
            ca_file: Some(empty.clone()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");
        let _ = std::fs::remove_file(empty);
    }

    #[test]
    fn a_pinned_certificate_is_the_only_one_accepted() {
        let pinned = CertificateDer::from(vec![0x30, 1, 2, 3]);
        let other = CertificateDer::from(vec![0x30, 1, 2, 4]);
        let v = AnyCertificate(provider(), Some(pinned.clone()));
        let name = server_name("localhost").unwrap();
        let now = UnixTime::now();
        assert!(v.verify_server_cert(&pinned, &[], &name, &[], now).is_ok());
        let refused = v
            .verify_server_cert(&other, &[], &name, &[], now)
            .unwrap_err();
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, refused);
        assert!(
            certificate_failure(&io).is_some(),
            "told apart as a certificate failure"
        );
        let missing = pinned_config(std::path::Path::new("/nonexistent/cert.pem")).unwrap_err();
        assert!(
            missing.starts_with("certificate /nonexistent/cert.pem"),
            "{missing}"
        );
    }

    #[test]
    fn certificate_failures_are_told_apart_from_network_errors() {
        let bad = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, bad);
        let why = certificate_failure(&io).expect("a certificate failure");
        assert!(
            why.contains("UnknownIssuer") && why.contains("--ca-file"),
            "{why}"
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(certificate_failure(&refused), None);
    }
}
