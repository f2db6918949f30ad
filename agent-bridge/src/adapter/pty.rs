//! The `pty` adapter: any terminal program in a pseudo-terminal, mirrored byte for byte.
//!
//! The program is a session leader with the PTY as its controlling terminal, so job control,
//! Ctrl-C and full-screen programs behave as in a plain terminal. Output goes both to `moor`'s
//! own stdout (the person at the desk, whose terminal is put in raw mode) and, batched, into the
//! spool as raw bytes (sent as base64 `agent.pty.output` entries). Local keystrokes and remote `input.keys` / `input.text` /
//! `input.resize` / `input.interrupt` share one writer, so both work at the same time.

use std::time::Duration;

use moor_protocol::kinds;
use moor_protocol::payload::{AgentPtyResize, AgentStart, ResizeSource};
use moor_protocol::{BodyError, EntryBody};
use pty_process::{OwnedReadPty, OwnedWritePty, Pty, Size};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::chunks::{key_bytes, spool_chunks};
use super::foreground;
use super::process::{
    child_pid, join_writer, program_and_args, spawn_error, spool_exit, wait_for_exit,
};
use super::terminal::{self, RawMode, TermSize};
use super::{settle, AdapterDone, AdapterError, AdapterIo, AgentSpec};
use crate::inputs::{Inputs, PendingInput};
use crate::spool::{Draft, Spool};
use crate::status::Status;

/// Size of one read from the PTY.
const READ_BYTES: usize = 64 * 1024;
/// Chunks waiting for the spool writer (or the local screen).
const CHUNK_QUEUE: usize = 8;
/// Most bytes read ahead while the spool writer is busy; then reading pauses (backpressure).
const PENDING_BYTES: usize = 4 * 1024 * 1024;
/// After the program exits, how long a grandchild may keep the PTY open before we stop reading.
const PTY_DRAIN: Duration = Duration::from_secs(2);
/// Ctrl-C, what `input.interrupt` types.
const ETX: u8 = 0x03;

/// A program started on a new pseudo-terminal.
pub struct PtyAgent {
    child: Child,
    pid: u32,
    pty: Pty,
    size: TermSize,
    spec: AgentSpec,
}

moor_protocol::debug_fields!(PtyAgent { pid, size });

impl PtyAgent {
    /// Open a PTY the size of the local terminal (80×24 without one) and start the program on it.
    pub fn start(spec: &AgentSpec) -> Result<Self, AdapterError> {
        let (program, args) = program_and_args(spec, &spec.command)?;
        let pty_err =
            |e: pty_process::Error| spawn_error(spec, std::io::Error::other(e.to_string()));
        let (pty, pts) = pty_process::open().map_err(pty_err)?;
        let size = terminal::local_size().unwrap_or(TermSize::DEFAULT);
        pty.resize(Size::new(size.rows, size.cols))
            .map_err(pty_err)?;
        let mut cmd = pty_process::Command::new(program)
            .args(args)
            .current_dir(&spec.cwd)
            .env_remove("MOOR_TOKEN");
        if std::env::var_os("TERM").is_none() {
            cmd = cmd.env("TERM", "xterm-256color");
        }
        let child = cmd.spawn(pts).map_err(|e| match e {
            pty_process::Error::Io(io) => spawn_error(spec, io),
            other => pty_err(other),
        })?;
        let pid = child_pid(spec, &child)?;
        Ok(Self {
            child,
            pid,
            pty,
            size,
            spec: spec.clone(),
        })
    }

