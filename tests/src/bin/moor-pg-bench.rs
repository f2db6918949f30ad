//! `moor-pg-bench`: two real `moord` nodes on one Postgres database, over loopback.
//!
//! Measures ingest to durable ack on Postgres (one bridge, group commit) and delivery latency at
//! 1,000 entries/s from a bridge on node A to an SSE viewer on node B (cross-node, through
//! `NOTIFY` and a store read) and, for comparison, to a viewer on A itself.
//!
//! Build and run: `cargo build --release --workspace && target/release/moor-pg-bench [--runs N]`.
//! The database comes from `MOOR_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! a fresh one is created per run and dropped afterwards. Figures are medians over the runs;
//! every wait is bounded.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use moor_e2e::pg::TestDb;
use moor_e2e::ws::{connect, Ws};
use moor_e2e::{ServerOpts, TestServer};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, Hello, ServerToBridge};
use moor_protocol::{NewEntry, ProducerId, Seq, PROTOCOL_VERSION};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

/// Hard limit on any single wait.
const GUARD: Duration = Duration::from_secs(120);

/// A bridge connection: `Hello`, then `Welcome`.
async fn bridge(node: &TestServer, session: &str) -> Result<Ws> {
    let mut ws = connect(
        &format!("ws://{}/api/v1/bridge", node.addr()),
        Some(node.token()),
    )
    .await?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        session: session.into(),
        producer: ProducerId::new(),
        last_applied_input: Seq(0),
        uncertain_inputs: vec![],
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

async fn send(ws: &mut Ws, frame: &BridgeToServer) -> Result<()> {
    ws.send(Message::Text(serde_json::to_string(frame)?.into()))
        .await?;
    Ok(())
}

async fn next_frame(ws: &mut Ws) -> Result<ServerToBridge> {
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

/// A 200-byte entry whose text starts with the send time (µs since the run's epoch).
fn entry(pseq: u64, sent_us: u64) -> NewEntry {
    let text = format!("{sent_us:>16} {}", "x".repeat(140));
    NewEntry {
        producer_seq: pseq,
        ts: 0,
        kind: "agent.output".into(),
        payload: json!({"stream": "stdout", "text": text}),
    }
}

/// Entries per second from one bridge to durable ack, pipelined `window` entries deep.
async fn ingest(node: &TestServer, total: u64, batch: u64, window: u64) -> Result<f64> {
    let mut ws = bridge(node, &format!("ingest-{}", uuid::Uuid::new_v4())).await?;
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

/// An SSE stream opened with a raw HTTP/1.1 request, positioned after the headers.
async fn sse_open(node: &TestServer, session: &str) -> Result<BufReader<TcpStream>> {
    let addr = node.addr();
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "GET /api/v1/sessions/{session}/events?after=0 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        node.token()
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

/// Reads until the event with id `last`, collecting the latency of every timed entry: read time
/// minus the send time in its text (one clock read per socket read).
async fn sse_latencies(
    r: &mut BufReader<TcpStream>,
    last: u64,
    epoch: Instant,
) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut carry: Vec<u8> = Vec::new();
    let mut finishing = false;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            bail!("sse stream ended early");
        }
        let now = epoch.elapsed().as_micros() as u64;
        carry.extend_from_slice(&buf[..n]);
        let mut start = 0;
        while let Some(pos) = carry[start..].iter().position(|&b| b == b'\n') {
            let line = &carry[start..start + pos];
            start += pos + 1;
            if let Some(data) = line.strip_prefix(b"data: ") {
                let sent = data
                    .windows(8)
                    .position(|w| w == b"\"text\":\"")
                    .and_then(|i| data.get(i + 8..i + 24))
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .filter(|&t| t > 0);
                if let Some(sent) = sent {
                    out.push(now.saturating_sub(sent));
                }
                if finishing {
                    return Ok(out);
                }
            } else if let Some(id) = line.strip_prefix(b"id: ") {
                let id = std::str::from_utf8(id)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                finishing = id == Some(last);
            }
        }
        carry.drain(..start);
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// p50 and p99 in ms.
#[derive(Debug, Clone, Copy)]
struct Latency {
    p50: f64,
    p99: f64,
}

fn latency(mut v: Vec<u64>) -> Latency {
    v.sort_unstable();
    Latency {
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
    }
}

/// A bridge on `a` sends `rate` entries/s for `secs`; one SSE viewer on `b` (cross-node) and one
/// on `a` (same node). Returns (cross-node, same-node) latency.
async fn delivery(
    a: &TestServer,
    b: &TestServer,
    rate: u64,
    secs: u64,
) -> Result<(Latency, Latency)> {
    let session = format!("latency-{}", uuid::Uuid::new_v4());
    let ws = bridge(a, &session).await?;
    let id = a
        .session(&session)
        .await
        .context("session exists")?
        .id
        .to_string();
    let epoch = Instant::now();
    let total = rate * secs;
    // The head once everything is in: bridge.connected, then the entries.
    let head = total + 1;
    let mut viewers = Vec::new();
    for node in [b, a] {
        let mut r = sse_open(node, &id).await?;
        viewers.push(tokio::spawn(async move {
            tokio::time::timeout(GUARD, sse_latencies(&mut r, head, epoch)).await?
        }));
    }
    let (mut sink, mut stream) = ws.split();
    let acker = tokio::spawn(async move {
        while let Ok(Some(Ok(_))) = tokio::time::timeout(GUARD, stream.next()).await {}
    });
    // Paced: a batch every 10 ms.
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
    let mut results = Vec::new();
    for v in viewers {
        results.push(latency(v.await??));
    }
    acker.abort();
    Ok((results[0], results[1]))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

#[tokio::main]
async fn main() -> Result<()> {
    let runs: usize = arg("--runs")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3)
        .max(1);
    let quiet = std::env::var("MOOR_BENCH_LOG").unwrap_or_else(|_| "warn".into());
    std::env::set_var("RUST_LOG", quiet);
    println!("moor-pg-bench: two real moord nodes on one Postgres database, loopback; medians of {runs} runs");
    let (mut rates, mut cross, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=runs {
        let db = TestDb::create()
            .await
            .context("no Postgres server (set MOOR_TEST_PG_URL)")?;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let opts = |node: &str| -> ServerOpts { db.node_opts(node, &token) };
        let a = TestServer::start(opts("a")).await;
        let b = TestServer::start(opts("b")).await;
        let rate = ingest(&a, 100_000, 1000, 20_000).await?;
        let (x, l) = delivery(&a, &b, 1000, 5).await?;
        eprintln!(
            "run {run}: ingest {rate:.0}/s; A->B p50 {:.1} ms p99 {:.1} ms; A->A p50 {:.1} ms p99 {:.1} ms",
            x.p50, x.p99, l.p50, l.p99
        );
        rates.push(rate);
        cross.push(x);
        local.push(l);
        drop((a, b, db));
    }
    println!(
        "ingest on Postgres, one bridge, 200-byte entries, to durable ack: {:.0} entries/s",
        median(rates)
    );
    println!(
        "delivery at 1000 entries/s, bridge on node A, SSE viewer on node B: p50 {:.1} ms, p99 {:.1} ms",
        median(cross.iter().map(|l| l.p50).collect()),
        median(cross.iter().map(|l| l.p99).collect())
    );
    println!(
        "  (same run, viewer on node A: p50 {:.1} ms, p99 {:.1} ms)",
        median(local.iter().map(|l| l.p50).collect()),
        median(local.iter().map(|l| l.p99).collect())
    );
    Ok(())
}
