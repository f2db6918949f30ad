//! The many-quiet-sessions workload: `n` bridges, each its own session, each sending one timed
//! 200-byte entry per frame at `rate` entries a second (phases spread over the period, as real
//! bridges are not in step), with one SSE viewer per session. It measures what one node pays per
//! entry when the load is many sessions each writing a little: `moord`'s CPU per entry, the time
//! from send to durable ack at the bridge, the time from send to the viewer, and how long a new
//! bridge waits for its handshake while the load runs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{stream, SinkExt, StreamExt};
use moor_protocol::bridge::{BridgeToServer, ServerToBridge};
use tokio::time::MissedTickBehavior;
use tokio_tungstenite::tungstenite::Message;

use super::moord::Moord;
use super::{entry, sent_at, sse_read_until, Latency, GUARD};
use crate::ws::Ws;

/// Handshakes (or SSE opens) in flight at once while the sessions are set up.
const OPENING_AT_ONCE: usize = 32;
/// Bridges opened one after another halfway through the load, to time their handshakes.
const LATE_BRIDGES: usize = 5;

/// What one run of the workload measured.
#[derive(Debug, Clone, Copy)]
pub struct QuietRun {
    /// `moord` CPU time (user + system) per entry, µs, over the whole paced phase.
    pub us_per_entry: f64,
    /// Send → durable ack at the bridge.
    pub ack: Latency,
    /// Send → the session's SSE viewer.
    pub view: Latency,
    /// The slowest handshake (connect to welcome) of a bridge opened while the load runs, ms.
    pub late_open_ms: f64,
}

/// Runs the workload once on `moord`: `n` sessions at `rate` entries/s each for `secs`.
pub async fn quiet_sessions(moord: &Moord, n: usize, rate: u64, secs: u64) -> Result<QuietRun> {
    let run = uuid::Uuid::new_v4();
    let names: Vec<String> = (0..n).map(|i| format!("quiet-{run}-{i}")).collect();
    let bridges: Vec<Ws> = stream::iter(names.iter().map(|s| moord.bridge(s)))
        .buffered(OPENING_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let viewers = stream::iter(names.iter().map(|s| moord.sse(s, 0)))
        .buffered(OPENING_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let per_session = rate * secs;
    let head = per_session + 1; // + bridge.connected
    let epoch = Instant::now();
    let view_lat = Arc::new(Mutex::new(Vec::with_capacity(n * per_session as usize)));
    let mut viewer_tasks = Vec::with_capacity(n);
    for mut r in viewers {
        let view_lat = view_lat.clone();
        viewer_tasks.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(per_session as usize);
            let res = sse_read_until(&mut r, head, epoch, |data, now| {
                if let Some(sent) = sent_at(data) {
                    mine.push(now.saturating_sub(sent));
                }
            })
            .await;
            view_lat
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(mine);
            res
        }));
    }
    let cpu_before = moord.cpu_secs()?;
    let period = Duration::from_micros(1_000_000 / rate.max(1));
    let mut bridge_tasks = Vec::with_capacity(n);
    for (i, ws) in bridges.into_iter().enumerate() {
        let phase = period * i as u32 / n as u32;
        bridge_tasks.push(tokio::spawn(quiet_bridge(
            ws,
            per_session,
            period,
            phase,
            secs,
            epoch,
        )));
    }
    tokio::time::sleep(Duration::from_secs(secs) / 2).await;
    let mut late_open_ms = 0f64;
    let mut late = Vec::with_capacity(LATE_BRIDGES);
    for i in 0..LATE_BRIDGES {
        let started = Instant::now();
        late.push(moord.bridge(&format!("quiet-{run}-late-{i}")).await?);
        late_open_ms = late_open_ms.max(started.elapsed().as_secs_f64() * 1000.0);
    }
    let mut ack_lat = Vec::with_capacity(n * per_session as usize);
    for t in bridge_tasks {
        ack_lat.extend(tokio::time::timeout(GUARD, t).await???);
    }
    for t in viewer_tasks {
        tokio::time::timeout(GUARD, t).await???;
    }
    let cpu = moord.cpu_secs()? - cpu_before;
    let view = std::mem::take(&mut *view_lat.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(QuietRun {
        us_per_entry: cpu * 1e6 / (n as u64 * per_session) as f64,
        ack: Latency::of(ack_lat),
        view: Latency::of(view),
        late_open_ms,
    })
}

/// One quiet bridge: after `phase`, one timed entry per frame every `period` until `total` are
/// sent; returns each entry's send → ack latency (µs) once all are acked. Fails if the pace
/// cannot be kept within three times `secs`.
async fn quiet_bridge(
    ws: Ws,
    total: u64,
    period: Duration,
    phase: Duration,
    secs: u64,
    epoch: Instant,
) -> Result<Vec<u64>> {
    let (mut sink, mut stream) = ws.split();
    let sent_us = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let acker = {
        let sent_us = sent_us.clone();
        tokio::spawn(async move {
            let mut lat = Vec::with_capacity(total as usize);
            while (lat.len() as u64) < total {
                let t = match tokio::time::timeout(GUARD, stream.next()).await {
                    Ok(Some(Ok(Message::Text(t)))) => t,
                    Ok(Some(Ok(_))) => continue,
                    _ => bail!("bridge socket ended with {} of {total} acked", lat.len()),
                };
                if let Ok(ServerToBridge::Ack { producer_seq }) = serde_json::from_str(&t) {
                    let now = epoch.elapsed().as_micros() as u64;
                    let sent = sent_us.lock().unwrap_or_else(|p| p.into_inner());
                    let upto = (producer_seq as usize).min(sent.len());
                    for s in sent.get(lat.len()..upto).unwrap_or_default() {
                        lat.push(now.saturating_sub(*s));
                    }
                }
            }
            Ok(lat)
        })
    };
    tokio::time::sleep(phase).await;
    let start = Instant::now();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for pseq in 1..=total {
        if start.elapsed() > Duration::from_secs(secs * 3) {
            acker.abort();
            bail!("sent {} of {total} entries within {}s", pseq - 1, secs * 3);
        }
        tick.tick().await;
        let now = epoch.elapsed().as_micros() as u64;
        sent_us.lock().unwrap_or_else(|p| p.into_inner()).push(now);
        let frame = BridgeToServer::Entries {
            entries: vec![entry(pseq, now)],
        };
        sink.send(Message::Text(serde_json::to_string(&frame)?.into()))
            .await?;
    }
    let lat = acker.await.context("acker")??;
    // Close the bridge without waiting: the server records the disconnect on its own.
    let _ = sink.close().await;
    Ok(lat)
}
