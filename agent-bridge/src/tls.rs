//! Which TLS servers `moor` trusts: the public web PKI, plus the certificates of a private CA
//! given with `--ca-file` (e.g. a `moord` serving its own certificate). The choice is made once,
//! at start, for the whole process: the link's WebSocket and every HTTP client use it.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::error::BridgeError;

/// What [`trust_ca_file`] set up: the extra certificates, and the WebSocket connector built
/// from them (checked once, at start).
struct Trust {
    http: Vec<reqwest::Certificate>,
    ws: tokio_tungstenite::Connector,
}

static TRUST: OnceLock<Trust> = OnceLock::new();

/// Trusts the PEM certificates in `path` (as well as the public roots) for every connection
/// this process makes from now on. A missing file, or one without a usable certificate, is an
/// error naming it.
pub fn trust_ca_file(path: &Path) -> Result<(), BridgeError> {
    let bad = |why: String| BridgeError::Config(format!("--ca-file {}: {why}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            "no PEM certificate in it (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut http = Vec::with_capacity(certs.len());
    for cert in certs {
        http.push(
            reqwest::Certificate::from_der(&cert)
                .map_err(|e| bad(format!("unusable certificate: {e}")))?,
        );
        roots
            .add(cert)
            .map_err(|e| bad(format!("unusable certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let ws = tokio_tungstenite::Connector::Rustls(Arc::new(config));
    TRUST
        .set(Trust { http, ws })
        .map_err(|_| bad("a CA file is already trusted".into()))
}

/// A `reqwest` client builder that trusts what this process trusts.
pub fn http_client() -> reqwest::ClientBuilder {
    let mut builder = reqwest::Client::builder();
    for cert in TRUST.get().map(|t| t.http.as_slice()).unwrap_or_default() {
        builder = builder.add_root_certificate(cert.clone());
    }
    builder
}

/// The WebSocket TLS connector: `None` (tokio-tungstenite's default, the public roots) unless a
/// CA file is trusted.
pub(crate) fn ws_connector() -> Option<tokio_tungstenite::Connector> {
    TRUST.get().map(|t| t.ws.clone())
}
