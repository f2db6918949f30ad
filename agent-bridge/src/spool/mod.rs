//! The durable on-disk spool (G1/G2): every entry the bridge produces gets the next producer seq,
//! is written and fsynced here before anyone may send it, and leaves only once `moord` acked it.
//!
//! The spool knows nothing about sockets. Producers call [`Spool::append_batch`]; the link reads
//! with [`Spool::read_batch`] and reports acks with [`Spool::ack`]. Two `watch` channels publish
//! the highest durable and the highest acked seq, so a sender can wait for new entries and a
//! benchmark can wait for acks.
//!
//! A full disk is not a failure: [`Spool::append`] holds the batch (and with it the producer, whose
//! agent then blocks on its full pipe), retries every [`Spool::full_retry`] and publishes the
//! episode on [`Spool::subscribe_full`], so nothing is dropped, skipped or reordered.
//!
//! Invariants: seqs are contiguous from 1 for a spool directory and never reused, even after every
//! entry was acked and its segment deleted (segment names carry the next seq across restarts).
//! Only the newest segment is ever written; older segments are immutable and deleted whole once
//! fully acked. Lock order: `writer` before `index`.

mod batch;
pub(crate) mod fit;
mod recover;
mod segment;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use moor_protocol::kinds;
use tokio::sync::watch;

pub use batch::{Batch, Draft, Record};
use recover::{create_segment, recover, Segment};
use segment::{decode_at, encode, MAX_BODY_LEN};

/// Segments are rotated once they grow past this many bytes.
pub const DEFAULT_SEGMENT_BYTES: u64 = 8 * 1024 * 1024;
/// How often a write refused for a full disk is tried again, unless set otherwise.
pub const DEFAULT_FULL_RETRY: Duration = Duration::from_secs(1);
/// File holding the highest acked seq.
const ACKED_FILE: &str = "acked";

/// Spool failures. Any of them means the disk cannot be trusted to hold entries.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A segment other than the newest holds an invalid record: not a torn tail, real damage.
    #[error("segment {} is damaged at byte {offset}", path.display())]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the first bad record starts.
        offset: u64,
    },
    /// A seq that should be in the spool is not.
    #[error("entry {0} is not in the spool")]
    Missing(u64),
    /// An entry could not be encoded or is too large.
    #[error("entry cannot be spooled: {0}")]
    Encode(String),
}

impl SpoolError {
    /// Whether this is a file write refused for a full disk (`ENOSPC`), a file-size limit
    /// (`EFBIG`, as `RLIMIT_FSIZE` gives) or a disk quota (`EDQUOT`): worth retrying once space
    /// is freed, unlike damage.
    pub fn is_disk_full(&self) -> bool {
        use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
        matches!(self, SpoolError::Io { source, .. }
            if matches!(source.kind(), StorageFull | FileTooLarge | QuotaExceeded))
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SpoolError + 'a {
    move |source| SpoolError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the index half-updated in a way that matters
    // more than stopping the bridge would, so keep going with the data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Handle to a session's spool; cheap to clone and shareable across tasks.
#[derive(Debug, Clone)]
pub struct Spool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    segment_bytes: u64,
    writer: Mutex<Writer>,
    index: Mutex<Index>,
    durable_tx: watch::Sender<u64>,
    acked_tx: watch::Sender<u64>,
    /// While appends are held back for a full disk: the error that says so.
    full_tx: watch::Sender<Option<String>>,
    full_retry_ms: AtomicU64,
}

#[derive(Debug)]
struct Writer {
    file: Arc<File>,
    len: u64,
    next_seq: u64,
    /// The next append must start a new segment (its name must equal its first seq).
    force_rotate: bool,
}

#[derive(Debug)]
struct Index {
    segments: VecDeque<Segment>,
    acked: u64,
}

impl Spool {
    /// Open (or create) the spool in `dir`, discarding a torn tail left by a crash.
    pub fn open(dir: &Path) -> Result<Self, SpoolError> {
        Self::open_with(dir, DEFAULT_SEGMENT_BYTES)
    }

