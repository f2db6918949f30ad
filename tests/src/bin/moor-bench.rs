//! `moor-bench`: throughput, latency and memory of the real `moord` (SQLite default, loopback).
//!
//! Build and run: `cargo build --release --workspace && target/release/moor-bench [--runs N]`.
//! Every figure is a median over several runs; the machine is shared, so read ratios and orders
//! of magnitude, not the last digit. Every loop is bounded in count and time.

use std::time::Instant;

use anyhow::{Context, Result};
use futures_util::StreamExt;
use moor_e2e::bench::catchup::{self, CatchUp};
use moor_e2e::bench::fanout::{fan_out, FanOut};
use moor_e2e::bench::moord::Moord;
use moor_e2e::bench::{arg, ingest, limit, median, runs, sse_open, sse_read_until, GUARD};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A viewer attaching at 0 to a log of `n` entries: seconds until it has all of them.
async fn catch_up(moord: &Moord, n: u64) -> Result<(f64, String)> {
    let (session, _bridge) = catchup::fill(moord, n).await?;
    let head = n + 1; // + bridge.connected
    let start = Instant::now();
    let mut r = moord.sse(&session, 0).await?;
    tokio::time::timeout(
        GUARD,
        sse_read_until(&mut r, head, Instant::now(), |_, _| {}),
    )
    .await??;
    Ok((start.elapsed().as_secs_f64(), session))
}

/// `viewers` SSE viewers attaching at 0, all at once, to a log of `n` entries: seconds until the
/// last of them has every entry, and the median viewer's.
async fn attach_at_once(moord: &Moord, viewers: usize, n: u64) -> Result<(f64, f64)> {
    let (session, _bridge) = catchup::fill(moord, n).await?;
    let head = n + 1; // + bridge.connected
    let start = Instant::now();
    let tasks: Vec<_> = (0..viewers)
        .map(|_| {
            let (addr, token, session) = (moord.addr.clone(), moord.token.clone(), session.clone());
            tokio::spawn(async move {
                let mut r = sse_open(&addr, &token, &session, 0).await?;
                let read = sse_read_until(&mut r, head, start, |_, _| {});
                tokio::time::timeout(GUARD, read).await??;
                anyhow::Ok(start.elapsed().as_secs_f64())
            })
        })
        .collect();
    let mut done = Vec::with_capacity(viewers);
    for task in tasks {
        done.push(task.await??);
    }
    let last = done.iter().copied().fold(0.0, f64::max);
    Ok((last, median(done)))
}

/// After a cold restart, seconds until `GET /sessions/{id}` answers with the derived state of a
/// long session (the state follower starts from the latest snapshot and folds at most
/// `SNAPSHOT_EVERY` entries, not the whole log), and the session's head.
async fn cold_state(moord: &Moord, session: &str) -> Result<(f64, u64)> {
    let start = Instant::now();
    let info: serde_json::Value = moord
        .get(&reqwest::Client::new(), &format!("/sessions/{session}"))
        .await?;
    let secs = start.elapsed().as_secs_f64();
    let head = info["head_seq"].as_u64().context("head")?;
    anyhow::ensure!(
        info["state"]["head"].as_u64() == Some(head),
        "state not caught up: {}",
        info["state"]["head"]
    );
    Ok((secs, head))
}

/// Resident memory per idle SSE viewer and per idle WebSocket viewer, in KiB.
async fn idle_memory(moord: &Moord, n: usize) -> Result<(f64, f64)> {
    let session = format!("idle-{}", uuid::Uuid::new_v4());
    let _bridge = moord.bridge(&session).await?;
    let base = moord.rss_kib()?;
    let mut sse = Vec::with_capacity(n);
    for _ in 0..n {
        let mut r = moord.sse(&session, 1).await?;
        // Wait for the stream's first chunk so the server-side stream exists.
        let mut buf = [0u8; 64];
        let _ = tokio::time::timeout(GUARD, r.read(&mut buf)).await??;
        sse.push(r);
    }
    let with_sse = moord.rss_kib()?;
    let mut wss = Vec::with_capacity(n);
    for _ in 0..n {
        let mut req = format!("ws://{}/api/v1/sessions/{session}/ws?after=1", moord.addr)
            .into_client_request()?;
        req.headers_mut()
            .insert("authorization", format!("Bearer {}", moord.token).parse()?);
        let (ws, _) = tokio_tungstenite::connect_async(req).await?;
        wss.push(ws);
    }
    // Let the server settle each connection into its idle loop.
    let probe = moord.sse(&session, 1).await?;
    drop(probe);
    let with_ws = moord.rss_kib()?;
    Ok((
        (with_sse - base) as f64 / n as f64,
        (with_ws - with_sse) as f64 / n as f64,
    ))
}

