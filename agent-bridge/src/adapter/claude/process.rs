//! One Claude Code process in stream-json mode: spawned in its own process group with piped
//! stdio; its stdout and stderr lines arrive on one channel, its stdin takes JSON lines.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use super::control;
use crate::adapter::process::spawn_piped;
use crate::adapter::{AdapterError, AgentSpec};

/// Longest a write to the agent's stdin may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines waiting for the adapter; when full, reading pauses (backpressure).
const LINE_QUEUE: usize = 1024;

/// A line the agent printed.
#[derive(Debug)]
pub(crate) enum Out {
    /// On stdout (stream-json).
    Stdout(String),
    /// On stderr (free text).
    Stderr(String),
}

/// A running Claude Code.
#[derive(Debug)]
pub(crate) struct Process {
    /// The child.
    pub(crate) child: Child,
    /// Its pid (and process group id).
    pub(crate) pid: u32,
    /// The command line it runs (the person's, with the adapter's flags and `--resume`).
    pub(crate) argv: Vec<String>,
    stdin: Option<ChildStdin>,
    /// Its output; closes when both pipes reached EOF.
    pub(crate) out: mpsc::Receiver<Out>,
    /// `out` has closed.
    pub(crate) out_closed: bool,
}

impl Process {
    /// Start `spec.command` in structured mode, resuming `resume` when given.
    pub(crate) fn spawn(spec: &AgentSpec, resume: Option<&str>) -> Result<Self, AdapterError> {
        Self::spawn_argv(spec, control::command_line(&spec.command, resume))
    }

    /// Start `argv` (another structured agent's full command line) in `spec.cwd`, piped the same
    /// way.
    pub(crate) fn spawn_argv(spec: &AgentSpec, argv: Vec<String>) -> Result<Self, AdapterError> {
        let (mut child, pid) = spawn_piped(spec, &argv, true)?;
        let (tx, out) = mpsc::channel(LINE_QUEUE);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(read_lines(stdout, tx.clone(), Out::Stdout));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(read_lines(stderr, tx, Out::Stderr));
        }
        let stdin = child.stdin.take();
        Ok(Self {
            child,
            pid,
            argv,
            stdin,
            out,
            out_closed: false,
        })
    }

    /// Write one JSON line to the agent's stdin.
    pub(crate) async fn send(&mut self, line: &str) -> Result<(), String> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err("the agent's input is closed".into());
        };
        let write = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("could not write to the agent's stdin: {e}")),
            Err(_) => Err("the agent did not read its input for 10 s".into()),
        }
    }

    /// Close the agent's stdin: it finishes the current turn and exits.
    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }
}

async fn read_lines(pipe: impl AsyncRead + Unpin, tx: mpsc::Sender<Out>, wrap: fn(String) -> Out) {
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => break,
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                let line = String::from_utf8_lossy(&buf).into_owned();
                if tx.send(wrap(line)).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the agent's output failed");
                break;
            }
        }
    }
}
