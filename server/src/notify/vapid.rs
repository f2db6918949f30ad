//! The server's VAPID key pair (RFC 8292): read from the configured file, or created in the
//! data dir (mode 0600) on first start. The private key never leaves this module's callers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use web_push_native::jwt_simple::algorithms::{ECDSAP256PublicKeyLike, ES256KeyPair};

/// File name of the generated key in the data dir.
pub(crate) const VAPID_KEY_FILE: &str = "vapid.key";

/// The key pair that signs every push request, and its public half as browsers take it.
#[derive(Clone)]
pub(crate) struct Vapid {
    pub(crate) key: Arc<ES256KeyPair>,
    /// Uncompressed P-256 point, base64url without padding (`applicationServerKey`).
    pub(crate) public_key: String,
}

impl std::fmt::Debug for Vapid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vapid")
            .field("public_key", &self.public_key)
            .finish_non_exhaustive()
    }
}

impl Vapid {
    /// Loads the key from `file` (default `<data_dir>/vapid.key`), creating it there when the
    /// default file does not exist yet. A configured file that is missing is an error.
    pub(crate) fn load_or_create(data_dir: &Path, file: Option<&PathBuf>) -> anyhow::Result<Self> {
        let path = file
            .cloned()
            .unwrap_or_else(|| data_dir.join(VAPID_KEY_FILE));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && file.is_none() => {
                let key = ES256KeyPair::generate();
                let text = URL_SAFE_NO_PAD.encode(key.to_bytes());
                crate::util::write_private(&path, &format!("{text}\n"))
                    .with_context(|| format!("write VAPID key {}", path.display()))?;
                text
            }
            Err(e) => return Err(e).with_context(|| format!("read VAPID key {}", path.display())),
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .with_context(|| format!("VAPID key {} is not base64url", path.display()))?;
        let key = ES256KeyPair::from_bytes(&bytes)
            .map_err(|e| anyhow::anyhow!("VAPID key {} is not a P-256 key: {e}", path.display()))?;
        let public_key =
            URL_SAFE_NO_PAD.encode(key.public_key().public_key().to_bytes_uncompressed());
        Ok(Self {
            key: Arc::new(key),
            public_key,
        })
    }
}
