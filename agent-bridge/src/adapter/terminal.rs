//! The person at the desk: `moor`'s own terminal. Raw mode (restored on drop, whatever the exit
//! path), its window size, and a reader of local keystrokes on a plain thread.
//!
//! Local stdin is read on a dedicated OS thread, never on the async runtime: a blocking
//! `read(2)` on a terminal cannot be cancelled, and a runtime waits for its blocking tasks when
//! it shuts down, so `moor` would hang on exit until the next key press.

use std::io::{self, IsTerminal, Read, Write};
use std::os::fd::AsFd;

use rustix::termios::{self, OptionalActions, Termios};
use tokio::sync::mpsc;

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

impl TermSize {
    /// What a program gets when nobody says otherwise.
    pub const DEFAULT: TermSize = TermSize { cols: 80, rows: 24 };

    /// `cols` × `rows`, or `None` when either is zero or absurd.
    pub fn new(cols: u64, rows: u64) -> Option<Self> {
        let valid = |n: u64| (1..=10_000).contains(&n);
        (valid(cols) && valid(rows)).then_some(Self {
            cols: cols as u16,
            rows: rows as u16,
        })
    }
}

/// Whether `moor`'s stdin is a terminal (a person is typing).
pub fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// The window size of `moor`'s terminal, if stdin is one.
pub fn local_size() -> Option<TermSize> {
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let ws = termios::tcgetwinsize(stdin.as_fd()).ok()?;
    TermSize::new(u64::from(ws.ws_col), u64::from(ws.ws_row))
}

/// Puts stdin's terminal in raw mode; restores the saved settings when dropped, so the shell
/// gets its terminal back after any exit path that unwinds.
#[derive(Debug)]
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Enter raw mode, or `None` when stdin is not a terminal.
    pub fn enter() -> io::Result<Option<Self>> {
        let stdin = io::stdin();
        if !stdin.is_terminal() {
            return Ok(None);
        }
        let saved = termios::tcgetattr(stdin.as_fd())?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(stdin.as_fd(), OptionalActions::Flush, &raw)?;
        Ok(Some(Self { saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let stdin = io::stdin();
        if let Err(e) = termios::tcsetattr(stdin.as_fd(), OptionalActions::Flush, &self.saved) {
            tracing::warn!(error = %e, "could not restore the terminal settings");
        }
    }
}

/// Reads local stdin on its own thread and hands the bytes over in chunks. The channel closes
/// at EOF or on a read error; the thread ends then, or at the next read after the receiver is
/// gone.
pub fn spawn_stdin_reader(capacity: usize) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let spawned = std::thread::Builder::new()
        .name("moor-stdin".into())
        .spawn(move || {
            let mut stdin = io::stdin().lock();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "local stdin closed");
                        break;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot read local input");
    }
    rx
}

/// Writes to `moor`'s stdout on its own thread, so a slow terminal never blocks the runtime.
/// Returns the sender and the thread; dropping the sender ends the thread after the queued
/// chunks are written.
pub fn spawn_stdout_writer(
    capacity: usize,
) -> (mpsc::Sender<Vec<u8>>, Option<std::thread::JoinHandle<()>>) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(capacity.max(1));
    let spawned = std::thread::Builder::new()
        .name("moor-stdout".into())
        .spawn(move || {
            let mut stdout = io::stdout().lock();
            while let Some(chunk) = rx.blocking_recv() {
                // A closed terminal must not stop the session: keep draining, stop writing.
                if stdout
                    .write_all(&chunk)
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    while rx.blocking_recv().is_some() {}
                    break;
                }
            }
        });
    match spawned {
        Ok(thread) => (tx, Some(thread)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot mirror agent output locally");
            (tx, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_must_be_positive_and_sane() {
        assert_eq!(
            TermSize::new(120, 40),
            Some(TermSize {
                cols: 120,
                rows: 40
            })
        );
        assert_eq!(TermSize::new(0, 40), None);
        assert_eq!(TermSize::new(80, 70_000), None);
    }
}
