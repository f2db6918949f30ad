//! What the benchmark binaries share: a hand-driven bridge that pipelines entries to durable
//! ack, a paced sender, a raw SSE reader cheap enough not to be the bottleneck, and the
//! statistics (medians over runs, percentiles).
//!
//! Timed entries carry their send time in their text (µs since the run's epoch, the first 16
//! characters), so a reader computes the delivery latency from the entry alone.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, Hello, ServerToBridge};
use moor_protocol::{NewEntry, ProducerId, Seq, PROTOCOL_VERSION};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::ws::{connect, Ws};

pub mod catchup;
pub mod fanout;
pub mod limit;
pub mod moord;
pub mod quiet;

/// Hard limit on any single wait in a benchmark.
pub const GUARD: Duration = Duration::from_secs(120);

/// The value after `name` on the command line.
pub fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// The whole number after `name` on the command line (at least 1), else `default`.
pub fn count_arg<T>(name: &str, default: T) -> Result<T>
where
    T: std::str::FromStr + Ord + From<u8>,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(arg(name)
        .map(|s| s.parse())
        .transpose()
        .with_context(|| format!("{name} takes a whole number"))?
        .unwrap_or(default)
        .max(T::from(1)))
}

/// `--runs N` (at least 1), else `default`.
pub fn runs(default: usize) -> Result<usize> {
    count_arg("--runs", default)
}

/// The median of `v` (the upper one of an even count). `v` must not be empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The `p` quantile of sorted latencies in µs, in ms.
pub fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// p50 and p99 of delivery latencies, in ms.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Latency {
    /// The percentiles of `v` (µs).
    pub fn of(mut v: Vec<u64>) -> Self {
        v.sort_unstable();
        Self {
            p50: percentile_ms(&v, 0.5),
            p99: percentile_ms(&v, 0.99),
        }
    }
}

/// A bridge connection to the moord at `addr` (`host:port`): `Hello`, then `Welcome`.
pub async fn bridge(addr: &str, token: &str, session: &str) -> Result<Ws> {
    let mut ws = connect(&format!("ws://{addr}/api/v1/bridge"), Some(token)).await?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        session: session.into(),
        producer: ProducerId::new(),
        last_applied_input: Seq(0),
        uncertain_inputs: vec![],
        continues: None,
        agent: AgentInfo {
            command: vec!["bench".into()],
            adapter: "bench".into(),
            ..Default::default()
        },
    };
    send(&mut ws, &BridgeToServer::Hello(hello)).await?;
    match next_frame(&mut ws).await? {
        ServerToBridge::Welcome(_) => Ok(ws),
        other => bail!("expected welcome, got {other:?}"),
    }
}

/// Sends one bridge frame.
pub async fn send(ws: &mut Ws, frame: &BridgeToServer) -> Result<()> {
    ws.send(Message::Text(serde_json::to_string(frame)?.into()))
        .await?;
    Ok(())
}

/// The next frame that is not a heartbeat (bounded by [`GUARD`]).
pub async fn next_frame(ws: &mut Ws) -> Result<ServerToBridge> {
    loop {
        match tokio::time::timeout(GUARD, ws.next())
            .await?
            .context("socket closed")??
        {
            Message::Text(t) => match serde_json::from_str(&t)? {
                ServerToBridge::Heartbeat => {}
                f => return Ok(f),
            },
            Message::Close(c) => bail!("closed: {c:?}"),
            _ => {}
        }
    }
}

/// A 200-byte entry (as stored) whose text starts with `sent_us` (0: untimed).
pub fn entry(pseq: u64, sent_us: u64) -> NewEntry {
    let text = format!("{sent_us:>16} {}", "x".repeat(140));
    NewEntry {
        producer_seq: pseq,
        ts: 0,
        kind: "agent.output".into(),
        payload: json!({"stream": "stdout", "text": text}),
    }
}

