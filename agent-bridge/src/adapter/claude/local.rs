//! The person at `moor`'s terminal in claude mode: a typed line is a prompt, `y`/`n` answers a
//! pending permission request, EOF (Ctrl-D) lets the agent finish and exit.

use moor_protocol::payload::AgentUser;
use tokio::sync::mpsc;

use super::decide::Decision;
use super::process::Process;
use super::Run;
use crate::adapter::{terminal, AdapterError};
use crate::spool::Draft;

impl Run {
    /// A line typed at `moor`'s terminal: y/n for a pending request, else a prompt. `None`
    /// means EOF: the person is done, let the agent finish and exit.
    pub(super) async fn local(
        &mut self,
        process: &mut Process,
        line: Option<String>,
    ) -> Result<(), AdapterError> {
        let Some(line) = line else {
            self.stopping = true;
            process.close_stdin();
            return Ok(());
        };
        let text = line.trim();
        let answer = match text.to_ascii_lowercase().as_str() {
            "y" | "yes" => Some(true),
            "n" | "no" => Some(false),
            _ => None,
        };
        let first = self.pending.keys().next().cloned();
        let result = match (answer, first) {
            (Some(allow), Some(id)) => self.decide(process, &Decision::local(id, allow)).await,
            _ if text.is_empty() => Ok(()),
            _ => {
                let entry = AgentUser {
                    text: text.to_owned(),
                    source: Some("local".into()),
                };
                self.record(vec![Draft::new(entry)]).await?;
                self.prompt(process, text).await
            }
        };
        if let Err(e) = result {
            self.status.note(e);
        }
        Ok(())
    }
}

/// Lines typed at `moor`'s terminal (cooked mode: the terminal does the line editing).
#[derive(Debug)]
pub(super) struct LocalLines {
    rx: mpsc::Receiver<Vec<u8>>,
    buf: Vec<u8>,
    eof: bool,
}

impl LocalLines {
    pub(super) fn new() -> Self {
        Self {
            rx: terminal::spawn_stdin_reader(16),
            buf: Vec::new(),
            eof: false,
        }
    }

    /// The next line, `None` once at EOF (reported once), pending after that.
    pub(super) async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            if self.eof {
                return std::future::pending().await;
            }
            match self.rx.recv().await {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None => {
                    self.eof = true;
                    return None;
                }
            }
        }
    }
}

pub(super) async fn next_local(local: &mut Option<LocalLines>) -> Option<String> {
    match local {
        Some(lines) => lines.next().await,
        None => std::future::pending().await,
    }
}
