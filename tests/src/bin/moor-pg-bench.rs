//! `moor-pg-bench`: two real `moord` nodes on one Postgres database, over loopback.
//!
//! Measures ingest to durable ack on Postgres (one bridge, group commit) against the rate of
//! `COPY`ing the same rows straight into the database, and delivery latency at
//! 1,000 entries/s from a bridge on node A to an SSE viewer on node B (cross-node, through
//! `NOTIFY` and a store read) and, for comparison, to a viewer on A itself.
//!
//! Build and run: `cargo build --release --workspace && target/release/moor-pg-bench [--runs N]`.
//! The database comes from `MOOR_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! a fresh one is created per run and dropped afterwards. Figures are medians over the runs;
//! every wait is bounded.

use std::time::Instant;

use anyhow::{Context, Result};
use moor_e2e::bench::{
    bridge, ingest, limit, median, paced, runs, sse_latencies, sse_open, Latency, GUARD,
};
use moor_e2e::pg::TestDb;
use moor_e2e::ws::Ws;
use moor_e2e::{ServerOpts, TestServer};

/// A bridge connection to `node`.
async fn bridge_on(node: &TestServer, session: &str) -> Result<Ws> {
    bridge(&node.addr().to_string(), node.token(), session).await
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
    let ws = bridge_on(a, &session).await?;
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
        let mut r = sse_open(&node.addr().to_string(), node.token(), &id, 0).await?;
        viewers.push(tokio::spawn(async move {
            tokio::time::timeout(GUARD, sse_latencies(&mut r, head, epoch)).await?
        }));
    }
    let _ws = paced(ws, rate, secs, epoch).await?;
    let mut results = Vec::new();
    for v in viewers {
        results.push(Latency::of(v.await??));
    }
    Ok((results[0], results[1]))
}

#[tokio::main]
async fn main() -> Result<()> {
    let runs = runs(3)?;
    let quiet = std::env::var("MOOR_BENCH_LOG").unwrap_or_else(|_| "warn".into());
    std::env::set_var("RUST_LOG", quiet);
    println!("moor-pg-bench: two real moord nodes on one Postgres database, loopback; medians of {runs} runs");
    let (mut rates, mut cross, mut local) = (Vec::new(), Vec::new(), Vec::new());
    let (mut limits, mut shares) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let db = TestDb::create()
            .await
            .context("no Postgres server (set MOOR_TEST_PG_URL)")?;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let opts = |node: &str| -> ServerOpts { db.node_opts(node, &token) };
        let a = TestServer::start(opts("a")).await;
        let b = TestServer::start(opts("b")).await;
        let name = format!("ingest-{}", uuid::Uuid::new_v4());
        let ws = bridge_on(&a, &name).await?;
        let rate = ingest(ws, 100_000, 1000, 20_000).await?;
        let (x, l) = delivery(&a, &b, 1000, 5).await?;
        let id = a.session(&name).await.context("session exists")?.id;
        let limit = limit::postgres_copy_limit(db.url(), &id.to_string(), 100_000, 1000).await?;
        eprintln!(
            "run {run}: ingest {rate:.0}/s (storage limit {limit:.0}/s); A->B p50 {:.1} ms p99 {:.1} ms; A->A p50 {:.1} ms p99 {:.1} ms",
            x.p50, x.p99, l.p50, l.p99
        );
        shares.push(rate / limit);
        limits.push(limit);
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
        "storage limit: the same rows COPY'd straight into the same database, a transaction per 1000: {:.0} entries/s; moord reaches {:.0}% of it (median of per-run shares)",
        median(limits),
        median(shares) * 100.0
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