/// Entries per second from one bridge connection to durable ack, `batch` entries a frame,
/// pipelined `window` entries deep.
pub async fn ingest(mut ws: Ws, total: u64, batch: u64, window: u64) -> Result<f64> {
    let start = Instant::now();
    let (mut sent, mut acked) = (0u64, 0u64);
    while acked < total {
        while sent < total && sent - acked < window {
            let n = batch.min(total - sent);
            let entries = (sent + 1..=sent + n).map(|i| entry(i, 0)).collect();
            send(&mut ws, &BridgeToServer::Entries { entries }).await?;
            sent += n;
        }
        match next_frame(&mut ws).await? {
            ServerToBridge::Ack { producer_seq } => acked = producer_seq,
            other => bail!("unexpected {other:?}"),
        }
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Sends `rate` timed entries a second for `secs` (a batch every 10 ms), reading acks on their
/// own task so the pace never waits on them; returns the connection once every entry is acked.
/// Fails if the pace cannot be kept within three times `secs`.
pub async fn paced(ws: Ws, rate: u64, secs: u64, epoch: Instant) -> Result<Ws> {
    let total = rate * secs;
    let (mut sink, mut stream) = ws.split();
    let acker = tokio::spawn(async move {
        let mut acked = 0;
        while acked < total {
            match tokio::time::timeout(GUARD, stream.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => {
                    if let Ok(ServerToBridge::Ack { producer_seq }) = serde_json::from_str(&t) {
                        acked = producer_seq;
                    }
                }
                Ok(Some(Ok(_))) => {}
                _ => bail!("the bridge socket ended with {acked} of {total} entries acked"),
            }
        }
        Ok(stream)
    });
    let sent = send_paced(&mut sink, total, rate, secs, epoch).await;
    if !matches!(sent, Ok(n) if n == total) {
        acker.abort();
        bail!("sent {sent:?} of {total} entries within {}s", secs * 3);
    }
    let stream = acker.await??;
    sink.reunite(stream)
        .map_err(|_| anyhow::anyhow!("the two halves of one socket"))
}

async fn send_paced(
    sink: &mut SplitSink<Ws, Message>,
    total: u64,
    rate: u64,
    secs: u64,
    epoch: Instant,
) -> Result<u64> {
    let start = Instant::now();
    let per_tick = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut sent = 0;
    while sent < total && start.elapsed() < Duration::from_secs(secs * 3) {
        tick.tick().await;
        let now_us = epoch.elapsed().as_micros() as u64;
        let n = per_tick.min(total - sent);
        let frame = BridgeToServer::Entries {
            entries: (sent + 1..=sent + n).map(|i| entry(i, now_us)).collect(),
        };
        sink.send(Message::Text(serde_json::to_string(&frame)?.into()))
            .await?;
        sent += n;
    }
    Ok(sent)
}

/// An SSE stream of `session` from `after`, opened with a raw HTTP/1.1 request (the client must
/// cost little next to the server), positioned after the response headers.
pub async fn sse_open(
    addr: &str,
    token: &str,
    session: &str,
    after: u64,
) -> Result<BufReader<TcpStream>> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "GET /api/v1/sessions/{session}/events?after={after} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n",
    );
    s.write_all(req.as_bytes()).await?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    for _ in 0..64 {
        line.clear();
        r.read_line(&mut line).await?;
        if line == "\r\n" || line.is_empty() {
            return Ok(r);
        }
        if line.starts_with("HTTP/1.1") && !line.contains("200") {
            bail!("sse refused: {line}");
        }
    }
    bail!("sse headers never ended")
}

/// Reads an SSE stream until the event with id `last` (the chunked body's size lines never
/// start with `id:` or `data:`). `on_data` gets each data line and the time it was read, in µs
/// since `epoch`: one clock read per socket read. Reads land in one buffer and lines are found
/// with `memchr`, so a thousand readers on the bench's cores cost little beside `moord`.
pub async fn sse_read_until(
    r: &mut BufReader<TcpStream>,
    last: u64,
    epoch: Instant,
    mut on_data: impl FnMut(&[u8], u64),
) -> Result<()> {
    // The part of a line the last read ended in, then what the next read adds.
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut finishing = false;
    loop {
        buf.reserve(64 * 1024);
        if r.read_buf(&mut buf).await? == 0 {
            bail!("sse stream ended early");
        }
        let now = epoch.elapsed().as_micros() as u64;
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &buf) {
            let line = &buf[start..end];
            start = end + 1;
            if let Some(data) = line.strip_prefix(b"data: ") {
                on_data(data, now);
                if finishing {
                    return Ok(());
                }
            } else if let Some(id) = line.strip_prefix(b"id: ") {
                let id = std::str::from_utf8(id)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                finishing = id == Some(last);
            }
        }
        buf.drain(..start);
    }
}

/// The send time (µs since the epoch) a timed entry's SSE data line carries, if any.
pub fn sent_at(data: &[u8]) -> Option<u64> {
    let i = data.windows(8).position(|w| w == b"\"text\":\"")?;
    std::str::from_utf8(data.get(i + 8..i + 24)?)
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&t| t > 0)
}

/// Delivery latencies (µs) of every timed entry up to the event with id `last`.
pub async fn sse_latencies(
    r: &mut BufReader<TcpStream>,
    last: u64,
    epoch: Instant,
) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    sse_read_until(r, last, epoch, |data, now| {
        if let Some(sent) = sent_at(data) {
            out.push(now.saturating_sub(sent));
        }
    })
    .await?;
    Ok(out)
}
