//! `moor-compaction-bench`: the bytes on disk a busy terminal session costs per hour, before and
//! after compaction, measured with the real `moor run --mode pty` and the real `moord` (SQLite).
//!
//! The agent is a Python loop writing terminal output at a fixed rate (`--kib-per-sec`, default
//! 100): every 10 ms a burst of 100-byte lines (a counter, a colour escape, text), for `--secs`
//! seconds (default 30). Once the session ended and its head is stored, `moord` is stopped (its
//! WAL is checkpointed into the database file) and the database's bytes on disk (`moor.db` and
//! `moor.db-wal`) are measured; then `moord` starts again with `--compact-after-hours` near zero,
//! compacts everything compactable (its retention timer's first run, then `POST
//! /api/v1/retention/run` until a run compacts nothing), stops, and the bytes are measured again. A fresh database's size (schema, admin
//! account) is subtracted from both. Bytes per hour are scaled from the run's measured duration;
//! compaction keeps a session's newest 1,000 to 2,000 entries (see `docs/operating.md`), a fixed
//! amount that the "after" figure of a short run is mostly made of. Medians of `--runs` runs
//! (default 3).
//!
//! `cargo build --release -p moor-server -p moor-bridge -p moor-e2e &&
//! target/release/moor-compaction-bench [--secs S] [--kib-per-sec K] [--runs R]`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use moor_e2e::bench::{count_arg, median, runs};
use moor_e2e::http::{pty_bytes, LogTail};
use moor_e2e::{BridgeOpts, ServerOpts, TestServer};
use moor_protocol::kinds;
use reqwest::{Method, StatusCode};

/// Hard limit on any single wait.
const GUARD: Duration = Duration::from_secs(300);
/// Entries older than about 4 ms are due for compaction.
const COMPACT_AFTER_HOURS: &str = "0.000001";
/// Most retention runs asked for to compact everything (each compacts up to a million entries).
const MAX_RETENTION_RUNS: usize = 10;
/// The last line the writer prints, so the stored log can be checked complete.
const DONE: &str = "compaction-bench-done";

/// The agent: writes `rate` bytes a second as 100-byte lines, in one burst every 10 ms paced by
/// the monotonic clock (a late burst is not made up by a larger one), for `secs` seconds.
const WRITER: &str = r#"
import sys, time
rate, secs, done = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
tick = 0.01
lines = max(1, rate // 100 // 100)
out = sys.stdout.buffer
start = time.monotonic()
n = 0
i = 0
while i * tick < secs:
    delay = start + i * tick - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    burst = []
    for _ in range(lines):
        n += 1
        text = "%8d \x1b[1;32m ok \x1b[0m compiling unit %d of a busy build, step %d" % (n, n % 997, i)
        burst.append(text.ljust(99)[:99] + "\n")
    out.write("".join(burst).encode())
    out.flush()
    i += 1
out.write((done + "\n").encode())
out.flush()
"#;

/// Bytes of the SQLite database files (`moor.db`, `moor.db-wal`) in `server`'s data dir.
fn db_bytes(server: &TestServer) -> Result<u64> {
    let data = server.dir().join("data");
    let size = |name: &str| -> Result<u64> {
        match std::fs::metadata(data.join(name)) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e).with_context(|| format!("stat {name}")),
        }
    };
    Ok(size("moor.db")? + size("moor.db-wal")?)
}

/// Stops `server` (a clean stop checkpoints the WAL) and measures its database.
async fn stopped_bytes(server: &mut TestServer) -> Result<u64> {
    // A SIGTERM that comes before moord handles it (right after the start) ends it without the
    // checkpoint; the WAL it leaves is counted.
    server.terminate().await;
    db_bytes(server)
}

/// Runs retention until a run compacts nothing.
async fn compact_all(server: &TestServer) -> Result<()> {
    for _ in 0..MAX_RETENTION_RUNS {
        let run = server
            .api()
            .authed(Method::POST, "/api/v1/retention/run", None)
            .await;
        if run.status != StatusCode::OK {
            bail!("retention run: {} {:?}", run.status, run.body);
        }
        if run.body["compacted_entries"].as_u64().unwrap_or(0) == 0 {
            return Ok(());
        }
    }
    bail!("still compacting after {MAX_RETENTION_RUNS} retention runs")
}

/// One run's figures.
struct Measured {
    secs: f64,
    /// Terminal output bytes stored (decoded).
    output: u64,
    entries: u64,
    kept: u64,
    empty: u64,
    before: u64,
    after: u64,
}

