//! Remote input accounting (G6): which inputs were applied, which one was being applied when the
//! bridge died, and the queue an adapter pulls inputs from.
//!
//! The ledger file is tiny and rewritten atomically (write, fsync, rename, fsync dir) at each
//! step, because "in flight" must be on disk *before* the agent sees the input: after a crash
//! such an input is reported as uncertain and never replayed.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use moor_protocol::bridge::ReceiptStatus;
use moor_protocol::{BodyError, Entry, EntryBody, Seq};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

/// The ledger could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("input ledger {}: {source}", path.display())]
pub struct LedgerError {
    path: PathBuf,
    source: io::Error,
}

/// What is on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct LedgerState {
    /// Highest input seq applied or given up on (failed, uncertain).
    last_applied: u64,
    /// The input being written to the agent right now.
    in_flight: Option<u64>,
    /// Inputs interrupted by a crash, reported in every `Hello` until a server welcomed one.
    #[serde(default)]
    uncertain: Vec<u64>,
}

/// The durable record of applied inputs; cheap to clone.
#[derive(Debug, Clone)]
pub struct InputLedger {
    path: PathBuf,
    state: Arc<Mutex<LedgerState>>,
}

impl InputLedger {
    /// Open the ledger at `path`. An input that was in flight when the last run died becomes
    /// uncertain: it counts as consumed and will not be replayed.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let err = |source| LedgerError {
            path: path.to_owned(),
            source,
        };
        let mut state = match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e)))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => LedgerState::default(),
            Err(e) => return Err(err(e)),
        };
        let ledger = Self {
            path: path.to_owned(),
            state: Arc::new(Mutex::new(LedgerState::default())),
        };
        if let Some(seq) = state.in_flight.take() {
            tracing::warn!(
                input_seq = seq,
                "an input was being applied when moor stopped; reporting it as uncertain"
            );
            state.last_applied = state.last_applied.max(seq);
            if !state.uncertain.contains(&seq) {
                state.uncertain.push(seq);
            }
            ledger.persist(&state)?;
        }
        *ledger.lock() = state;
        Ok(ledger)
    }

    /// `Hello.last_applied_input`.
    pub fn last_applied(&self) -> Seq {
        Seq(self.lock().last_applied)
    }

    /// `Hello.uncertain_inputs`.
    pub fn uncertain(&self) -> Vec<Seq> {
        self.lock().uncertain.iter().copied().map(Seq).collect()
    }

    /// A server welcomed a `Hello` that listed the uncertain inputs: stop repeating them.
    pub fn uncertain_reported(&self) -> Result<(), LedgerError> {
        self.update(|s| !std::mem::take(&mut s.uncertain).is_empty())
    }

    /// Mark `seq` in flight (durably) before it is handed to the agent.
    fn begin(&self, seq: u64) -> Result<(), LedgerError> {
        self.update(|s| {
            s.in_flight = Some(seq);
            true
        })
    }

    /// `seq` was applied or failed: it is consumed.
    fn finish(&self, seq: u64) -> Result<(), LedgerError> {
        self.update(|s| {
            s.last_applied = s.last_applied.max(seq);
            s.in_flight = None;
            true
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Apply `change` and persist if it says something changed. The lock is held across the
    /// write so two updates can never land on disk out of order.
    fn update(&self, change: impl FnOnce(&mut LedgerState) -> bool) -> Result<(), LedgerError> {
        let mut state = self.lock();
        let mut next = state.clone();
        if change(&mut next) {
            self.persist(&next)?;
            *state = next;
        }
        Ok(())
    }

    fn persist(&self, state: &LedgerState) -> Result<(), LedgerError> {
        let err = |source| LedgerError {
            path: self.path.clone(),
            source,
        };
        let tmp = self.path.with_extension("tmp");
        let bytes = serde_json::to_vec(state).map_err(|e| err(io::Error::other(e)))?;
        let mut file = File::create(&tmp).map_err(err)?;
        io::Write::write_all(&mut file, &bytes).map_err(err)?;
        file.sync_all().map_err(err)?;
        fs::rename(&tmp, &self.path).map_err(err)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(err)?;
        }
        Ok(())
    }
}

/// A receipt for the link to send: `BridgeToServer::Receipt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The input's seq.
    pub input_seq: Seq,
    /// What happened.
    pub status: ReceiptStatus,
}

