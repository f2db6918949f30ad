//! One session's state directory: `<state-dir>/sessions/<key>/`, locked for the lifetime of a
//! `moor` process so that two bridges never share a spool.
//!
//! ```text
//! lock           held with an exclusive file lock while moor runs
//! producer       this bridge's ProducerId (random once, then kept)
//! inputs.json    input ledger: last applied, in flight, uncertain
//! spool/         segments (<first seq>.seg) and the acked mark (acked)
//! ```

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use moor_protocol::ProducerId;
use uuid::Uuid;

use crate::error::BridgeError;
use crate::inputs::InputLedger;
use crate::spool::Spool;

/// An open, locked session directory and what lives in it.
#[derive(Debug)]
pub struct SessionDir {
    path: PathBuf,
    /// Keeps the exclusive lock; released when dropped (or when the process dies, even by SIGKILL).
    _lock: File,
    /// This bridge's producer identity for the session.
    pub producer: ProducerId,
    /// The spool.
    pub spool: Spool,
    /// The input ledger.
    pub ledger: InputLedger,
}

impl SessionDir {
    /// Open and lock the directory for `session` under `state_dir`, creating it if needed.
    pub fn open(state_dir: &Path, session: &str) -> Result<Self, BridgeError> {
        let path = state_dir.join("sessions").join(session_key(session));
        let state_err = |source| BridgeError::State {
            dir: path.clone(),
            source,
        };
        fs::create_dir_all(&path).map_err(state_err)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join("lock"))
            .map_err(state_err)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(BridgeError::Locked {
                    session: session.to_owned(),
                    dir: path,
                })
            }
            Err(TryLockError::Error(e)) => return Err(state_err(e)),
        }
        let producer = load_or_create_producer(&path.join("producer")).map_err(state_err)?;
        let spool = Spool::open(&path.join("spool"))?;
        let ledger =
            InputLedger::open(&path.join("inputs.json")).map_err(|e| BridgeError::State {
                dir: path.clone(),
                source: io::Error::other(e),
            })?;
        Ok(Self {
            path,
            _lock: lock,
            producer,
            spool,
            ledger,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session ended and the server holds everything: nothing here is needed any more.
    pub fn remove(self) -> io::Result<()> {
        // Unlinking while the lock is still held is fine on Unix, and keeps a racing second
        // `moor` from reusing the half-deleted directory.
        fs::remove_dir_all(&self.path)
    }
}

/// A file-name-safe, collision-free key for a session name or id.
pub fn session_key(session: &str) -> String {
    // A leading dot would make `.`/`..` or a hidden directory; it is replaced like any odd char.
    let safe: String = session
        .chars()
        .enumerate()
        .map(|(i, c)| match c {
            '.' if i > 0 => c,
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') => c,
            _ => '_',
        })
        .take(80)
        .collect();
    // Sanitising or truncating can make two names collide; a hash of the original keeps them apart.
    if safe == session && !safe.is_empty() {
        safe
    } else {
        format!("{safe}-{:016x}", fnv1a(session.as_bytes()))
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn load_or_create_producer(path: &Path) -> io::Result<ProducerId> {
    match fs::read_to_string(path) {
        Ok(text) => Uuid::parse_str(text.trim()).map(ProducerId).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let producer = ProducerId::new();
            let tmp = path.with_extension("tmp");
            let mut file = File::create(&tmp)?;
            writeln!(file, "{producer}")?;
            file.sync_all()?;
            fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent() {
                File::open(dir)?.sync_all()?;
            }
            Ok(producer)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_safe_and_distinct() {
        assert_eq!(session_key("claude-1a2b3c"), "claude-1a2b3c");
        let a = session_key("a/b");
        let b = session_key("a_b");
        assert!(a.starts_with("a_b-") && a != b, "{a} {b}");
        assert!(!session_key("..").starts_with('.'));
        assert_eq!(session_key("v1.2"), "v1.2");
        assert!(session_key("").len() > 1);
        assert!(session_key(&"x".repeat(500)).len() < 120);
    }

    #[test]
    fn a_second_open_of_the_same_session_is_refused_and_the_producer_is_kept() {
        let state = tempfile::tempdir().unwrap();
        let first = SessionDir::open(state.path(), "s1").unwrap();
        let err = SessionDir::open(state.path(), "s1").unwrap_err();
        assert!(matches!(err, BridgeError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("already running"));
        let producer = first.producer;
        drop(first);
        let again = SessionDir::open(state.path(), "s1").unwrap();
        assert_eq!(again.producer, producer);
        let other = SessionDir::open(state.path(), "s2").unwrap();
        assert_ne!(other.producer, producer);
    }
}
