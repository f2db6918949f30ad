//! `moor-ref-bench`: one measurement of a running `moord`, Mooring's half of the side-by-side
//! benchmark against the Durable Streams reference server (`scripts/bench-reference`, which
//! starts `moord` and runs `tests/reference/bench.mjs` for the other half).
//!
//! `moor-ref-bench --addr HOST:PORT --token-file PATH --pid PID --workload NAME [options]` prints
//! one line `result <workload> <value> <unit>`:
//!
//! - `batch100 [--entries N]`: frames of 100 entries, each acked (durable) before the next;
//!   entries/s.
//! - `batch100x5 [--entries N]`: frames of 100, 5 frames in flight; entries/s.
//! - `defaults [--entries N]`: frames of 1,000 pipelined 20,000 entries deep, as `moor run`
//!   sends; entries/s.
//! - `single [--entries N]`: one entry a frame, each acked before the next; entries/s.
//! - `catchup-sse [--entries N]`: a viewer attaching at 0 to a log of N entries over SSE; s.
//! - `catchup-paged [--entries N]`: the same log over `GET /entries`, pages of 1,000; s.
//! - `idle-sse [--conns N]`: `moord`'s resident memory per idle SSE viewer; KiB.
//! - `live [--readers R] [--rate E] [--secs S]`: E entries/s for S seconds to R SSE viewers;
//!   p99 delivery latency, bridge send to viewer read, ms (and, on an `info` line, p50 and the
//!   CPU time of `moord` and of this client).
//!
//! The writing workloads add an `info` line with `moord`'s CPU time per entry. Every wait is
//! bounded (`GUARD`).

use anyhow::{bail, ensure, Context, Result};
use moor_e2e::bench::catchup;
use moor_e2e::bench::fanout::fan_out;
use moor_e2e::bench::moord::Moord;
use moor_e2e::bench::{arg, count_arg, ingest, GUARD};
use tokio::io::AsyncReadExt;

/// Resident memory per idle SSE viewer of one session, KiB: `n` viewers attached at the head.
async fn idle_sse(moord: &Moord, n: usize) -> Result<f64> {
    let session = format!("idle-{}", uuid::Uuid::new_v4());
    let _bridge = moord.bridge(&session).await?;
    let attach = || async {
        let mut r = moord.sse(&session, 1).await?;
        // The stream's first chunk: the server-side stream exists.
        let mut buf = [0u8; 64];
        let _ = tokio::time::timeout(GUARD, r.read(&mut buf)).await??;
        anyhow::Ok(r)
    };
    // One viewer first warms the server's code paths and the allocator.
    let mut viewers = vec![attach().await?];
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let before = moord.rss_kib()?;
    for _ in 0..n {
        viewers.push(attach().await?);
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let after = moord.rss_kib()?;
    drop(viewers);
    Ok(after.saturating_sub(before) as f64 / n as f64)
}

/// CPU time this process has used so far (user + system), in seconds.
fn own_cpu_secs() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let rest = stat.rsplit_once(')').context("stat format")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        f.get(11).context("utime")?.parse::<f64>()? + f.get(12).context("stime")?.parse::<f64>()?;
    Ok(ticks / 100.0)
}

#[tokio::main]
async fn main() -> Result<()> {
    let addr = arg("--addr").context("--addr HOST:PORT is required")?;
    let token_file = arg("--token-file").context("--token-file PATH is required")?;
    let token = std::fs::read_to_string(&token_file)
        .with_context(|| format!("reading {token_file}"))?
        .trim()
        .to_owned();
    let pid: u32 = count_arg("--pid", 0)?;
    ensure!(pid > 1, "--pid PID (moord's process id) is required");
    let workload = arg("--workload").context("--workload NAME is required")?;
    let moord = Moord::attach(addr, token, pid);
    let session = format!("ref-{workload}-{}", uuid::Uuid::new_v4());
    // Entries per second of one bridge sending `n` entries, `batch` a frame, `window` deep, with
    // moord's CPU time per entry on an `info` line.
    let (m, session) = (&moord, session.as_str());
    let write = |n: u64, batch: u64, window: u64| async move {
        let cpu = m.cpu_secs()?;
        let rate = ingest(m.bridge(session).await?, n, batch, window).await?;
        println!(
            "info server CPU {:.1} us/entry",
            (m.cpu_secs()? - cpu) * 1e6 / n as f64
        );
        anyhow::Ok((rate, "entries/s"))
    };
    let (value, unit) = match workload.as_str() {
        "batch100" => {
            let n = count_arg("--entries", 100_000)?;
            write(n, 100, 100).await?
        }
        "batch100x5" => {
            let n = count_arg("--entries", 100_000)?;
            write(n, 100, 500).await?
        }
        "defaults" => {
            let n = count_arg("--entries", 200_000)?;
            write(n, 1000, 20_000).await?
        }
        "single" => {
            let n = count_arg("--entries", 2000)?;
            write(n, 1, 1).await?
        }
        "catchup-sse" => {
            let n = count_arg("--entries", 100_000)?;
            let (session, _bridge) = catchup::fill(&moord, n).await?;
            let c = catchup::sse(&moord, &session, n + 1, false).await?;
            ensure!(c.entries > n, "read {} of {} entries", c.entries, n + 1);
            (c.secs, "s")
        }
        "catchup-paged" => {
            let n = count_arg("--entries", 100_000)?;
            let (session, _bridge) = catchup::fill(&moord, n).await?;
            let c = catchup::paged(&moord, &session, false).await?;
            ensure!(c.entries > n, "read {} of {} entries", c.entries, n + 1);
            (c.secs, "s")
        }
        "idle-sse" => (idle_sse(&moord, count_arg("--conns", 1000)?).await?, "KiB"),
        "live" => {
            let readers = count_arg("--readers", 1)?;
            let rate = count_arg("--rate", 1000)?;
            let secs = count_arg("--secs", 5)?;
            let (server, client) = (moord.cpu_secs()?, own_cpu_secs()?);
            let f = fan_out(&moord, readers, rate, secs).await?;
            println!(
                "info p50 {:.1} ms, {:.0} deliveries/s, CPU: server {:.1} s, client {:.1} s",
                f.p50_ms,
                f.deliveries_per_s,
                moord.cpu_secs()? - server,
                own_cpu_secs()? - client
            );
            (f.p99_ms, "ms")
        }
        other => bail!("unknown workload {other}"),
    };
    println!("result {workload} {value:.3} {unit}");
    Ok(())
}