    /// [`Spool::open`] with a custom segment size (tests use tiny ones).
    pub fn open_with(dir: &Path, segment_bytes: u64) -> Result<Self, SpoolError> {
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        let (mut segments, mark) = recover(dir)?;
        let last_record = segments.back().map(|s| s.last_seq()).unwrap_or(0);
        let last_named = segments.back().map(|s| s.first_seq).unwrap_or(1);
        // Everything before the first kept record was acked, or it would not have been deleted.
        let dropped = segments.front().map(|s| s.first_seq - 1).unwrap_or(0);
        let next_seq = (last_record + 1)
            .max(last_named)
            .max(mark + 1)
            .max(dropped + 1);
        let acked = mark.max(dropped).min(next_seq - 1);

        let mut force_rotate = false;
        if segments
            .back()
            .is_some_and(|s| s.offsets.is_empty() && s.first_seq != next_seq)
        {
            if let Some(stale) = segments.pop_back() {
                fs::remove_file(&stale.path).map_err(io_err("remove", &stale.path))?;
            }
        }
        match segments.back() {
            None => segments.push_back(create_segment(dir, next_seq)?),
            Some(last) if !last.offsets.is_empty() && last.last_seq() + 1 != next_seq => {
                force_rotate = true;
            }
            Some(_) => {}
        }
        let (file, len) = match segments.back() {
            Some(last) => (last.file.clone(), last.end),
            None => return Err(SpoolError::Missing(next_seq)),
        };
        // Records that survived a crash of this process may still sit only in the page cache.
        file.sync_data().map_err(io_err("sync", dir))?;

        let (durable_tx, _) = watch::channel(next_seq - 1);
        let (acked_tx, _) = watch::channel(acked);
        let spool = Self {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                segment_bytes: segment_bytes.max(1),
                writer: Mutex::new(Writer {
                    file,
                    len,
                    next_seq,
                    force_rotate,
                }),
                index: Mutex::new(Index { segments, acked }),
                durable_tx,
                acked_tx,
                full_tx: watch::channel(None).0,
                full_retry_ms: AtomicU64::new(DEFAULT_FULL_RETRY.as_millis() as u64),
            }),
        };
        spool.drop_acked_segments()?;
        Ok(spool)
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Write `drafts` with the next producer seqs, fsync once for the whole batch, then publish
    /// them. Returns the seqs assigned. Blocking: from async code use [`Spool::append`].
    pub fn append_batch<R: Into<Record>>(&self, drafts: Vec<R>) -> Result<Range<u64>, SpoolError> {
        self.try_append(drafts.into_iter().map(Into::into).collect())
            .map_err(|(e, _)| e)
    }

    /// [`Spool::append_batch`], giving the drafts back when the disk is full (nothing of them
    /// was kept, and no seq was used), so that they can be written again.
    fn try_append(&self, drafts: Vec<Record>) -> Result<Range<u64>, (SpoolError, Vec<Record>)> {
        let mut w = lock(&self.inner.writer);
        if drafts.is_empty() {
            return Ok(w.next_seq..w.next_seq);
        }
        if w.force_rotate || w.len >= self.inner.segment_bytes {
            if let Err(e) = self.rotate(&mut w) {
                return Err((e, drafts));
            }
        }
        let first = w.next_seq;
        let mut buf = Vec::new();
        let mut offsets = Vec::with_capacity(drafts.len());
        let mut kept = Vec::with_capacity(drafts.len());
        for (seq, draft) in (first..).zip(drafts) {
            let body = draft
                .spooled(seq)
                .map_err(|e| (SpoolError::Encode(e.to_string()), Vec::new()))?;
            let body = match &draft {
                Record::Entry(_) => fit::fit_body(&body, kinds::ENTRY_MAX_BYTES)
                    .map_err(|e| (e, Vec::new()))?
                    .unwrap_or(body),
                Record::PtyOutput { .. } => body,
            };
            if body.len() > MAX_BODY_LEN {
                let e = SpoolError::Encode(format!("{} bytes is over the limit", body.len()));
                return Err((e, Vec::new()));
            }
            offsets.push(w.len + buf.len() as u64);
            encode(seq, &body, &mut buf);
            kept.push(draft);
        }
        let next = first + offsets.len() as u64;
        let path = self.segment_path_locked();
        // Positioned write at our own idea of the end: a failed, partial earlier write is simply
        // overwritten by the next attempt instead of leaving garbage mid-segment (the length and
        // the seqs move only after the sync), which is what makes a full disk retryable.
        let written = w
            .file
            .write_all_at(&buf, w.len)
            .map_err(io_err("write", &path))
            .and_then(|()| w.file.sync_data().map_err(io_err("sync", &path)));
        if let Err(e) = written {
            return Err((e, kept));
        }
        w.len += buf.len() as u64;
        w.next_seq = next;
        {
            let mut index = lock(&self.inner.index);
            if let Some(active) = index.segments.back_mut() {
                active.offsets.extend(offsets);
                active.end = w.len;
            }
        }
        self.inner.durable_tx.send_replace(next - 1);
        Ok(first..next)
    }

