//! Reading an uploaded checkpoint manifest: the one parser the server (and anything that fuzzes
//! it) uses, so every manifest that is stored has passed the same checks.
//!
//! A manifest comes from a client that may be hostile. Besides its JSON shape, [`parse_manifest`]
//! checks what a server or whoever extracts an archive of it relies on: the id and every blob
//! name are well-formed, each changed path is relative and plain (no `..`, `.` or empty
//! components, no absolute path, no backslash or NUL), no path appears twice, and no path runs
//! through a symbolic link the checkpoint itself holds (which would let an extractor write
//! outside the work tree). It does not check the claimed sizes: only the blob store knows them.

use std::collections::HashSet;
use std::fmt;

use crate::checkpoint::{is_checkpoint_id, is_sha256_hex, CheckpointManifest};

/// Git mode of a symbolic link.
pub const MODE_SYMLINK: &str = "120000";
/// The modes a checkpointed path may have: regular, executable, symbolic link, submodule.
pub const MODES: [&str; 4] = ["100644", "100755", MODE_SYMLINK, "160000"];
/// Longest changed path accepted, bytes (Linux's `PATH_MAX`).
pub const PATH_MAX_BYTES: usize = 4096;

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The part of the manifest at fault (`body` when it is not a manifest at all).
    pub field: &'static str,
    /// In plain words.
    pub reason: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ManifestError {}

fn refuse(field: &'static str, reason: String) -> ManifestError {
    ManifestError { field, reason }
}

/// Parses and checks a manifest (see the module documentation).
pub fn parse_manifest(bytes: &[u8]) -> Result<CheckpointManifest, ManifestError> {
    let manifest: CheckpointManifest =
        serde_json::from_slice(bytes).map_err(|e| refuse("body", e.to_string()))?;
    check_manifest(&manifest)?;
    Ok(manifest)
}

/// The checks of [`parse_manifest`] on a manifest already decoded.
pub fn check_manifest(m: &CheckpointManifest) -> Result<(), ManifestError> {
    if !is_checkpoint_id(&m.id) {
        return Err(refuse(
            "id",
            format!(
                "{:?} is not a checkpoint id (16 lowercase hex digits)",
                m.id
            ),
        ));
    }
    check_sha(&m.patch.sha256)?;
    let mut seen = HashSet::with_capacity(m.files.len());
    let mut links = HashSet::new();
    for f in &m.files {
        check_path(&f.path)?;
        if !seen.insert(f.path.as_str()) {
            return Err(refuse("files", format!("{:?} is listed twice", f.path)));
        }
        if let Some(sha) = &f.sha256 {
            check_sha(sha)?;
        }
        if let Some(mode) = f.mode.as_deref() {
            if !MODES.contains(&mode) {
                return Err(refuse(
                    "files",
                    format!("{:?} has mode {mode:?}, not one of {MODES:?}", f.path),
                ));
            }
            if mode == MODE_SYMLINK {
                links.insert(f.path.as_str());
            }
        }
    }
    for f in &m.files {
        let through = parents(&f.path).find(|p| links.contains(p));
        if let Some(link) = through {
            return Err(refuse(
                "files",
                format!("{:?} lies under {link:?}, a symbolic link", f.path),
            ));
        }
    }
    Ok(())
}

fn check_sha(sha: &str) -> Result<(), ManifestError> {
    if is_sha256_hex(sha) {
        Ok(())
    } else {
        Err(refuse(
            "sha256",
            format!("{sha:?} is not a lowercase hex SHA-256"),
        ))
    }
}

/// A path a work tree may hold: relative, `/`-separated, each component a plain name.
fn check_path(path: &str) -> Result<(), ManifestError> {
    let bad = |why: &str| Err(refuse("files", format!("path {path:?} {why}")));
    if path.is_empty() {
        return bad("is empty");
    }
    if path.len() > PATH_MAX_BYTES {
        return bad(&format!("is longer than {PATH_MAX_BYTES} bytes"));
    }
    if path.starts_with('/') {
        return bad("is absolute");
    }
    if path.contains(['\\', '\0']) {
        return bad("holds a backslash or NUL");
    }
    if path
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return bad("has an empty, `.` or `..` component");
    }
    Ok(())
}

/// The directories `path` lies under, nearest first: `a/b/c` gives `a/b`, then `a`.
fn parents(path: &str) -> impl Iterator<Item = &str> {
    path.rmatch_indices('/').map(move |(i, _)| &path[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::{file, manifest};
    use crate::checkpoint::FileChange;

    fn verdict(files: Vec<FileChange>) -> Result<(), String> {
        let bytes = serde_json::to_vec(&manifest(files)).unwrap();
        parse_manifest(&bytes)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn plain_relative_unique_paths_pass() {
        let files = vec![
            file("src/main.rs", "100644"),
            file("run.sh", "100755"),
            file("link", MODE_SYMLINK),
            file("linked/elsewhere", "100644"),
            file("vendor/lib", "160000"),
        ];
        assert_eq!(verdict(files), Ok(()));
    }

    #[test]
    fn escaping_duplicate_and_through_symlink_paths_are_refused() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a\\b",
            "",
            "a/",
        ] {
            assert!(verdict(vec![file(bad, "100644")]).is_err(), "{bad:?}");
        }
        let twice = vec![file("a", "100644"), file("a", "100755")];
        assert!(verdict(twice).unwrap_err().contains("twice"));
        let through = vec![file("d", MODE_SYMLINK), file("d/x/passwd", "100644")];
        assert!(verdict(through).unwrap_err().contains("symbolic link"));
        assert!(verdict(vec![file("a", "040000")]).is_err());
    }

    #[test]
    fn malformed_ids_and_hashes_are_refused() {
        let mut m = manifest(vec![]);
        m.id = "../../etc/passwd".into();
        assert_eq!(check_manifest(&m).unwrap_err().field, "id");
        let mut m = manifest(vec![]);
        m.patch.sha256 = "A".repeat(64);
        assert_eq!(check_manifest(&m).unwrap_err().field, "sha256");
        assert_eq!(parse_manifest(b"{}").unwrap_err().field, "body");
    }
}