async fn run_once(script: &Path, rate: u64, secs: u64) -> Result<Measured> {
    let mut server = TestServer::start(
        ServerOpts::new()
            .flag("--compact-after-hours", COMPACT_AFTER_HOURS)
            // Compaction only when asked for, after the measurement before it.
            .flag("--retention-interval-ms", 3_600_000),
    )
    .await;
    let empty = stopped_bytes(&mut server).await?;
    server.restart().await;

    let name = format!("bench-compaction-{}", uuid::Uuid::new_v4().simple());
    let started = Instant::now();
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), &name, &[])
        .flag("--mode", "pty")
        .command(&[
            "python3".into(),
            script.display().to_string(),
            rate.to_string(),
            secs.to_string(),
            DONE.into(),
        ])
        .spawn();
    bridge.wait_success(GUARD + Duration::from_secs(secs)).await;
    let took = started.elapsed().as_secs_f64();
    let api = server.api();
    let head = api.wait_ended(&name, GUARD).await;
    let mut tail = LogTail::new(server.api(), head.id);
    tail.wait_for(GUARD, "the session's head", |es| {
        es.last().is_some_and(|e| e.seq >= head.head_seq)
    })
    .await;
    let output = pty_bytes(&tail.entries);
    if !String::from_utf8_lossy(&output).contains(DONE) {
        bail!("the stored terminal output does not end with the writer's last line");
    }
    let entries = tail
        .entries
        .iter()
        .filter(|e| e.kind == kinds::AGENT_PTY_OUTPUT)
        .count() as u64;
    let before = stopped_bytes(&mut server).await?;

    // The restarted server's retention timer runs at once; the requested runs finish whatever
    // it left. The session's own figures say what went.
    server.restart().await;
    compact_all(&server).await?;
    let retention = server
        .api()
        .authed(
            Method::GET,
            &format!("/api/v1/sessions/{}/retention", head.id),
            None,
        )
        .await;
    let compacted = retention.body["compacted_entries"].as_u64().unwrap_or(0);
    if compacted == 0 {
        bail!(
            "compaction removed nothing of {entries} terminal output entries (head {})",
            head.head_seq
        );
    }
    let after = stopped_bytes(&mut server).await?;
    Ok(Measured {
        secs: took,
        output: output.len() as u64,
        entries,
        kept: entries.saturating_sub(compacted),
        empty,
        before,
        after,
    })
}

fn mib(bytes: f64) -> String {
    format!("{:8.2} MiB", bytes / f64::from(1 << 20))
}

#[tokio::main]
async fn main() -> Result<()> {
    let secs: u64 = count_arg("--secs", 30)?;
    let kib: u64 = count_arg("--kib-per-sec", 100)?;
    let runs = runs(3)?;
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER)?;

    let mut m = Vec::new();
    for _ in 0..runs {
        m.push(run_once(&script, kib * 1024, secs).await?);
    }
    let med = |f: &dyn Fn(&Measured) -> f64| median(m.iter().map(f).collect());
    let per_hour = |f: &dyn Fn(&Measured) -> f64| med(&|r| f(r) * 3600.0 / r.secs);
    let grown_before = |r: &Measured| r.before.saturating_sub(r.empty) as f64;
    let grown_after = |r: &Measured| r.after.saturating_sub(r.empty) as f64;
    println!(
        "Busy PTY session, {kib} KiB/s of terminal output for {secs} s, median of {runs} runs:"
    );
    println!(
        "  stored terminal output   {:8.1} KiB/s  ({} entries, {} kept by compaction)",
        med(&|r| r.output as f64 / r.secs / 1024.0),
        med(&|r| r.entries as f64),
        med(&|r| r.kept as f64)
    );
    println!(
        "  fresh database           {}",
        mib(med(&|r| r.empty as f64))
    );
    println!(
        "  on disk before           {}  +{} over the fresh one",
        mib(med(&|r| r.before as f64)),
        mib(med(&grown_before))
    );
    println!(
        "  on disk after            {}  +{} over the fresh one",
        mib(med(&|r| r.after as f64)),
        mib(med(&grown_after))
    );
    println!(
        "  per hour, before         {}",
        mib(per_hour(&grown_before))
    );
    println!(
        "  per hour, after          {}  (scaled the same way; includes the newest entries compaction keeps)",
        mib(per_hour(&grown_after))
    );
    println!(
        "  before / after           {:8.1}x",
        med(&|r| grown_before(r) / grown_after(r).max(1.0))
    );
    Ok(())
}
