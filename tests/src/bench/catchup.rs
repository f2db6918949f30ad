//! Catch-up as a client sees it on the wire: a whole log read over SSE or paged HTTP, plain or
//! gzip (`Accept-Encoding: gzip`), with the time and the bytes received per entry next to the
//! bytes of the entries' JSON and of their SSE events.

use std::io::{Read, Write};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::moord::Moord;
use super::{entry, next_frame, send};
use crate::ws::Ws;
use moor_protocol::bridge::{BridgeToServer, ServerToBridge};

/// One catch-up.
#[derive(Debug, Clone, Copy, Default)]
pub struct CatchUp {
    /// Seconds from the request to the last entry decoded.
    pub secs: f64,
    /// Entries read.
    pub entries: u64,
    /// Bytes received after the response head (SSE: with the chunked framing; paged: the
    /// bodies).
    pub wire: u64,
    /// Bytes of the entries' JSON (each `data:` line's value, or each page's share).
    pub json: u64,
    /// Bytes of the entries' SSE events (`id:`, `event:`, `data:` lines and the blank line);
    /// zero for paged reads.
    pub events: u64,
    /// CPU seconds `moord` spent from the request to the last entry (user and system; less
    /// noisy than `secs` on a shared machine).
    pub server_cpu: f64,
}

impl CatchUp {
    /// Bytes on the wire per entry.
    pub fn wire_per_entry(&self) -> f64 {
        self.wire as f64 / self.entries.max(1) as f64
    }
}

/// A new session holding `n` entries (200 bytes each), sent in frames of 1,000, each frame
/// acked before the next: its name, and its bridge, still connected (its log ends at `n + 1`,
/// with `bridge.connected` first).
pub async fn fill(moord: &Moord, n: u64) -> Result<(String, Ws)> {
    let session = format!("catchup-{}", uuid::Uuid::new_v4());
    let mut ws = moord.bridge(&session).await?;
    let mut sent = 0;
    while sent < n {
        let k = 1000.min(n - sent);
        send(
            &mut ws,
            &BridgeToServer::Entries {
                entries: (sent + 1..=sent + k).map(|i| entry(i, 0)).collect(),
            },
        )
        .await?;
        sent += k;
        loop {
            if let ServerToBridge::Ack { producer_seq } = next_frame(&mut ws).await? {
                if producer_seq == sent {
                    break;
                }
            }
        }
    }
    Ok((session, ws))
}

/// Reads `session` over SSE from 0 until the event with id `last`, asking for gzip or not.
pub async fn sse(moord: &Moord, session: &str, last: u64, gzip: bool) -> Result<CatchUp> {
    let cpu = moord.cpu_secs()?;
    let start = Instant::now();
    let mut s = TcpStream::connect(&moord.addr).await?;
    let req = format!(
        "GET /api/v1/sessions/{session}/events?after=0 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n{}\r\n",
        moord.addr,
        moord.token,
        if gzip { "Accept-Encoding: gzip\r\n" } else { "" },
    );
    s.write_all(req.as_bytes()).await?;
    let mut r = BufReader::with_capacity(64 * 1024, s);
    let mut line = String::new();
    let mut encoded = false;
    loop {
        line.clear();
        ensure!(r.read_line(&mut line).await? > 0, "sse headers never ended");
        if line == "\r\n" {
            break;
        }
        if line.starts_with("HTTP/1.1") && !line.contains("200") {
            bail!("sse refused: {line}");
        }
        encoded |= line.eq_ignore_ascii_case("content-encoding: gzip\r\n");
    }
    ensure!(encoded == gzip, "asked for gzip: {gzip}, got it: {encoded}");
    let mut out = CatchUp::default();
    let mut sink = Events::default();
    let mut decoder = gzip.then(|| flate2::write::GzDecoder::new(Vec::new()));
    let mut chunked = Chunked::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        ensure!(n > 0, "sse stream ended early");
        out.wire += n as u64;
        let body = chunked.feed(&buf[..n])?;
        let done = match &mut decoder {
            None => sink.feed(&body, last, &mut out),
            Some(d) => {
                d.write_all(&body)?;
                d.flush()?;
                let plain = std::mem::take(d.get_mut());
                sink.feed(&plain, last, &mut out)
            }
        };
        if done {
            out.secs = start.elapsed().as_secs_f64();
            out.server_cpu = moord.cpu_secs()? - cpu;
            return Ok(out);
        }
    }
}

