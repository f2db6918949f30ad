//! `moor-quiet-bench`: many quiet sessions on one real `moord` (SQLite default, loopback).
//!
//! Build and run: `cargo build --release -p moor-server -p moor-e2e &&
//! target/release/moor-quiet-bench [--sessions 100,200,500,1000] [--runs 3] [--secs 10]
//! [--rate 10]`. For each session count it starts a fresh `moord` per run, opens that many
//! bridges (each its own session, one SSE viewer each), sends one 200-byte entry per frame at
//! `--rate` entries/s per bridge for `--secs`, and prints medians over the runs of `moord`'s CPU
//! per entry and of the ack and viewer latency percentiles. `MOOR_BENCH_MOORD` names another
//! `moord` binary (to compare builds). Every loop is bounded in count and time.

use anyhow::{Context, Result};
use moor_e2e::bench::moord::Moord;
use moor_e2e::bench::quiet::{quiet_sessions, QuietRun};
use moor_e2e::bench::{arg, count_arg, median, runs};

#[tokio::main]
async fn main() -> Result<()> {
    let runs = runs(3)?;
    let secs: u64 = count_arg("--secs", 10)?;
    let rate: u64 = count_arg("--rate", 10)?;
    let counts: Vec<usize> = arg("--sessions")
        .unwrap_or_else(|| "100,200,500,1000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .context("--sessions takes counts like 100,200")
        })
        .collect::<Result<_>>()?;
    println!(
        "moor-quiet-bench: real moord (SQLite, WAL, synchronous=FULL) on loopback; one 200-byte entry per frame, {rate} entries/s per bridge for {secs}s; medians of {runs} runs"
    );
    println!("sessions | moord CPU us/entry | ack p50 / p99 ms | viewer p50 / p99 ms | late handshake ms");
    for n in counts {
        let mut all: Vec<QuietRun> = Vec::with_capacity(runs);
        for run in 1..=runs {
            let moord = Moord::start().await?;
            let r = quiet_sessions(&moord, n, rate, secs).await?;
            eprintln!(
                "{n} sessions, run {run}: {:.1} us/entry, ack p50 {:.1} p99 {:.1} ms, viewer p50 {:.1} p99 {:.1} ms, late handshake {:.1} ms",
                r.us_per_entry, r.ack.p50, r.ack.p99, r.view.p50, r.view.p99, r.late_open_ms
            );
            all.push(r);
        }
        let med = |f: fn(&QuietRun) -> f64| median(all.iter().map(f).collect());
        println!(
            "{n} | {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1}",
            med(|r| r.us_per_entry),
            med(|r| r.ack.p50),
            med(|r| r.ack.p99),
            med(|r| r.view.p50),
            med(|r| r.view.p99),
            med(|r| r.late_open_ms)
        );
    }
    Ok(())
}
