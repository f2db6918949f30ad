//! A small filesystem a test can fill up and free again: a `tmpfs` of a given size mounted on a
//! fresh temp dir, to put `moord`'s data dir or `moor`'s spool on a disk that really runs out
//! (`ENOSPC` from the kernel, not from a fake writer).
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`). Where that is refused, [`SmallFs::mount`] says so
//! loudly and returns `None`, and the test skips.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// A mounted `tmpfs`, unmounted and removed on drop.
#[derive(Debug)]
pub struct SmallFs {
    dir: TempDir,
}

impl SmallFs {
    /// Mounts a `tmpfs` of `bytes` on a new temp dir; `None` (after a loud message naming
    /// `test`) if this machine does not let us mount.
    pub fn mount(test: &str, bytes: u64) -> Option<Self> {
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-smallfs-")
            .tempdir()
            .expect("temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0700"))
            .arg("tmpfs")
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self { dir }),
            Ok(o) => {
                skip(test, &String::from_utf8_lossy(&o.stderr));
                None
            }
            Err(e) => {
                skip(test, &e.to_string());
                None
            }
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Writes a filler file until the filesystem refuses with "no space left"; returns the bytes
    /// written. Panics on any other error.
    pub fn fill(&self) -> u64 {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler())
            .expect("create the filler");
        let chunk = vec![0xA5u8; 4096];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => return written,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => return written,
                Err(e) => panic!("filling {}: {e}", self.path().display()),
            }
        }
    }

    /// Deletes the filler: the space it held is free again.
    pub fn free(&self) {
        std::fs::remove_file(self.filler()).expect("remove the filler");
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // Lazily, so a process still holding a file there cannot keep the mount (and the
        // memory it holds) alive after the test.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn skip(test: &str, why: &str) {
    let line = "!".repeat(78);
    eprintln!(
        "{line}\n!! SKIPPED {test}: cannot mount a small tmpfs ({}).\n!! This test needs root or CAP_SYS_ADMIN to make a disk that really fills up.\n{line}",
        why.trim()
    );
}
