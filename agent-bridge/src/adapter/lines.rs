//! The `lines` adapter: the agent runs with piped stdin/stdout/stderr; every output line becomes
//! an `agent.output` entry and every `input.text` input is written to its stdin.
//!
//! Output is spooled by one writer task that takes whatever lines have queued up while the
//! previous fsync ran, so a chatty agent costs one fsync per burst, not one per line. Stdin is
//! written by its own task, so an agent that stops reading its input cannot stall its output.

use std::time::Duration;

use moor_protocol::kinds;
use moor_protocol::payload::{AgentOutput, OutputStream};
use moor_protocol::{BodyError, EntryBody};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::process::{join_writer, spawn_piped, spool_exit, wait_for_exit};
use super::{AdapterDone, AdapterError, AdapterIo, AgentSpec};
use crate::inputs::Inputs;
use crate::spool::{Draft, Spool, SpoolError};
use crate::status::Status;

/// Longest line kept whole; longer ones are split into several entries.
pub const MAX_LINE_BYTES: usize = 32 * 1024;
/// Lines waiting for the spool writer; when full, reading the pipes pauses (backpressure).
const LINE_QUEUE: usize = 8192;
/// Most lines per fsync.
const LINES_PER_BATCH: usize = 4096;
/// After the agent exits, how long its pipes may stay open (a grandchild holding them).
const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// A started `lines` agent.
#[derive(Debug)]
pub struct LinesAgent {
    child: Child,
    pid: u32,
    spec: AgentSpec,
}

impl LinesAgent {
    /// Spawn the agent with piped stdio in its own process group.
    pub fn start(spec: &AgentSpec) -> Result<Self, AdapterError> {
        let (child, pid) = spawn_piped(spec, &spec.command, false)?;
        Ok(Self {
            child,
            pid,
            spec: spec.clone(),
        })
    }

    /// The agent's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Run until the agent exits and everything it wrote, then `agent.exit`, is spooled.
    pub async fn run(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        let Self {
            mut child,
            pid,
            spec,
        } = self;
        let AdapterIo {
            spool,
            inputs,
            mut signals,
            status,
        } = io;
        let missing = || AdapterError::Io(std::io::Error::other("agent pipes missing"));
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            return Err(missing());
        };

        let start = spec.start_entry(pid, super::AdapterKind::Lines);
        spool.append(vec![Draft::new(start)]).await?;

        let (line_tx, line_rx) = mpsc::channel(LINE_QUEUE);
        let mut readers = JoinSet::new();
        readers.spawn(read_lines(stdout, OutputStream::Stdout, line_tx.clone()));
        readers.spawn(read_lines(stderr, OutputStream::Stderr, line_tx));
        let mut writer = tokio::spawn(spool_lines(line_rx, spool.clone()));
        let exited = CancellationToken::new();
        let feeder = tokio::spawn(feed_inputs(stdin, inputs, status, exited.clone()));

        let exit_wait =
            wait_for_exit(&mut child, pid, &mut signals, &mut writer, "agent output").await?;
        exited.cancel();
        // What it left running dies with it (and lets go of the output pipes).
        let stopped = super::tree::stop_leftovers(spec.options.stop_grace).await;
        if let Some(err) = exit_wait.spool_failure {
            return Err(err.into());
        }
        // Lines written just before exit may still be in the pipes; read them to EOF, but a
        // grandchild holding the pipes open must not keep the session alive forever.
        let drain = async { while readers.join_next().await.is_some() {} };
        if tokio::time::timeout(PIPE_DRAIN, drain).await.is_err() {
            tracing::warn!("agent output pipes still open after exit; no longer reading them");
            readers.abort_all();
            while readers.join_next().await.is_some() {}
        }
        join_writer(writer, &exit_wait).await?;
        let done = spool_exit(&spool, &exit_wait, stopped, feeder).await?;
        Ok(done)
    }
}

/// Splits a byte stream into lines of at most `max` bytes, never cutting a UTF-8 sequence.
#[derive(Debug)]
struct LineSplitter {
    pending: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    fn new(max: usize) -> Self {
        Self {
            pending: Vec::new(),
            max: max.max(4),
        }
    }

