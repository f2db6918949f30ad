//! One Claude Code process in stream-json mode: spawned in its own process group with piped
//! stdio; its stdout and stderr lines arrive on one channel, its stdin takes JSON lines.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::control;
use crate::adapter::process::spawn_piped;
use crate::adapter::{AdapterError, AgentSpec};

/// Longest a write to the agent's stdin may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines waiting for the adapter; when full, reading pauses (backpressure).
const LINE_QUEUE: usize = 1024;
/// Bytes of lines waiting for the adapter; when they are taken, reading pauses too.
const QUEUE_BYTES: usize = 64 << 20;
/// Longest line read from the agent. A longer one is skipped to its end, and said so: an agent
/// that prints without end must not take the bridge's memory.
pub(crate) const MAX_LINE_BYTES: usize = 16 << 20;

/// A line the agent printed.
#[derive(Debug)]
pub(crate) enum Out {
    /// On stdout (stream-json).
    Stdout(String),
    /// On stderr (free text).
    Stderr(String),
    /// A line over [`MAX_LINE_BYTES`] was skipped: what to tell.
    Skipped(String),
}

/// The agent's output as the adapter reads it: lines in order, at most [`LINE_QUEUE`] of them
/// and [`QUEUE_BYTES`] of text waiting at once.
#[derive(Debug)]
pub(crate) struct Lines {
    rx: mpsc::Receiver<(Out, OwnedSemaphorePermit)>,
}

impl Lines {
    /// The next line; `None` once both pipes reached EOF.
    pub(crate) async fn recv(&mut self) -> Option<Out> {
        self.rx.recv().await.map(|(out, _room)| out)
    }

    /// The next line if one waits.
    pub(crate) fn try_recv(&mut self) -> Result<Out, TryRecvError> {
        self.rx.try_recv().map(|(out, _room)| out)
    }
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
    pub(crate) out: Lines,
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
        let (tx, rx) = mpsc::channel(LINE_QUEUE);
        let room = Arc::new(Semaphore::new(QUEUE_BYTES));
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(read_lines(stdout, tx.clone(), room.clone(), Out::Stdout));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(read_lines(stderr, tx, room, Out::Stderr));
        }
        let out = Lines { rx };
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

async fn read_lines(
    pipe: impl AsyncRead + Unpin,
    tx: mpsc::Sender<(Out, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
    wrap: fn(String) -> Out,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let out = match read_line(&mut reader, &mut buf, MAX_LINE_BYTES).await {
            Ok(Line::End) => break,
            Ok(Line::Whole) => wrap(String::from_utf8_lossy(&buf).into_owned()),
            Ok(Line::TooLong(bytes)) => Out::Skipped(format!(
                "the agent printed a line of {bytes} bytes, over the {MAX_LINE_BYTES} byte \
                 limit; it is left out"
            )),
            Err(e) => {
                tracing::warn!(error = %e, "reading the agent's output failed");
                break;
            }
        };
        let bytes = buf.len().clamp(1, QUEUE_BYTES) as u32;
        let Ok(held) = room.clone().acquire_many_owned(bytes).await else {
            break;
        };
        if tx.send((out, held)).await.is_err() {
            break;
        }
    }
}

/// What [`read_line`] read.
#[derive(Debug, PartialEq)]
enum Line {
    /// A line, in the buffer without its newline (the last one may have none).
    Whole,
    /// A line of this many bytes, over the limit: skipped, the buffer left empty.
    TooLong(usize),
    /// End of output.
    End,
}

/// Reads one line into `buf` (empty), holding at most `max` bytes of it.
async fn read_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    let mut len = 0;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(match len {
                0 => Line::End,
                n if n > max => Line::TooLong(n),
                _ => Line::Whole,
            });
        }
        let newline = chunk.iter().position(|&b| b == b'\n');
        let part = &chunk[..newline.unwrap_or(chunk.len())];
        len += part.len();
        if len <= max {
            buf.extend_from_slice(part);
        } else {
            buf.clear();
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(if len > max {
                Line::TooLong(len)
            } else {
                Line::Whole
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line `read_line` reads from `data` with at most `max` bytes a line, read through a
    /// buffer of 3 bytes (so lines span reads).
    async fn lines(data: &[u8], max: usize) -> Vec<(Line, String)> {
        let mut reader = BufReader::with_capacity(3, data);
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            let line = read_line(&mut reader, &mut buf, max).await.unwrap();
            if line == Line::End {
                return out;
            }
            out.push((line, String::from_utf8(buf).unwrap()));
        }
    }

    #[tokio::test]
    async fn lines_are_read_whole_within_the_limit_and_a_longer_one_is_skipped_to_its_end() {
        let read = lines(b"one\n\nexactly-8\nthis one is too long\nlast", 9).await;
        assert_eq!(
            read,
            [
                (Line::Whole, "one".into()),
                (Line::Whole, String::new()),
                (Line::Whole, "exactly-8".into()),
                (Line::TooLong(20), String::new()),
                (Line::Whole, "last".into()),
            ]
        );
        assert_eq!(
            lines(b"unended and too long", 4).await,
            [(Line::TooLong(20), String::new())]
        );
    }
}