/// Resident memory per idle live session, in KiB: `n` bridges, each its own session, connected
/// and idle, nobody watching.
async fn idle_sessions(moord: &Moord, n: usize) -> Result<f64> {
    let run = uuid::Uuid::new_v4();
    // The first session warms the pools and the allocator's arenas.
    let _warm = moord.bridge(&format!("warm-{run}")).await?;
    let base = moord.rss_kib()?;
    let names: Vec<String> = (0..n).map(|i| format!("idle-{run}-{i}")).collect();
    let bridges = futures_util::stream::iter(names.iter().map(|s| moord.bridge(s)))
        .buffered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    // One more handshake after the others, so their sessions have settled.
    drop(moord.bridge(&format!("probe-{run}")).await?);
    let with = moord.rss_kib()?;
    drop(bridges);
    Ok((with - base) as f64 / n as f64)
}

#[tokio::main]
async fn main() -> Result<()> {
    let runs = runs(5)?;
    // `--only ingest|attach|fanout|catchup|memory` runs one measurement (e.g. under a profiler).
    let only = arg("--only");
    let want = |name: &str| only.as_deref().is_none_or(|o| o == name);
    println!("moor-bench: real moord (SQLite, WAL, synchronous=FULL) on loopback; medians of {runs} runs");

    let (mut ingest_rates, mut catchups, mut fan, mut mem) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut states, mut paged, mut wire) = (Vec::new(), Vec::new(), Vec::new());
    let (mut sessions, mut limits, mut attach) = (Vec::new(), Vec::new(), Vec::new());
    let mut fan_pinned: Vec<FanOut> = Vec::new();
    for run in 1..=runs {
        let moord = Moord::start().await?;
        let mut line = format!("run {run}:");
        if want("ingest") {
            let ws = moord
                .bridge(&format!("ingest-{}", uuid::Uuid::new_v4()))
                .await?;
            ingest_rates.push(ingest(ws, 200_000, 1000, 20_000).await?);
            limits.push(limit::sqlite_insert_limit(200_000, 1000).await?);
            line += &format!(
                " ingest {:.0}/s (storage limit {:.0}/s)",
                ingest_rates[run - 1],
                limits[run - 1]
            );
        }
        let mut long_session = None;
        if want("catchup") {
            let (secs, session) = catch_up(&moord, 100_000).await?;
            catchups.push(secs);
            line += &format!(" catch-up {:.3}s", secs);
            let p = catchup::paged(&moord, &session, false).await?;
            anyhow::ensure!(
                p.entries > 100_000,
                "paged catch-up read only {} entries",
                p.entries
            );
            let sse_plain = catchup::sse(&moord, &session, 100_001, false).await?;
            let sse_gzip = catchup::sse(&moord, &session, 100_001, true).await?;
            let paged_gzip = catchup::paged(&moord, &session, true).await?;
            line += &format!(
                " paged {:.3}s; moord CPU sse {:.0} ms, paged {:.0} ms; bytes/entry sse {:.1} (events {:.1}, json {:.1}) paged {:.1}; gzip: sse {:.3}s {:.1} B/entry, paged {:.3}s {:.1} B/entry",
                p.secs,
                sse_plain.server_cpu * 1000.0,
                p.server_cpu * 1000.0,
                sse_plain.wire_per_entry(),
                sse_plain.events as f64 / sse_plain.entries as f64,
                sse_plain.json as f64 / sse_plain.entries as f64,
                p.wire_per_entry(),
                sse_gzip.secs,
                sse_gzip.wire_per_entry(),
                paged_gzip.secs,
                paged_gzip.wire_per_entry(),
            );
            paged.push(p);
            wire.push((sse_plain, sse_gzip, paged_gzip));
            long_session = Some(session);
        }
        if want("attach") {
            let (last, mid) = attach_at_once(&moord, 1000, 10_000).await?;
            line += &format!(" attach at once: last {last:.2}s median {mid:.2}s");
            attach.push((last, mid));
        }
        if want("fanout") {
            let f = fan_out(&moord, 1000, 1000, 5).await?;
            line += &format!(
                " fan-out {:.0}/s p50 {:.1}ms p99 {:.1}ms server {:.2}us/delivery",
                f.deliveries_per_s, f.p50_ms, f.p99_ms, f.server_us_per_delivery
            );
            fan.push(f);
            let pinned = {
                let _pin = moord.pin_apart()?;
                fan_out(&moord, 1000, 1000, 5).await?
            };
            line += &format!(
                " pinned p50 {:.1}ms p99 {:.1}ms server {:.2}us/delivery",
                pinned.p50_ms, pinned.p99_ms, pinned.server_us_per_delivery
            );
            fan_pinned.push(pinned);
        }
        if let Some(session) = long_session {
            let moord = moord.restart().await?;
            let (secs, head) = cold_state(&moord, &session).await?;
            line += &format!(" cold state {:.1}ms (head {head})", secs * 1000.0);
            states.push(secs);
        } else {
            drop(moord);
        }
        if want("memory") {
            let moord = Moord::start().await?;
            let m = idle_memory(&moord, 1000).await?;
            line += &format!(" idle sse {:.1}KiB ws {:.1}KiB", m.0, m.1);
            mem.push(m);
            drop(moord);
            let moord = Moord::start().await?;
            let k = idle_sessions(&moord, 1000).await?;
            line += &format!(" idle session {k:.1}KiB");
            sessions.push(k);
        }
        eprintln!("{line}");
    }
    if !ingest_rates.is_empty() {
        let shares = ingest_rates
            .iter()
            .zip(&limits)
            .map(|(r, l)| r / l)
            .collect();
        println!("ingest, one bridge, 200-byte entries, to durable ack: {:.0} entries/s (target >= 100000)", median(ingest_rates));
        println!(
            "storage limit: the same rows straight into the same SQLite file, a transaction per frame of 1000: {:.0} entries/s; moord reaches {:.0}% of it (median of per-run shares, target >= 70%)",
            median(limits),
            median(shares) * 100.0
        );
    }
    if !fan.is_empty() {
        println!(
            "fan-out, 1 session -> 1000 SSE viewers at 1000 entries/s: {:.0} deliveries/s, latency p50 {:.1} ms, p99 {:.1} ms (target p99 < 25 ms); moord CPU {:.2} us per delivery",
            median(fan.iter().map(|f| f.deliveries_per_s).collect()),
            median(fan.iter().map(|f| f.p50_ms).collect()),
            median(fan.iter().map(|f| f.p99_ms).collect()),
            median(fan.iter().map(|f| f.server_us_per_delivery).collect())
        );
        println!(
            "the same with moord pinned to CPU 0 and the viewers to CPU 1: latency p50 {:.1} ms, p99 {:.1} ms; moord CPU {:.2} us per delivery (targets: p99 < 10 ms, <= 0.3 us)",
            median(fan_pinned.iter().map(|f| f.p50_ms).collect()),
            median(fan_pinned.iter().map(|f| f.p99_ms).collect()),
            median(fan_pinned.iter().map(|f| f.server_us_per_delivery).collect())
        );
    }
    if !attach.is_empty() {
        println!(
            "1000 SSE viewers attaching at once to a 10000-entry log: the last caught up in {:.2} s, the median viewer in {:.2} s (target: all within 2 s)",
            median(attach.iter().map(|a| a.0).collect()),
            median(attach.iter().map(|a| a.1).collect())
        );
    }
    if !states.is_empty() {
        println!(
            "state of that 100000-entry session after a cold restart (GET /sessions/{{id}}): {:.1} ms, {:.0}x faster than reading the log",
            median(states.clone()) * 1000.0,
            median(catchups.clone()) / median(states)
        );
    }
    if !catchups.is_empty() {
        println!(
            "catch-up, viewer at 0 on a 100000-entry log: {:.3} s (target < 1 s)",
            median(catchups)
        );
        println!(
            "catch-up over paged HTTP (GET /entries, pages of 1000) of the same log: {:.3} s",
            median(paged.iter().map(|p| p.secs).collect())
        );
        let m =
            |f: &dyn Fn(&(CatchUp, CatchUp, CatchUp)) -> f64| median(wire.iter().map(f).collect());
        println!(
            "moord CPU for that catch-up: SSE {:.0} ms, paged {:.0} ms",
            m(&|w| w.0.server_cpu) * 1000.0,
            median(paged.iter().map(|p| p.server_cpu).collect()) * 1000.0,
        );
        println!(
            "bytes on the wire per entry, plain: SSE {:.1} (its events {:.1}, their JSON {:.1}), paged {:.1}",
            m(&|w| w.0.wire_per_entry()),
            m(&|w| w.0.events as f64 / w.0.entries as f64),
            m(&|w| w.0.json as f64 / w.0.entries as f64),
            median(paged.iter().map(|p| p.wire_per_entry()).collect()),
        );
        println!(
            "gzip catch-up (Accept-Encoding: gzip): SSE {:.3} s, {:.1} bytes/entry; paged {:.3} s, {:.1} bytes/entry",
            m(&|w| w.1.secs),
            m(&|w| w.1.wire_per_entry()),
            m(&|w| w.2.secs),
            m(&|w| w.2.wire_per_entry()),
        );
    }
    if !mem.is_empty() {
        println!(
            "memory per idle viewer: SSE {:.1} KiB, WebSocket {:.1} KiB (targets <= 8 KiB, <= 6 KiB)",
            median(mem.iter().map(|m| m.0).collect()),
            median(mem.iter().map(|m| m.1).collect())
        );
        println!(
            "memory per idle live session (a bridge connected, nobody watching): {:.1} KiB (target <= 2 KiB)",
            median(sessions)
        );
    }
    Ok(())
}