    /// Feed a chunk; complete lines (without `\n`) are pushed to `out`.
    fn push(&mut self, mut chunk: &[u8], out: &mut Vec<Vec<u8>>) {
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.pending.extend_from_slice(&chunk[..i]);
                    self.split_long(out);
                    out.push(std::mem::take(&mut self.pending));
                    chunk = &chunk[i + 1..];
                }
                None => {
                    self.pending.extend_from_slice(chunk);
                    chunk = &[];
                }
            }
            self.split_long(out);
        }
    }

    /// Emit `max`-sized pieces while the pending line is longer than `max`.
    fn split_long(&mut self, out: &mut Vec<Vec<u8>>) {
        while self.pending.len() > self.max {
            let mut cut = self.max;
            // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is split.
            while cut > 0 && self.pending[cut] & 0xC0 == 0x80 {
                cut -= 1;
            }
            if cut == 0 {
                cut = self.max;
            }
            let rest = self.pending.split_off(cut);
            out.push(std::mem::replace(&mut self.pending, rest));
        }
    }

    /// The unterminated last line, if any.
    fn finish(self) -> Option<Vec<u8>> {
        (!self.pending.is_empty()).then_some(self.pending)
    }
}

fn output(stream: OutputStream, line: &[u8]) -> Draft {
    Draft::new(AgentOutput {
        stream,
        text: String::from_utf8_lossy(line).into_owned(),
    })
}

async fn read_lines(pipe: impl AsyncRead + Unpin, stream: OutputStream, tx: mpsc::Sender<Draft>) {
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut splitter = LineSplitter::new(MAX_LINE_BYTES);
    let mut lines = Vec::new();
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) => {
                tracing::warn!(error = %e, ?stream, "reading agent output failed");
                break;
            }
        };
        let n = chunk.len();
        splitter.push(chunk, &mut lines);
        reader.consume(n);
        for line in lines.drain(..) {
            if tx.send(output(stream, &line)).await.is_err() {
                return;
            }
        }
    }
    if let Some(last) = splitter.finish() {
        let _ = tx.send(output(stream, &last)).await;
    }
}

/// Spool lines in batches: everything that queued up during the previous fsync goes in the next.
async fn spool_lines(mut rx: mpsc::Receiver<Draft>, spool: Spool) -> Result<(), SpoolError> {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < LINES_PER_BATCH {
            match rx.try_recv() {
                Ok(draft) => batch.push(draft),
                Err(_) => break,
            }
        }
        spool.append(batch).await?;
    }
    Ok(())
}

/// Write `input.text` inputs to the agent's stdin, in order, until the agent exits.
async fn feed_inputs(
    mut stdin: ChildStdin,
    mut inputs: Inputs,
    status: Status,
    exited: CancellationToken,
) -> Inputs {
    loop {
        let pending = tokio::select! {
            _ = exited.cancelled() => break,
            next = inputs.next() => match next {
                Ok(Some(pending)) => pending,
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "cannot record remote inputs; no longer applying them");
                    break;
                }
            },
        };
        let text = match pending.body() {
            Ok(EntryBody::InputText(input)) => input.text,
            Err(BodyError::Malformed(_)) if pending.kind == kinds::INPUT_TEXT => {
                report(
                    pending
                        .failed("input.text payload has no \"text\" string")
                        .await,
                );
                continue;
            }
            _ => {
                let reason = format!("the lines adapter does not take {} inputs", pending.kind);
                report(pending.failed(reason).await);
                continue;
            }
        };
        let mut bytes = text.into_bytes();
        if bytes.last() != Some(&b'\n') {
            bytes.push(b'\n');
        }
        let written = tokio::select! {
            _ = exited.cancelled() => Err(std::io::Error::other("the agent exited while the input was being written (it may have been partly written)")),
            r = async { stdin.write_all(&bytes).await?; stdin.flush().await } => r,
        };
        match written {
            Ok(()) => {
                status.input_outcome(&pending, None);
                report(pending.applied().await)
            }
            Err(e) => report(
                pending
                    .failed(format!("could not write to the agent's stdin: {e}"))
                    .await,
            ),
        }
    }
    inputs
}

fn report(result: Result<(), crate::inputs::LedgerError>) {
    if let Err(e) = result {
        tracing::error!(error = %e, "could not record an input's outcome");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], max: usize) -> Vec<String> {
        let mut splitter = LineSplitter::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            splitter.push(chunk, &mut out);
        }
        out.extend(splitter.finish());
        out.into_iter()
            .map(|l| String::from_utf8(l).unwrap())
            .collect()
    }

    #[test]
    fn lines_are_split_across_chunks_without_newlines() {
        assert_eq!(split(&[b"a\nb", b"c\n\nd"], 100), ["a", "bc", "", "d"]);
        assert_eq!(split(&[b"x\n"], 100), ["x"]);
    }

    #[test]
    fn long_lines_are_cut_at_character_boundaries() {
        let line = "é".repeat(10); // 20 bytes
        let pieces = split(&[line.as_bytes(), b"\n"], 5);
        assert_eq!(pieces.concat(), line);
        assert!(
            pieces.iter().all(|p| p.len() <= 5 && !p.is_empty()),
            "{pieces:?}"
        );
    }
}
