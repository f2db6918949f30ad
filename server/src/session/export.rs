//! A session's log exported whole: JSONL (every entry, one JSON object a line, as the API
//! returns entries) or Markdown (the transcript: prompts, assistant text, tool calls with their
//! inputs and results, agent and terminal output, and the session's events).
//!
//! The export covers the log up to the head it had when it began, read page by page
//! (`PageLimit`) and sent as chunks into a bounded channel: memory is one page and a few chunks
//! however long the log, and a reader that stops reading stops the export. Used by the API
//! (`GET /sessions/{id}/export`) and by `moord export`. Calls only the [`LogStore`] trait.

use std::fmt::Write as _;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use moor_protocol::payload::{
    AgentError, AgentExit, AgentOutput, AgentPtyOutput, AgentStart, AgentText, AgentThinking,
    AgentTodos, AgentToolResult, AgentToolUse, AgentUser, BridgeDisconnected, InputText,
    SessionEnded,
};
use moor_protocol::{kinds as k, utc, Entry, EntryBody, Seq};
use tokio::sync::mpsc;

use crate::store::{read_page, LogStore, PageLimit, Range, SessionRow, StoreError};

/// Entries read per page.
const PAGE: u32 = 1000;
/// Bytes gathered before a chunk is sent.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks buffered between the export and its reader.
pub const CHUNKS_IN_FLIGHT: usize = 4;

/// What an export is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One entry a line, each as the API's `Entry` JSON.
    Jsonl,
    /// The transcript for people.
    Markdown,
}

impl Format {
    /// `jsonl` (also `ndjson`) or `markdown` (also `md`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "markdown" | "md" => Some(Self::Markdown),
            _ => None,
        }
    }

    /// The response's content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Jsonl => "application/x-ndjson",
            Self::Markdown => "text/markdown; charset=utf-8",
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Markdown => "md",
        }
    }
}

/// One chunk of an export, or the error that cut it short.
pub type Chunk = Result<Bytes, std::io::Error>;

/// Writes `session`'s log, entries 1 to its head as given, into `out` in `format`, reading
/// pages of at most `page_bytes`. Returns when done, when the reader is gone (`Ok`, nothing
/// more to say) or on a store error, which is also sent as the last chunk so the reader sees an
/// export cut short.
pub async fn export(
    store: Arc<dyn LogStore>,
    session: SessionRow,
    format: Format,
    page_bytes: u64,
    out: mpsc::Sender<Chunk>,
) -> Result<(), StoreError> {
    let mut writer = Writer {
        out,
        buf: String::with_capacity(CHUNK_BYTES),
        md: Markdown::default(),
    };
    if format == Format::Markdown {
        writer.buf.push_str(&Markdown::header(&session));
    }
    let head = session.head_seq;
    let mut cursor = Seq::ZERO;
    while cursor < head {
        let limit = PageLimit {
            count: PAGE,
            bytes: page_bytes,
        };
        let page = match read_page(&*store, session.id, Range::After(cursor), limit).await {
            Ok(page) => page,
            Err(e) => {
                let _ = writer
                    .out
                    .send(Err(std::io::Error::other(format!("export cut short: {e}"))))
                    .await;
                return Err(e);
            }
        };
        let Some(last) = page.entries.last() else {
            break;
        };
        cursor = last.seq;
        for entry in page.entries.iter().filter(|e| e.seq <= head) {
            match format {
                Format::Jsonl => {
                    // An `Entry` is plain JSON with string keys: encoding cannot fail.
                    let line = serde_json::to_string(entry).unwrap_or_default();
                    writer.buf.push_str(&line);
                    writer.buf.push('\n');
                }
                Format::Markdown => writer.md.entry(entry, &mut writer.buf),
            }
            if writer.buf.len() >= CHUNK_BYTES && !writer.flush().await {
                return Ok(());
            }
        }
        if !page.more {
            break;
        }
    }
    if format == Format::Markdown {
        writer.md.close(&mut writer.buf);
    }
    writer.flush().await;
    Ok(())
}

struct Writer {
    out: mpsc::Sender<Chunk>,
    buf: String,
    md: Markdown,
}

impl Writer {
    /// Sends what was gathered; false when the reader is gone.
    async fn flush(&mut self) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        let chunk = std::mem::replace(&mut self.buf, String::with_capacity(CHUNK_BYTES));
        self.out.send(Ok(Bytes::from(chunk))).await.is_ok()
    }
}

/// Which run of output a Markdown export is inside: consecutive output entries share one
/// fenced block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// `agent.output` lines.
    Output,
    /// Terminal output, with escape sequences taken out.
    Terminal,
}