/// Receipts waiting for a connection. Bounded: if the link is down long enough to fill it, older
/// receipts are dropped, and the server re-derives them from the next `Hello`.
pub(crate) const RECEIPT_QUEUE: usize = 1024;

/// The adapter's queue of remote inputs, in seq order, deduplicated against the ledger.
#[derive(Debug)]
pub struct Inputs {
    rx: mpsc::UnboundedReceiver<Entry>,
    ledger: InputLedger,
    receipts: mpsc::Sender<Receipt>,
    /// An input taken from `rx` whose `begin` did not finish (keeps `next` cancel-safe).
    held: Option<Entry>,
}

impl Inputs {
    /// Wire the queue: `rx` gets inputs from the link, `receipts` goes back to it.
    pub fn new(
        rx: mpsc::UnboundedReceiver<Entry>,
        ledger: InputLedger,
        receipts: mpsc::Sender<Receipt>,
    ) -> Self {
        Self {
            rx,
            ledger,
            receipts,
            held: None,
        }
    }

    /// The next input to apply, already marked in flight on disk, or `None` once the link is
    /// gone. Inputs at or below the last applied seq are skipped (redelivery after a reconnect).
    /// Cancel-safe: an input taken but not yet returned is kept for the next call.
    pub async fn next(&mut self) -> Result<Option<PendingInput>, LedgerError> {
        self.take(true).await
    }

    /// Like [`Inputs::next`], but `None` as soon as nothing is queued right now.
    pub async fn next_queued(&mut self) -> Result<Option<PendingInput>, LedgerError> {
        self.take(false).await
    }

    async fn take(&mut self, wait: bool) -> Result<Option<PendingInput>, LedgerError> {
        loop {
            let received = match self.held.take() {
                Some(entry) => Some(entry),
                None if wait => self.rx.recv().await,
                None => self.rx.try_recv().ok(),
            };
            let Some(entry) = received else {
                return Ok(None);
            };
            if entry.seq <= self.ledger.last_applied() {
                tracing::debug!(input_seq = %entry.seq, "skipping an input that was already consumed");
                continue;
            }
            self.held = Some(entry.clone());
            let ledger = self.ledger.clone();
            let seq = entry.seq.0;
            blocking(move || ledger.begin(seq)).await?;
            self.held = None;
            return Ok(Some(PendingInput {
                seq: entry.seq,
                kind: entry.kind,
                author: entry.author,
                payload: entry.payload,
                ledger: self.ledger.clone(),
                receipts: self.receipts.clone(),
            }));
        }
    }
}

/// One input handed to an adapter. Report it with [`PendingInput::applied`] or
/// [`PendingInput::failed`]; dropping it unreported leaves it in flight, and the next start of
/// `moor` reports it as uncertain, which is the truth if the adapter died mid-write.
#[derive(Debug)]
pub struct PendingInput {
    /// The input's seq in the log.
    pub seq: Seq,
    /// Input kind, e.g. `input.text`.
    pub kind: String,
    /// Who sent it (`user:<name>`).
    pub author: String,
    /// Kind-specific body.
    pub payload: Value,
    ledger: InputLedger,
    receipts: mpsc::Sender<Receipt>,
}

impl PendingInput {
    /// The typed input, as [`moor_protocol::Entry::body`].
    pub fn body(&self) -> Result<EntryBody, BodyError> {
        EntryBody::decode(&self.kind, &self.payload)
    }

    /// The agent got it.
    pub async fn applied(self) -> Result<(), LedgerError> {
        self.finish(ReceiptStatus::Applied).await
    }