    /// The program's process id (also its session and process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Run until the program exits and everything it wrote, then `agent.exit`, is spooled.
    pub async fn run(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        let Self {
            mut child,
            pid,
            pty,
            size,
            spec,
        } = self;
        let AdapterIo {
            spool,
            inputs,
            mut signals,
            status,
        } = io;
        let mut start = AgentStart {
            cols: Some(size.cols),
            rows: Some(size.rows),
            ..spec.start_entry(pid, super::AdapterKind::Pty)
        };
        // A shell's terminal says whether it waits at its prompt; nothing else's does.
        let shell = spec
            .command
            .first()
            .is_some_and(|p| foreground::is_shell(p));
        if let Some(caps) = start.capabilities.as_mut() {
            caps.terminal_wait = shell;
        }
        spool.append(vec![Draft::new(start)]).await?;
        let exited = CancellationToken::new();
        let watcher = match shell.then(|| rustix::io::dup(&pty)) {
            Some(Ok(master)) => Some(tokio::spawn(foreground::watch(
                master,
                pid,
                spool.clone(),
                exited.child_token(),
            ))),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "cannot watch the terminal's foreground");
                None
            }
            None => None,
        };
        // Whichever way this returns, the watcher stops with it.
        let _stop_watcher = exited.clone().drop_guard();

        let raw = if spec.options.interactive {
            RawMode::enter()?
        } else {
            None
        };
        status.set_raw(raw.is_some());
        let (reader, writer) = pty.into_split();
        // Only a person at the terminal gets the mirror: a pipe nobody reads must not stall the
        // program or the log.
        let (stdout_tx, stdout_thread) = match spec.options.interactive {
            true => {
                let (tx, thread) = terminal::spawn_stdout_writer(CHUNK_QUEUE);
                (Some(tx), thread)
            }
            false => (None, None),
        };
        let (chunk_tx, chunk_rx) = mpsc::channel(CHUNK_QUEUE);
        let mut spooler = tokio::spawn(spool_chunks(chunk_rx, spool.clone()));
        let mut pump = tokio::spawn(pump_output(reader, chunk_tx, stdout_tx));
        let feeder = tokio::spawn(
            Feeder {
                writer,
                spool: spool.clone(),
                status: status.clone(),
                interactive: spec.options.interactive,
            }
            .run(inputs, exited.clone()),
        );

        let exit_wait = wait_for_exit(
            &mut child,
            pid,
            &mut signals,
            &mut spooler,
            "terminal output",
        )
        .await?;
        exited.cancel();
        // Its last word on the terminal comes before `agent.exit`.
        if let Some(watcher) = watcher {
            let _ = watcher.await;
        }
        // What it left running dies with it (and lets go of the terminal).
        let stopped = super::tree::stop_leftovers(spec.options.stop_grace).await;
        if let Some(err) = exit_wait.spool_failure {
            drop(raw);
            status.set_raw(false);
            return Err(err.into());
        }
        // What the program wrote just before exiting may still be in the PTY; a grandchild that
        // keeps it open must not keep the session alive forever.
        if tokio::time::timeout(PTY_DRAIN, &mut pump).await.is_err() {
            tracing::warn!(
                "the terminal is still open after the program exited; no longer reading it"
            );
            pump.abort();
            let _ = (&mut pump).await;
        }
        join_writer(spooler, &exit_wait).await?;
        let done = spool_exit(&spool, &exit_wait, stopped, feeder).await?;
        // Everything the program printed is on the screen before the terminal is handed back.
        if let Some(thread) = stdout_thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        drop(raw);
        status.set_raw(false);
        Ok(done)
    }
}

/// Read the PTY until EOF (EIO once the last slave fd is closed), mirroring locally and queueing
/// for the spool. While the spool writer is busy (an fsync), reads keep coming and pile up into
/// one pending chunk of at most [`PENDING_BYTES`], so the next fsync takes them all at once and
/// the program is not held up by the chunk count; only a full pending chunk waits.
async fn pump_output(
    mut reader: OwnedReadPty,
    spool_tx: mpsc::Sender<Vec<u8>>,
    stdout_tx: Option<mpsc::Sender<Vec<u8>>>,
) {
    let mut buf = vec![0u8; READ_BYTES];
    let mut pending: Vec<u8> = Vec::new();
    let mut open = true;
    while open || !pending.is_empty() {
        tokio::select! {
            read = reader.read(&mut buf), if open && pending.len() < PENDING_BYTES => {
                let n = match read {
                    Ok(0) => { open = false; continue }
                    Ok(n) => n,
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => {
                        open = false;
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the terminal failed");
                        open = false;
                        continue;
                    }
                };
                // The screen waits for a slow terminal like a bare terminal would.
                if let Some(tx) = &stdout_tx {
                    let _ = tx.send(buf[..n].to_vec()).await;
                }
                pending.extend_from_slice(&buf[..n]);
            }
            permit = spool_tx.reserve(), if !pending.is_empty() => match permit {
                Ok(permit) => permit.send(std::mem::take(&mut pending)),
                Err(_) => return,
            },
        }
    }
}