/// The fence of merged output blocks; a line of output that would close it is shown with a
/// zero-width space in front.
const RUN_FENCE: &str = "````";

/// The Markdown rendering of a log, entry by entry.
#[derive(Debug, Default)]
pub struct Markdown {
    run: Option<Run>,
    /// The terminal text of the open run that does not end a line yet.
    terminal: Terminal,
}

impl Markdown {
    /// The title and the session's facts.
    pub fn header(s: &SessionRow) -> String {
        let mut out = format!("# Session {}\n\n", s.name);
        let _ = writeln!(out, "- id: `{}`", s.id);
        let _ = writeln!(out, "- created: {}", utc(s.created_at));
        if let Some(agent) = &s.agent {
            let _ = writeln!(out, "- agent: {}", inline(&agent_line(agent)));
        }
        if let Some(ended) = s.ended_at {
            let _ = writeln!(out, "- ended: {}", utc(ended));
        }
        let _ = writeln!(out, "- entries: {}\n", s.head_seq);
        out
    }

    /// Appends `e`'s rendering to `out`.
    pub fn entry(&mut self, e: &Entry, out: &mut String) {
        let body = EntryBody::decode(&e.kind, &e.payload).ok();
        let run = match (&body, e.kind.as_str()) {
            (Some(EntryBody::AgentOutput(_)), _) => Some(Run::Output),
            (Some(EntryBody::AgentPtyOutput(_)), _) => Some(Run::Terminal),
            // Deltas are folded into the final text that follows them; resizes change nothing
            // a reader of the transcript sees.
            (_, k::AGENT_TEXT_DELTA | k::AGENT_PTY_RESIZE) => return,
            _ => None,
        };
        if self.run != run {
            self.close(out);
            if let Some(r) = run {
                let lang = if r == Run::Terminal { "text" } else { "" };
                let _ = writeln!(out, "{RUN_FENCE}{lang}");
                self.run = Some(r);
            }
        }
        match body {
            Some(EntryBody::AgentOutput(AgentOutput { text, .. })) => {
                fenced_lines(&text, out);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            Some(EntryBody::AgentPtyOutput(AgentPtyOutput { data })) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.as_bytes())
                    .unwrap_or_default();
                let text = self.terminal.feed(&bytes);
                fenced_lines(&text, out);
            }
            Some(body) => self.event(e, body, out),
            None => note(e, &format!("`{}`", e.kind), out),
        }
    }

    /// Ends an open output block.
    pub fn close(&mut self, out: &mut String) {
        if self.run.take().is_some() {
            let rest = std::mem::take(&mut self.terminal.line);
            if !rest.is_empty() {
                fenced_lines(&rest, out);
                out.push('\n');
            }
            self.terminal = Terminal::default();
            let _ = writeln!(out, "{RUN_FENCE}\n");
        }
    }

    fn event(&mut self, e: &Entry, body: EntryBody, out: &mut String) {
        match body {
            EntryBody::InputText(InputText { text }) => {
                let _ = write!(out, "### {} · {}\n\n{text}\n\n", e.author, utc(e.ts));
            }
            EntryBody::AgentUser(AgentUser { text, .. }) => {
                let _ = write!(out, "### User · {}\n\n{text}\n\n", utc(e.ts));
            }
            EntryBody::AgentText(AgentText { text, .. }) => {
                let _ = write!(out, "### Assistant · {}\n\n{text}\n\n", utc(e.ts));
            }
            EntryBody::AgentThinking(AgentThinking { text, .. }) => {
                let _ = write!(
                    out,
                    "<details><summary>Thinking</summary>\n\n{text}\n\n</details>\n\n"
                );
            }
            EntryBody::AgentToolUse(AgentToolUse {
                id, name, input, ..
            }) => {
                let input = serde_json::to_string_pretty(&input).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "**Tool call: {}** (`{}`)\n",
                    inline(&name),
                    inline(&id)
                );
                fenced("json", &input, out);
            }
            EntryBody::AgentToolResult(AgentToolResult {
                tool_use_id,
                is_error,
                summary,
                bytes,
                truncated,
            }) => {
                let what = if is_error {
                    "Tool error"
                } else {
                    "Tool result"
                };
                let _ = writeln!(out, "**{what}** (`{}`)\n", inline(&tool_use_id));
                fenced("", &summary, out);
                if truncated {
                    let _ = writeln!(out, "_(cut short; {bytes} bytes in full)_\n");
                }
            }
            EntryBody::AgentTodos(AgentTodos { todos }) => {
                out.push_str("**Todos**\n\n");
                for t in todos {
                    let mark = if t.status == "completed" { "x" } else { " " };
                    let _ = writeln!(out, "- [{mark}] {} ({})", inline(&t.content), t.status);
                }
                out.push('\n');
            }
            EntryBody::AgentStart(AgentStart { command, cwd, .. }) => {
                let cwd = cwd
                    .map(|c| format!(" in `{}`", inline(&c)))
                    .unwrap_or_default();
                note(
                    e,
                    &format!("agent started: `{}`{cwd}", inline(&command.join(" "))),
                    out,
                );
            }
            EntryBody::AgentExit(AgentExit { code, signal, .. }) => {
                let how = match (code, signal) {
                    (Some(c), _) => format!("agent exited with code {c}"),
                    (None, Some(s)) => format!("agent killed by signal {s}"),
                    (None, None) => "agent exited".to_owned(),
                };
                note(e, &how, out);
            }
            EntryBody::AgentError(AgentError { message, .. }) => {
                note(e, &format!("agent error: {}", inline(&message)), out)
            }
            EntryBody::BridgeDisconnected(BridgeDisconnected { reason, .. }) => {
                let why = reason
                    .map(|r| format!(": {}", inline(&r)))
                    .unwrap_or_default();
                note(e, &format!("bridge disconnected{why}"), out);
            }
            EntryBody::SessionEnded(SessionEnded { reason }) => {
                let why = reason
                    .map(|r| format!(": {}", inline(&r)))
                    .unwrap_or_default();
                note(e, &format!("session ended{why}"), out);
            }
            other => note(e, &format!("`{}`", other.kind()), out),
        }
    }
}

