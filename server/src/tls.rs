//! HTTPS served by `moord` itself: a certificate chain and its private key (PEM files) become a
//! rustls server configuration (ring provider, HTTP/1.1 over ALPN). Anything wrong with either
//! file fails start-up with a message naming the file and what is wrong with it.
//!
//! Calls nothing in the crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Where the certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// A loaded certificate and key, ready to accept connections.
#[derive(Clone)]
pub struct Acceptor(pub(crate) tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor { .. }")
    }
}

/// The TLS acceptor for `files`.
pub fn acceptor(files: &TlsFiles) -> anyhow::Result<Acceptor> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "TLS key {} does not fit certificate {} (or is not usable)",
                files.key.display(),
                files.cert.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Acceptor(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("read TLS certificate {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("TLS certificate {}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!(
            "TLS certificate {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        );
    }
    Ok(certs)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let bytes = std::fs::read(path).with_context(|| format!("read TLS key {}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "TLS key {}: no usable PEM private key ({e})",
            path.display()
        )
    })
}