/// The single writer to the PTY: local keystrokes, remote inputs, window changes.
struct Feeder {
    writer: OwnedWritePty,
    spool: Spool,
    status: Status,
    interactive: bool,
}

impl Feeder {
    async fn run(mut self, mut inputs: Inputs, exited: CancellationToken) -> Inputs {
        let mut local = terminal::spawn_stdin_reader(CHUNK_QUEUE);
        let mut local_open = true;
        let mut remote_open = true;
        let mut winch = match self.interactive {
            true => signal(SignalKind::window_change()).ok(),
            false => None,
        };
        loop {
            tokio::select! {
                _ = exited.cancelled() => break,
                next = inputs.next(), if remote_open => match next {
                    Ok(Some(pending)) => self.apply(pending).await,
                    // The person at the desk keeps typing whatever happens to remote input.
                    Ok(None) => remote_open = false,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot record remote inputs; no longer applying them");
                        remote_open = false;
                    }
                },
                chunk = local.recv(), if local_open => match chunk {
                    Some(bytes) => {
                        if let Err(e) = self.write(&bytes).await {
                            tracing::warn!(error = %e, "could not pass local input to the program");
                        }
                    }
                    None => local_open = false,
                },
                Some(()) = recv_winch(&mut winch) => {
                    if let Some(size) = terminal::local_size() {
                        let _ = self.resize(size, ResizeSource::Local).await;
                    }
                }
            }
        }
        inputs
    }

    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes).await?;
        self.writer.flush().await
    }

    async fn resize(&mut self, size: TermSize, source: ResizeSource) -> Result<(), String> {
        self.writer
            .resize(Size::new(size.rows, size.cols))
            .map_err(|e| format!("could not resize the terminal: {e}"))?;
        let entry = AgentPtyResize {
            cols: size.cols,
            rows: size.rows,
            source,
        };
        self.spool
            .append(vec![Draft::new(entry)])
            .await
            .map(|_| ())
            .map_err(|e| format!("could not record the resize: {e}"))
    }

    async fn apply(&mut self, pending: PendingInput) {
        let result = match pending.body() {
            Ok(EntryBody::InputKeys(keys)) => match key_bytes(&keys) {
                Ok(bytes) => self.write(&bytes).await.map_err(write_failed),
                Err(e) => Err(e),
            },
            Ok(EntryBody::InputText(input)) => {
                let line = format!("{}\r", input.text.trim_end_matches(['\r', '\n']));
                self.write(line.as_bytes()).await.map_err(write_failed)
            }
            Ok(EntryBody::InputInterrupt(_)) => self.write(&[ETX]).await.map_err(write_failed),
            Ok(EntryBody::InputResize(r)) => match TermSize::new(r.cols.into(), r.rows.into()) {
                Some(size) => self.resize(size, ResizeSource::Remote).await,
                None => Err(RESIZE_RANGE.into()),
            },
            Err(BodyError::Malformed(e)) => Err(match pending.kind.as_str() {
                kinds::INPUT_RESIZE => RESIZE_RANGE.into(),
                kind => format!("malformed {kind} payload: {e}"),
            }),
            Ok(_) | Err(BodyError::UnknownKind) => Err(format!(
                "the pty adapter does not take {} inputs",
                pending.kind
            )),
        };
        settle(pending, &self.status, result).await;
    }
}

fn write_failed(e: std::io::Error) -> String {
    format!("could not write to the terminal: {e}")
}

/// Why an `input.resize` was refused.
const RESIZE_RANGE: &str = "input.resize needs \"cols\" and \"rows\" between 1 and 10000";

async fn recv_winch(winch: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match winch {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
