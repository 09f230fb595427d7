//! TLS on the gateway's port: a certificate chain and key from PEM files, served with
//! rustls, and re-read on request (SIGHUP) without touching established connections.
//!
//! Connections that are already up keep the session they negotiated; handshakes after a
//! [`ServerTls::reload`] present the new certificate. A reload that fails (a file missing,
//! a key that does not match the certificate) keeps the certificate in use and says why.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The first byte of a TLS handshake record: what a TLS client sends first. Anything else
/// on a TLS port is a plain-text client (an `http://` or `ws://` URL) and is told so.
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// The answer to a plain-text request on a TLS port, sent in plain text so the client
/// shows it.
pub fn plain_text_refusal() -> Vec<u8> {
    crate::Response::error(
        400,
        "tls_required",
        "this port speaks TLS: use an https:// or wss:// URL",
    )
    .to_bytes()
}

/// Where the certificate chain and its private key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file with the certificate, then any intermediates.
    pub cert: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{path}: {message}")]
    File {
        /// Which file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The key does not fit the certificate, or rustls refused the configuration.
    #[error("{0}")]
    Config(String),
}

/// A server's TLS settings: one rustls configuration whose certificate can be replaced.
pub struct ServerTls {
    config: Arc<ServerConfig>,
    resolver: Arc<Reloading>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.resolver.files)
            .finish()
    }
}

#[derive(Debug)]
struct Reloading {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, message: impl fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

/// Reads and checks a certificate chain and its key.
fn load(files: &TlsFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| file_error(&files.cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(&files.cert, e))?;
    if certs.is_empty() {
        return Err(file_error(&files.cert, "no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error(&files.key, e))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| file_error(&files.key, e))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(|e| {
        TlsError::Config(format!(
            "{} does not match {}: {e}",
            files.key.display(),
            files.cert.display()
        ))
    })?;
    Ok(Arc::new(certified))
}

impl ServerTls {
    /// Reads the files and builds the server configuration (HTTP/1.1 only, as the gateway
    /// speaks).
    pub fn load(files: TlsFiles) -> Result<ServerTls, TlsError> {
        let current = load(&files)?;
        let resolver = Arc::new(Reloading {
            files,
            current: RwLock::new(current),
        });
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
            resolver,
        })
    }

    /// The configuration every handshake uses.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The files it reads.
    pub fn files(&self) -> &TlsFiles {
        &self.resolver.files
    }

    /// Reads the files again: later handshakes present what they hold now. On an error the
    /// certificate in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = load(&self.resolver.files)?;
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }
}