/// The body of a chunked HTTP/1.1 response, taken apart as it arrives.
#[derive(Debug, Default)]
struct Chunked {
    carry: Vec<u8>,
    /// Bytes left in the current chunk's data (plus its closing CRLF).
    left: usize,
}

impl Chunked {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        self.carry.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(self.carry.len());
        let mut at = 0;
        loop {
            if self.left > 0 {
                let take = self.left.min(self.carry.len() - at);
                // The last two bytes of a chunk are its CRLF, not data.
                let data = take.min(self.left.saturating_sub(2));
                out.extend_from_slice(&self.carry[at..at + data]);
                at += take;
                self.left -= take;
                if self.left > 0 {
                    break;
                }
            }
            let Some(eol) = self.carry[at..].windows(2).position(|w| w == b"\r\n") else {
                break;
            };
            let size = std::str::from_utf8(&self.carry[at..at + eol])?;
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .context("chunk size")?;
            at += eol + 2;
            ensure!(size > 0, "the stream ended");
            self.left = size + 2;
        }
        self.carry.drain(..at);
        Ok(out)
    }
}

/// SSE events cut out of a decoded stream.
#[derive(Debug, Default)]
struct Events {
    carry: Vec<u8>,
}

impl Events {
    /// Counts the complete events in `bytes` (and what came before); true once the event with
    /// id `last` is complete.
    fn feed(&mut self, bytes: &[u8], last: u64, out: &mut CatchUp) -> bool {
        self.carry.extend_from_slice(bytes);
        let mut at = 0;
        let mut done = false;
        while let Some(end) = self.carry[at..].windows(2).position(|w| w == b"\n\n") {
            let event = &self.carry[at..at + end + 2];
            at += end + 2;
            let mut id = None;
            let mut json = 0;
            for line in event.split(|&b| b == b'\n') {
                if let Some(v) = line.strip_prefix(b"id: ") {
                    id = std::str::from_utf8(v)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok());
                } else if let Some(v) = line.strip_prefix(b"data: ") {
                    json += v.len();
                }
            }
            if let Some(id) = id {
                out.entries += 1;
                out.json += json as u64;
                out.events += event.len() as u64;
                done |= id == last;
            }
        }
        self.carry.drain(..at);
        done
    }
}

/// Reads a whole log over paged HTTP (`GET /entries?after=N&limit=1000`, one keep-alive
/// connection), asking for gzip or not.
pub async fn paged(moord: &Moord, session: &str, gzip: bool) -> Result<CatchUp> {
    #[derive(serde::Deserialize)]
    struct Page {
        entries: Vec<Seqd>,
        has_more: bool,
    }
    #[derive(serde::Deserialize)]
    struct Seqd {
        seq: u64,
    }
    let client = reqwest::Client::new();
    let mut out = CatchUp::default();
    let mut after = 0;
    let cpu = moord.cpu_secs()?;
    let start = Instant::now();
    for _ in 0..10_000 {
        let mut req = client
            .get(format!(
                "http://{}/api/v1/sessions/{session}/entries?after={after}&limit=1000",
                moord.addr
            ))
            .bearer_auth(&moord.token);
        if gzip {
            req = req.header("accept-encoding", "gzip");
        }
        let resp = req.send().await?.error_for_status()?;
        let encoded = resp
            .headers()
            .get("content-encoding")
            .is_some_and(|v| v == "gzip");
        ensure!(encoded == gzip, "asked for gzip: {gzip}, got it: {encoded}");
        let body = resp.bytes().await?;
        out.wire += body.len() as u64;
        let page: Page = if gzip {
            let mut plain = Vec::with_capacity(body.len() * 8);
            flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut plain)?;
            serde_json::from_slice(&plain)?
        } else {
            serde_json::from_slice(&body)?
        };
        out.entries += page.entries.len() as u64;
        after = page.entries.last().map_or(after, |e| e.seq);
        if !page.has_more {
            out.secs = start.elapsed().as_secs_f64();
            out.server_cpu = moord.cpu_secs()? - cpu;
            return Ok(out);
        }
    }
    bail!("the log did not end within 10,000 pages")
}
