//! Signing keys and JWT access tokens: HS256 only (the algorithm is pinned, never taken from
//! the token), `exp`, `nbf`, `iss` and `aud` always checked, no leeway (this server both issues
//! and checks them). Keys carry an id (`kid`) so they can be rotated: new tokens are signed with
//! the current key, older keys keep verifying until they are retired.
//!
//! Calls only `util`; no HTTP, no store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The claims of an access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user.
    pub sub: String,
    /// The refresh-token family (login or device) it was issued to.
    pub fam: String,
    /// Issuer.
    pub iss: String,
    /// Audience.
    pub aud: String,
    /// Issued at (s).
    pub iat: u64,
    /// Not before (s).
    pub nbf: u64,
    /// Expires (s).
    pub exp: u64,
    /// The machine a host credential is limited to (`moor host`; see `access::host`); absent
    /// on every other access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mch: Option<String>,
}

/// Why a token was refused (for tests and debug logs; clients only ever see 401).
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    /// Not a well-formed JWT, or an algorithm other than HS256.
    #[error("malformed token or wrong algorithm")]
    Malformed,
    /// Signed with a key this server does not have.
    #[error("unknown signing key")]
    UnknownKey,
    /// Signature, time or audience/issuer check failed.
    #[error("token rejected: {0:?}")]
    Rejected(jsonwebtoken::errors::ErrorKind),
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    current: String,
    keys: BTreeMap<String, String>,
}

/// HMAC signing keys by id; one is current.
#[derive(Clone)]
pub struct Keys {
    current: String,
    keys: BTreeMap<String, Vec<u8>>,
}

moor_protocol::debug_fields!(Keys { current });

/// The key file inside a data directory.
pub fn key_path(data_dir: &Path) -> PathBuf {
    data_dir.join("jwt-keys.json")
}

fn fresh_key() -> (String, Vec<u8>) {
    let mut secret = vec![0u8; 32];
    rand::thread_rng().fill_bytes(&mut secret);
    let mut id = [0u8; 6];
    rand::thread_rng().fill_bytes(&mut id);
    (id.iter().map(|b| format!("{b:02x}")).collect(), secret)
}

impl Keys {
    /// A single random key held only in memory (tokens die with the process).
    pub fn ephemeral() -> Self {
        let (kid, secret) = fresh_key();
        Self {
            current: kid.clone(),
            keys: BTreeMap::from([(kid, secret)]),
        }
    }

    /// Loads the key file, creating it (mode 0600) with one fresh key when missing.
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<Self> {
        let path = key_path(data_dir);
        match std::fs::read(&path) {
            Ok(bytes) => Self::parse(&bytes).with_context(|| format!("parse {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let keys = Self::ephemeral();
                keys.save(&path)?;
                Ok(keys)
            }
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }

    /// Adds a fresh key and makes it current; older keys keep verifying. Returns its id.
    pub fn rotate(data_dir: &Path) -> anyhow::Result<String> {
        let mut keys = Self::load_or_create(data_dir)?;
        let (kid, secret) = fresh_key();
        keys.keys.insert(kid.clone(), secret);
        keys.current = kid.clone();
        keys.save(&key_path(data_dir))?;
        Ok(kid)
    }

    /// Removes every key but the current one: tokens signed with them stop verifying.
    pub fn retire_old(data_dir: &Path) -> anyhow::Result<usize> {
        let mut keys = Self::load_or_create(data_dir)?;
        let before = keys.keys.len();
        let current = keys.current.clone();
        keys.keys.retain(|k, _| *k == current);
        keys.save(&key_path(data_dir))?;
        Ok(before - keys.keys.len())
    }

    fn parse(bytes: &[u8]) -> anyhow::Result<Self> {
        let file: KeyFile = serde_json::from_slice(bytes).context("decode key file")?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let keys = file
            .keys
            .into_iter()
            .map(|(kid, s)| Ok((kid, b64.decode(s).context("decode key")?)))
            .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
        anyhow::ensure!(keys.contains_key(&file.current), "current key is missing");
        anyhow::ensure!(
            keys.values().all(|k| k.len() >= 32),
            "keys must be at least 32 bytes"
        );
        Ok(Self {
            current: file.current,
            keys,
        })
    }

    fn save(&self, path: &Path) -> anyhow::Result<()> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let file = KeyFile {
            current: self.current.clone(),
            keys: self
                .keys
                .iter()
                .map(|(k, v)| (k.clone(), b64.encode(v)))
                .collect(),
        };
        let tmp = path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        crate::util::write_private(&tmp, &serde_json::to_string_pretty(&file)?)
            .with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("replace {}", path.display()))
    }

