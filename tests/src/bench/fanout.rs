//! Fan-out: one session, a bridge sending at a steady pace, many SSE viewers reading it live.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;

use super::moord::Moord;
use super::{paced, sent_at, sse_read_until, Latency, GUARD};

/// What one fan-out run measured.
#[derive(Debug, Clone, Copy)]
pub struct FanOut {
    /// moord CPU time per delivery, µs: how much of a core fan-out costs, independent of the
    /// client sharing the machine.
    pub server_us_per_delivery: f64,
    /// Entries delivered to viewers per second, all viewers together.
    pub deliveries_per_s: f64,
    /// Delivery latency, bridge send to viewer read: median, ms.
    pub p50_ms: f64,
    /// Delivery latency: 99th percentile, ms.
    pub p99_ms: f64,
}

/// `viewers` SSE viewers on one session while a bridge sends `rate` entries/s for `secs`.
pub async fn fan_out(moord: &Moord, viewers: usize, rate: u64, secs: u64) -> Result<FanOut> {
    let session = format!("fanout-{}", uuid::Uuid::new_v4());
    let ws = moord.bridge(&session).await?;
    let epoch = Instant::now();
    let total = rate * secs;
    let head = total + 1; // + bridge.connected
    let latencies = Arc::new(Mutex::new(Vec::with_capacity((total as usize) * viewers)));
    let delivered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..viewers {
        let mut r = moord.sse(&session, 0).await?;
        let latencies = latencies.clone();
        let delivered = delivered.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(total as usize);
            let res = sse_read_until(&mut r, head, epoch, |data, now| {
                if let Some(sent) = sent_at(data) {
                    mine.push(now.saturating_sub(sent));
                }
            })
            .await;
            delivered.fetch_add(mine.len() as u64, Ordering::Relaxed);
            latencies
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(mine);
            res
        }));
    }
    let cpu_before = moord.cpu_secs()?;
    let start = Instant::now();
    let _ws = paced(ws, rate, secs, epoch).await?;
    for t in tasks {
        tokio::time::timeout(GUARD, t).await???;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let lat = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
    let lat = Latency::of(lat);
    let deliveries = delivered.load(Ordering::Relaxed) as f64;
    Ok(FanOut {
        server_us_per_delivery: (moord.cpu_secs()? - cpu_before) * 1e6 / deliveries.max(1.0),
        deliveries_per_s: deliveries / elapsed,
        p50_ms: lat.p50,
        p99_ms: lat.p99,
    })
}