/// A one-line event: `_2026-12-01 19:00:00 UTC · agent started_`.
fn note(e: &Entry, what: &str, out: &mut String) {
    let _ = write!(out, "_{} · #{} · {what}_\n\n", utc(e.ts), e.seq);
}

fn agent_line(agent: &moor_protocol::bridge::AgentInfo) -> String {
    serde_json::to_string(agent).unwrap_or_default()
}

/// Text for one line of Markdown: newlines and backticks cannot break out of it.
fn inline(s: &str) -> String {
    s.replace(['\n', '\r'], " ").replace('`', "'")
}

/// `text` in a fenced block whose fence is longer than any backtick run inside it.
fn fenced(lang: &str, text: &str, out: &mut String) {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = write!(out, "{fence}{lang}\n{text}");
    if !text.ends_with('\n') {
        out.push('\n');
    }
    let _ = write!(out, "{fence}\n\n");
}

/// Lines of output inside a merged block: a line that would close the block's fence gets a
/// zero-width space in front. Each call starts a line.
fn fenced_lines(text: &str, out: &mut String) {
    for line in text.split_inclusive('\n') {
        if line.trim_start_matches(' ').starts_with("```") {
            out.push('\u{200b}');
        }
        out.push_str(line);
    }
}

/// Terminal bytes to plain text: escape sequences (CSI, OSC, two-byte) and control characters
/// other than newline and tab taken out, `\r\n` and lone `\r` made newlines. A sequence cut
/// between two entries is followed across them.
#[derive(Debug, Default)]
struct Terminal {
    state: Scan,
    /// Bytes of a UTF-8 character cut between two entries.
    partial: Vec<u8>,
    /// Text after the last newline, held until the line ends (or the run does).
    line: String,
    /// The previous character was a carriage return.
    cr: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Scan {
    #[default]
    Text,
    /// After ESC.
    Escape,
    /// Inside `ESC [`, until a final byte.
    Csi,
    /// Inside `ESC ]`, until BEL or `ESC \`.
    Osc,
    /// ESC inside an OSC.
    OscEscape,
}

/// Most bytes of a line held back: a terminal line longer than this is written as it is.
const MAX_LINE_BYTES: usize = 64 * 1024;

impl Terminal {
    /// The complete lines `bytes` finish (each ending in a newline).
    fn feed(&mut self, bytes: &[u8]) -> String {
        let mut data = std::mem::take(&mut self.partial);
        data.extend_from_slice(bytes);
        let (text, rest) = match std::str::from_utf8(&data) {
            Ok(t) => (t.to_owned(), Vec::new()),
            Err(e) if e.error_len().is_none() => {
                let cut = e.valid_up_to();
                (
                    String::from_utf8_lossy(&data[..cut]).into_owned(),
                    data[cut..].to_vec(),
                )
            }
            Err(_) => (String::from_utf8_lossy(&data).into_owned(), Vec::new()),
        };
        self.partial = rest;
        let mut done = String::new();
        for c in text.chars() {
            match (self.state, c) {
                (Scan::Text, '\u{1b}') => self.state = Scan::Escape,
                (Scan::Text, '\r') => {
                    self.cr = true;
                    continue;
                }
                (Scan::Text, '\n') => {
                    done.push_str(&std::mem::take(&mut self.line));
                    done.push('\n');
                }
                (Scan::Text, c) if c == '\t' || !c.is_control() => {
                    if self.cr {
                        // A carriage return without a newline: the line is written over; keep
                        // what was there as its own line.
                        done.push_str(&std::mem::take(&mut self.line));
                        done.push('\n');
                    }
                    self.line.push(c);
                }
                (Scan::Text, _) => {}
                (Scan::Escape, '[') => self.state = Scan::Csi,
                (Scan::Escape, ']') => self.state = Scan::Osc,
                (Scan::Escape, _) => self.state = Scan::Text,
                (Scan::Csi, c) if ('\u{40}'..='\u{7e}').contains(&c) => self.state = Scan::Text,
                (Scan::Csi, _) => {}
                (Scan::Osc, '\u{07}') => self.state = Scan::Text,
                (Scan::Osc, '\u{1b}') => self.state = Scan::OscEscape,
                (Scan::Osc, _) => {}
                (Scan::OscEscape, _) => self.state = Scan::Text,
            }
            self.cr = false;
            if self.line.len() >= MAX_LINE_BYTES {
                done.push_str(&std::mem::take(&mut self.line));
                done.push('\n');
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(seq: u64, kind: &str, payload: serde_json::Value) -> Entry {
        Entry {
            seq: Seq(seq),
            ts: 0,
            kind: kind.into(),
            author: "bridge".into(),
            payload,
        }
    }

    fn render(entries: &[Entry]) -> String {
        let mut md = Markdown::default();
        let mut out = String::new();
        for e in entries {
            md.entry(e, &mut out);
        }
        md.close(&mut out);
        out
    }

    #[test]
    fn tool_calls_and_results_are_shown_with_their_input_and_summary() {
        let out = render(&[
            entry(1, k::AGENT_TEXT, json!({"text": "Let me look."})),
            entry(
                2,
                k::AGENT_TOOL_USE,
                json!({"id": "t1", "name": "Bash", "input": {"command": "ls ```"}}),
            ),
            entry(
                3,
                k::AGENT_TOOL_RESULT,
                json!({"tool_use_id": "t1", "summary": "a\n````\nb", "bytes": 9000, "truncated": true}),
            ),
        ]);
        assert!(out.contains("### Assistant"), "{out}");
        assert!(out.contains("Let me look."), "{out}");
        assert!(out.contains("**Tool call: Bash** (`t1`)"), "{out}");
        assert!(out.contains("\"command\": \"ls ```\""), "{out}");
        // The result holds a run of four backticks: its fence is longer.
        assert!(out.contains("`````\na\n````\nb\n`````"), "{out}");
        assert!(out.contains("9000 bytes in full"), "{out}");
    }

    #[test]
    fn terminal_output_is_merged_into_one_block_without_escape_sequences() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let out = render(&[
            entry(
                1,
                k::AGENT_PTY_OUTPUT,
                json!({"data": b64("\u{1b}[1;32mhel")}),
            ),
            entry(
                2,
                k::AGENT_PTY_OUTPUT,
                json!({"data": b64("lo\u{1b}[0m\r\nwor")}),
            ),
            entry(
                3,
                k::AGENT_PTY_OUTPUT,
                json!({"data": b64("ld\u{1b}]0;title\u{7}\r\n```\r\n")}),
            ),
            entry(4, k::SESSION_ENDED, json!({"reason": "agent exited"})),
        ]);
        assert_eq!(
            out,
            "````text\nhello\nworld\n\u{200b}```\n````\n\n_1970-01-01 00:00:00 UTC · #4 · session ended: agent exited_\n\n",
        );
    }

    #[test]
    fn deltas_are_left_out_and_unknown_kinds_are_named() {
        let out = render(&[
            entry(1, k::AGENT_TEXT_DELTA, json!({"text": "partial"})),
            entry(2, "x.custom", json!({})),
        ]);
        assert!(!out.contains("partial"), "{out}");
        assert!(out.contains("`x.custom`"), "{out}");
    }

    #[test]
    fn formats_parse_by_name() {
        assert_eq!(Format::parse("jsonl"), Some(Format::Jsonl));
        assert_eq!(Format::parse("md"), Some(Format::Markdown));
        assert_eq!(Format::parse("html"), None);
    }
}