    /// Signs `claims` (an access token's, or another audience's) with the current key.
    pub fn sign<C: Serialize>(&self, claims: &C) -> anyhow::Result<String> {
        let secret = self
            .keys
            .get(&self.current)
            .context("current key is missing")?;
        let header = Header {
            alg: Algorithm::HS256,
            kid: Some(self.current.clone()),
            ..Header::default()
        };
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret))
            .context("sign token")
    }

    /// Verifies a token: HS256 with a known key id, signature, `exp`, `nbf`, `iss`, `aud`, and
    /// that its claims decode as `C` (so a token of one audience never passes for another's).
    pub fn verify<C: DeserializeOwned>(
        &self,
        token: &str,
        issuer: &str,
        audience: &str,
    ) -> Result<C, JwtError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| JwtError::Malformed)?;
        if header.alg != Algorithm::HS256 {
            return Err(JwtError::Malformed);
        }
        let secret = header
            .kid
            .as_deref()
            .and_then(|kid| self.keys.get(kid))
            .ok_or(JwtError::UnknownKey)?;
        let mut v = Validation::new(Algorithm::HS256);
        v.leeway = 0;
        v.validate_exp = true;
        v.validate_nbf = true;
        v.set_issuer(&[issuer]);
        v.set_audience(&[audience]);
        v.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        jsonwebtoken::decode::<C>(token, &DecodingKey::from_secret(secret), &v)
            .map(|d| d.claims)
            .map_err(|e| JwtError::Rejected(e.into_kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISS: &str = "https://moor.example";
    const AUD: &str = "moor";

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn claims() -> Claims {
        let t = now();
        Claims {
            sub: "ann".into(),
            fam: "f1".into(),
            iss: ISS.into(),
            aud: AUD.into(),
            iat: t,
            nbf: t,
            exp: t + 60,
            mch: None,
        }
    }

    /// Why `keys` refuse `token` (a test failure if they accept it).
    fn rejection(keys: &Keys, token: &str) -> JwtError {
        keys.verify::<Claims>(token, ISS, AUD)
            .expect_err("token accepted")
    }

    fn b64(s: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn a_token_signed_with_the_current_key_verifies() {
        let keys = Keys::ephemeral();
        let t = keys.sign(&claims()).unwrap();
        assert_eq!(keys.verify::<Claims>(&t, ISS, AUD).unwrap(), claims());
    }

    #[test]
    fn alg_none_is_rejected() {
        let keys = Keys::ephemeral();
        let header = format!(r#"{{"alg":"none","typ":"JWT","kid":"{}"}}"#, keys.current);
        let body = serde_json::to_vec(&claims()).unwrap();
        let t = format!("{}.{}.", b64(header.as_bytes()), b64(&body));
        assert!(keys.verify::<Claims>(&t, ISS, AUD).is_err());
    }

    #[test]
    fn another_algorithm_is_rejected_even_with_the_right_secret() {
        let keys = Keys::ephemeral();
        let secret = keys.keys[&keys.current].clone();
        let header = Header {
            alg: Algorithm::HS512,
            kid: Some(keys.current.clone()),
            ..Header::default()
        };
        let t =
            jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(&secret)).unwrap();
        assert!(matches!(rejection(&keys, &t), JwtError::Malformed));
    }

    #[test]
    fn a_wrong_key_is_rejected() {
        let keys = Keys::ephemeral();
        let mut other = Keys::ephemeral();
        // Same key id, other secret: the signature check must fail.
        let secret = other.keys.remove(&other.current).unwrap();
        other.current = keys.current.clone();
        other.keys.insert(keys.current.clone(), secret);
        let t = other.sign(&claims()).unwrap();
        assert!(matches!(rejection(&keys, &t), JwtError::Rejected(_)));
        // An unknown key id.
        let t = Keys::ephemeral().sign(&claims()).unwrap();
        assert!(matches!(rejection(&keys, &t), JwtError::UnknownKey));
    }

    #[test]
    fn wrong_audience_or_issuer_is_rejected() {
        let keys = Keys::ephemeral();
        let t = keys.sign(&claims()).unwrap();
        assert!(keys.verify::<Claims>(&t, ISS, "other").is_err());
        assert!(keys
            .verify::<Claims>(&t, "https://evil.example", AUD)
            .is_err());
    }

    #[test]
    fn expired_and_not_yet_valid_tokens_are_rejected() {
        let keys = Keys::ephemeral();
        let t = now();
        let expired = Claims {
            iat: t - 100,
            nbf: t - 100,
            exp: t - 1,
            ..claims()
        };
        assert!(keys
            .verify::<Claims>(&keys.sign(&expired).unwrap(), ISS, AUD)
            .is_err());
        let early = Claims {
            nbf: t + 100,
            exp: t + 200,
            ..claims()
        };
        assert!(keys
            .verify::<Claims>(&keys.sign(&early).unwrap(), ISS, AUD)
            .is_err());
    }

    #[test]
    fn rotation_keeps_old_tokens_valid_until_retired_and_the_file_is_private() {
        let dir = std::env::temp_dir().join(format!("moor-keys-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = Keys::load_or_create(&dir).unwrap();
        let t = old.sign(&claims()).unwrap();
        let kid = Keys::rotate(&dir).unwrap();
        let new = Keys::load_or_create(&dir).unwrap();
        assert_eq!(new.current, kid);
        assert!(new.verify::<Claims>(&t, ISS, AUD).is_ok());
        Keys::retire_old(&dir).unwrap();
        let retired = Keys::load_or_create(&dir).unwrap();
        assert!(retired.verify::<Claims>(&t, ISS, AUD).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(key_path(&dir))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
