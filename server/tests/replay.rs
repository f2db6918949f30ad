//! Replay property: whatever the interleaving of appends and viewer attaches, every viewer
//! receives exactly the entries after its cursor, then the live ones — no gap, no duplicate, in
//! order. Runs the real store (a SQLite file), the real group-committing log and hub, with a
//! tiny fan-out buffer so that viewers lag and must resynchronise from the store.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use moor_protocol::{now_ms, Seq, SessionId};
use moor_server::hub::Hub;
use moor_server::session::log::Log;
use moor_server::session::tail::Tail;
use moor_server::store::{self, Append, IdemKey, LogStore, Range};
use proptest::prelude::*;
use serde_json::json;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone)]
enum Op {
    /// Append this many entries (as one request, or one request per entry).
    Append { n: usize, split: bool },
    /// Attach a viewer at this fraction of the current head (may be exactly the head).
    Attach { at: f64 },
    /// Let every viewer task run for a moment.
    Yield,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..12, any::<bool>()).prop_map(|(n, split)| Op::Append { n, split }),
        2 => (0.0f64..=1.0).prop_map(|at| Op::Attach { at }),
        1 => Just(Op::Yield),
    ]
}

fn line(i: usize) -> Append {
    Append {
        ts: now_ms(),
        kind: "agent.output".into(),
        author: "bridge".into(),
        payload: json!({"stream": "stdout", "text": format!("line-{i}")}).into(),
        key: IdemKey::None,
    }
}

async fn scenario(ops: Vec<Op>, capacity: usize) {
    let dir = std::env::temp_dir().join(format!("moor-replay-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let store: Arc<dyn LogStore> =
        store::connect(&format!("sqlite:{}", dir.join("t.db").display()))
            .await
            .unwrap()
            .log;
    let session: SessionId = store.open_session("replay", None).await.unwrap().id;
    let hub = Hub::with_capacity(capacity);
    let tasks = TaskTracker::new();
    let log = Log::new(store.clone(), hub.clone(), tasks.clone(), Duration::ZERO);

    let mut produced = 0usize;
    let mut viewers = Vec::new();
    for op in ops {
        match op {
            Op::Append { n, split } => {
                let batch: Vec<Append> = (0..n).map(|i| line(produced + i + 1)).collect();
                produced += n;
                if split {
                    // Concurrent requests: they may be grouped into one commit.
                    let futs = batch.into_iter().map(|a| log.append(session, vec![a]));
                    for r in futures_util::future::join_all(futs).await {
                        r.unwrap();
                    }
                } else {
                    log.append(session, batch).await.unwrap();
                }
            }
            Op::Attach { at } => {
                let cursor = Seq(((produced as f64) * at).floor() as u64);
                let mut tail = Tail::new(store.clone(), &hub, session, cursor);
                viewers.push((
                    cursor,
                    tokio::spawn(async move {
                        let mut got = Vec::new();
                        // Collect until told the final head; the timeout is only a failure guard.
                        loop {
                            match tokio::time::timeout(Duration::from_secs(10), tail.next()).await {
                                Ok(Ok(f)) => got.push((**f.entry()).clone()),
                                Ok(Err(e)) => panic!("tail failed: {e}"),
                                Err(_) => return got,
                            }
                            if got.last().and_then(|e| e.payload.get("end")).is_some() {
                                return got;
                            }
                        }
                    }),
                ));
            }
            Op::Yield => tokio::task::yield_now().await,
        }
    }
    // A final marker entry lets every viewer stop on an event instead of a timeout.
    let mut end = line(produced + 1);
    end.payload = json!({"end": true}).into();
    log.append(session, vec![end]).await.unwrap();
    let head = produced as u64 + 1;
    let all = store
        .read(session, Range::After(Seq::ZERO), 100_000)
        .await
        .unwrap();
    assert_eq!(all.len() as u64, head);
    for (cursor, viewer) in viewers {
        let got = viewer.await.unwrap();
        let seqs: Vec<u64> = got.iter().map(|e| e.seq.0).collect();
        let want: Vec<u64> = (cursor.0 + 1..=head).collect();
        assert_eq!(seqs, want, "viewer at cursor {cursor}");
        assert_eq!(
            got,
            all[cursor.0 as usize..].to_vec(),
            "viewer at cursor {cursor} got other content"
        );
    }
    log.close();
    tasks.close();
    tasks.wait().await;
    let _ = std::fs::remove_dir_all(&dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_viewer_gets_exactly_the_entries_after_its_cursor(
        ops in proptest::collection::vec(op(), 1..40),
        capacity in prop_oneof![Just(2usize), Just(8), Just(1024)],
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(scenario(ops, capacity));
    }
}
