//! Opening a spool directory: scan the segments, drop a torn tail, and build the in-memory
//! index of durable records. Also creates new segments (used when rotating).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::segment::{parse_segment_name, scan, segment_name};
use super::{io_err, SpoolError, ACKED_FILE};

/// Only durable (fsynced) records are listed, so readers never see anything unsynced.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) first_seq: u64,
    pub(super) path: PathBuf,
    pub(super) file: Arc<File>,
    pub(super) offsets: Vec<u64>,
    pub(super) end: u64,
}

impl Segment {
    /// Seq of the last record, `first_seq - 1` when empty.
    pub(super) fn last_seq(&self) -> u64 {
        self.first_seq + self.offsets.len() as u64 - 1
    }

    pub(super) fn record_end(&self, i: usize) -> u64 {
        self.offsets.get(i + 1).copied().unwrap_or(self.end)
    }
}

/// Scan the directory: read the acked mark and every segment, truncating a torn tail of the
/// newest one. Damage anywhere else is an error.
pub(super) fn recover(dir: &Path) -> Result<(VecDeque<Segment>, u64), SpoolError> {
    let mark = fs::read_to_string(dir.join(ACKED_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let mut names = Vec::new();
    for item in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let item = item.map_err(io_err("list", dir))?;
        if let Some(first) = item.file_name().to_str().and_then(parse_segment_name) {
            names.push((first, item.path()));
        }
    }
    names.sort();
    let count = names.len();
    let mut segments = VecDeque::new();
    for (i, (first_seq, path)) in names.into_iter().enumerate() {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        let found = scan(&mut file, first_seq).map_err(io_err("read", &path))?;
        if found.torn_bytes > 0 {
            if i + 1 < count {
                return Err(SpoolError::Corrupt {
                    path,
                    offset: found.end,
                });
            }
            tracing::warn!(path = %path.display(), bytes = found.torn_bytes, "discarding torn spool tail");
            file.set_len(found.end).map_err(io_err("truncate", &path))?;
            file.sync_all().map_err(io_err("sync", &path))?;
        }
        if found.offsets.is_empty() && i + 1 < count {
            // An older empty segment carries nothing; the newer names carry the seq.
            fs::remove_file(&path).map_err(io_err("remove", &path))?;
            continue;
        }
        segments.push_back(Segment {
            first_seq,
            path,
            file: Arc::new(file),
            offsets: found.offsets,
            end: found.end,
        });
    }
    Ok((segments, mark))
}

pub(super) fn create_segment(dir: &Path, first_seq: u64) -> Result<Segment, SpoolError> {
    let path = dir.join(segment_name(first_seq));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(io_err("create", &path))?;
    // The name records the next seq, so the new directory entry itself must be durable.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync", dir))?;
    Ok(Segment {
        first_seq,
        path,
        file: Arc::new(file),
        offsets: Vec::new(),
        end: 0,
    })
}