    /// It could not be applied; it still counts as consumed.
    pub async fn failed(self, reason: impl Into<String>) -> Result<(), LedgerError> {
        self.finish(ReceiptStatus::Failed {
            reason: reason.into(),
        })
        .await
    }

    async fn finish(self, status: ReceiptStatus) -> Result<(), LedgerError> {
        let ledger = self.ledger.clone();
        let seq = self.seq.0;
        blocking(move || ledger.finish(seq)).await?;
        // Dropping on a full queue is fine: see RECEIPT_QUEUE.
        let _ = self.receipts.try_send(Receipt {
            input_seq: self.seq,
            status,
        });
        Ok(())
    }
}

async fn blocking(
    f: impl FnOnce() -> Result<(), LedgerError> + Send + 'static,
) -> Result<(), LedgerError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(LedgerError {
            path: PathBuf::new(),
            source: io::Error::other(format!("ledger task failed: {e}")),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(seq: u64, text: &str) -> Entry {
        Entry {
            seq: Seq(seq),
            ts: 0,
            kind: "input.text".into(),
            author: "user:a".into(),
            payload: EntryBody::from(moor_protocol::payload::InputText { text: text.into() })
                .payload(),
        }
    }

    #[test]
    fn an_in_flight_input_becomes_uncertain_and_consumed_after_reopen() {
        // arrange
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inputs.json");
        let ledger = InputLedger::open(&path).unwrap();
        ledger.begin(3).unwrap();
        ledger.finish(3).unwrap();
        ledger.begin(5).unwrap();
        drop(ledger);
        // act
        let ledger = InputLedger::open(&path).unwrap();
        // assert
        assert_eq!(ledger.last_applied(), Seq(5));
        assert_eq!(ledger.uncertain(), vec![Seq(5)]);
        // still reported after another restart, until a server welcomed it
        let ledger = InputLedger::open(&path).unwrap();
        assert_eq!(ledger.uncertain(), vec![Seq(5)]);
        ledger.uncertain_reported().unwrap();
        let ledger = InputLedger::open(&path).unwrap();
        assert!(ledger.uncertain().is_empty());
        assert_eq!(ledger.last_applied(), Seq(5));
    }

    #[tokio::test]
    async fn inputs_are_deduplicated_and_receipts_follow_the_report() {
        // arrange
        let dir = tempfile::tempdir().unwrap();
        let ledger = InputLedger::open(&dir.path().join("inputs.json")).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let (rtx, mut rrx) = mpsc::channel(8);
        let mut inputs = Inputs::new(rx, ledger.clone(), rtx);
        for entry in [input(2, "a"), input(2, "a"), input(4, "b")] {
            tx.send(entry).unwrap();
        }
        drop(tx);
        // act
        let first = inputs.next().await.unwrap().unwrap();
        assert_eq!(first.seq, Seq(2));
        first.applied().await.unwrap();
        let second = inputs.next().await.unwrap().unwrap();
        second.failed("nope").await.unwrap();
        // assert
        assert!(inputs.next().await.unwrap().is_none());
        assert_eq!(ledger.last_applied(), Seq(4));
        assert_eq!(
            rrx.recv().await.unwrap(),
            Receipt {
                input_seq: Seq(2),
                status: ReceiptStatus::Applied
            }
        );
        let failed = rrx.recv().await.unwrap();
        assert_eq!(
            failed.status,
            ReceiptStatus::Failed {
                reason: "nope".into()
            }
        );
    }

    #[tokio::test]
    async fn an_unreported_input_is_uncertain_on_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inputs.json");
        let ledger = InputLedger::open(&path).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let (rtx, _rrx) = mpsc::channel(8);
        let mut inputs = Inputs::new(rx, ledger, rtx);
        tx.send(input(7, "x")).unwrap();
        let pending = inputs.next().await.unwrap().unwrap();
        drop(pending); // the adapter died mid-write
        let reopened = InputLedger::open(&path).unwrap();
        assert_eq!(reopened.uncertain(), vec![Seq(7)]);
        assert_eq!(reopened.last_applied(), Seq(7));
    }
}