    /// [`Spool::append_batch`] on the blocking pool, so an fsync never stalls the runtime.
    ///
    /// On a full disk it does not fail: it publishes the episode ([`Spool::subscribe_full`]) and
    /// tries the same batch again every [`Spool::full_retry`] until it is written, so the
    /// producer (and the agent behind it) waits instead of losing output.
    pub async fn append<R: Into<Record>>(&self, drafts: Vec<R>) -> Result<Range<u64>, SpoolError> {
        let mut drafts: Vec<Record> = drafts.into_iter().map(Into::into).collect();
        loop {
            let spool = self.clone();
            let attempt = tokio::task::spawn_blocking(move || spool.try_append(drafts))
                .await
                .map_err(|e| SpoolError::Encode(format!("append task failed: {e}")))?;
            match attempt {
                Ok(seqs) => {
                    self.inner.full_tx.send_if_modified(|v| v.take().is_some());
                    return Ok(seqs);
                }
                Err((e, back)) if e.is_disk_full() => {
                    let text = e.to_string();
                    self.inner
                        .full_tx
                        .send_if_modified(|v| v.replace(text.clone()).as_ref() != Some(&text));
                    drafts = back;
                    tokio::time::sleep(self.full_retry()).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// How often an append refused for a full disk is tried again.
    pub fn full_retry(&self) -> Duration {
        Duration::from_millis(self.inner.full_retry_ms.load(Ordering::Relaxed))
    }

    /// Sets how often an append refused for a full disk is tried again (tests shorten it).
    pub fn set_full_retry(&self, every: Duration) {
        let ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
        self.inner.full_retry_ms.store(ms, Ordering::Relaxed);
    }

    /// Watches the full-disk episode: `Some(error)` while appends are held back for a full
    /// disk, `None` once a write went through again.
    pub fn subscribe_full(&self) -> watch::Receiver<Option<String>> {
        self.inner.full_tx.subscribe()
    }

    /// Up to `max_entries` contiguous entries from `from` (at least one, at most `max_bytes` of
    /// JSON unless a single entry is larger), or `None` if `from` is past the durable end.
    pub fn read_batch(
        &self,
        from: u64,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Option<Batch>, SpoolError> {
        let (file, path, start, end) = {
            let index = lock(&self.inner.index);
            let last = index.segments.back().map(|s| s.last_seq()).unwrap_or(0);
            if from > last || max_entries == 0 {
                return Ok(None);
            }
            let seg = index
                .segments
                .iter()
                .find(|s| s.first_seq <= from && from <= s.last_seq())
                .ok_or(SpoolError::Missing(from))?;
            let first_idx = (from - seg.first_seq) as usize;
            let start = seg.offsets[first_idx];
            let mut end = seg.record_end(first_idx);
            for i in first_idx + 1..seg.offsets.len().min(first_idx + max_entries) {
                let next_end = seg.record_end(i);
                if (next_end - start) as usize > max_bytes {
                    break;
                }
                end = next_end;
            }
            (seg.file.clone(), seg.path.clone(), start, end)
        };
        let mut buf = vec![0u8; (end - start) as usize];
        file.read_exact_at(&mut buf, start)
            .map_err(io_err("read", &path))?;
        let mut bodies = Vec::new();
        let mut pos = 0;
        while pos < buf.len() {
            let expected = from + bodies.len() as u64;
            let rec = decode_at(&buf, pos)
                .filter(|r| r.seq == expected)
                .ok_or_else(|| SpoolError::Corrupt {
                    path: path.clone(),
                    offset: start + pos as u64,
                })?;
            pos = rec.body.end;
            bodies.push(rec.body);
        }
        Batch::decoded(from, buf, bodies, max_bytes).map(Some)
    }

    /// The server committed everything up to `upto`: drop it. Never moves backwards.
    pub fn ack(&self, upto: u64) -> Result<(), SpoolError> {
        let upto = upto.min(self.durable());
        {
            let mut index = lock(&self.inner.index);
            if upto <= index.acked {
                return Ok(());
            }
            index.acked = upto;
        }
        self.drop_acked_segments()?;
        // Not fsynced on purpose: the mark only saves resending; seqs survive through segment
        // names, and the server dedupes anything resent. For the same reason a full disk only
        // skips it: the next ack writes it again.
        let path = self.inner.dir.join(ACKED_FILE);
        let tmp = self.inner.dir.join("acked.tmp");
        let written = fs::write(&tmp, format!("{upto}\n"))
            .map_err(io_err("write", &tmp))
            .and_then(|()| fs::rename(&tmp, &path).map_err(io_err("rename", &path)));
        match written {
            Err(e) if e.is_disk_full() => {
                let _ = fs::remove_file(&tmp);
                tracing::debug!(error = %e, "acked mark not saved: disk full");
            }
            other => other?,
        }
        self.inner.acked_tx.send_replace(upto);
        Ok(())
    }

    /// The server already holds everything up to `mark` (its `Welcome.producer_mark`). If that is
    /// beyond what this spool ever wrote (the local disk lost a tail the server got), move the
    /// producer counter past it so no seq is ever reused with other content.
    pub fn resume_after(&self, mark: u64) -> Result<(), SpoolError> {
        {
            let mut w = lock(&self.inner.writer);
            if mark >= w.next_seq {
                tracing::warn!(
                    mark,
                    next = w.next_seq,
                    "server holds entries this spool lost; skipping ahead"
                );
                w.next_seq = mark + 1;
                w.force_rotate = true;
                self.inner.durable_tx.send_replace(mark);
            }
        }
        self.ack(mark)
    }

    /// Highest seq written and fsynced.
    pub fn durable(&self) -> u64 {
        *self.inner.durable_tx.borrow()
    }

    /// Highest seq the server acknowledged.
    pub fn acked(&self) -> u64 {
        *self.inner.acked_tx.borrow()
    }

    /// Entries spooled and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.durable().saturating_sub(self.acked())
    }

    /// Highest seq this spool has deleted; the server must hold at least this much.
    pub fn dropped_upto(&self) -> u64 {
        let index = lock(&self.inner.index);
        index.segments.front().map(|s| s.first_seq - 1).unwrap_or(0)
    }

    /// Watch the highest durable seq (wakes a sender when new entries can go out).
    pub fn subscribe_durable(&self) -> watch::Receiver<u64> {
        self.inner.durable_tx.subscribe()
    }

    /// Watch the highest acked seq (a benchmark waits on it).
    pub fn subscribe_acked(&self) -> watch::Receiver<u64> {
        self.inner.acked_tx.subscribe()
    }

    fn segment_path_locked(&self) -> PathBuf {
        let index = lock(&self.inner.index);
        index
            .segments
            .back()
            .map(|s| s.path.clone())
            .unwrap_or_else(|| self.inner.dir.clone())
    }

    /// Start a new segment named after the next seq. An empty active segment is replaced.
    fn rotate(&self, w: &mut Writer) -> Result<(), SpoolError> {
        let segment = create_segment(&self.inner.dir, w.next_seq)?;
        let mut index = lock(&self.inner.index);
        if let Some(empty) = index.segments.back().filter(|s| s.offsets.is_empty()) {
            if empty.first_seq != w.next_seq {
                let _ = fs::remove_file(&empty.path);
            }
            index.segments.pop_back();
        }
        w.file = segment.file.clone();
        w.len = 0;
        w.force_rotate = false;
        index.segments.push_back(segment);
        Ok(())
    }

    /// Delete every segment but the newest whose records are all acked.
    fn drop_acked_segments(&self) -> Result<(), SpoolError> {
        let mut doomed = Vec::new();
        {
            let mut index = lock(&self.inner.index);
            while index.segments.len() > 1
                && index
                    .segments
                    .front()
                    .is_some_and(|s| s.last_seq() <= index.acked)
            {
                doomed.extend(index.segments.pop_front().map(|s| s.path));
            }
        }
        for path in doomed {
            fs::remove_file(&path).map_err(io_err("remove", &path))?;
        }
        Ok(())
    }
}
