//! Viewers: SSE and WebSocket clients re-attach from any point and see a gap-free,
//! duplicate-free log (G1, G3), whatever happens to their connections.

use std::time::Duration;

use moor_e2e::assert::summary;
use moor_e2e::sse::ViewerState;
use moor_e2e::{
    assert_contiguous, eventually_some, lines, FaultProxy, RawBridge, Rig, ServerOpts, SseClient,
    SseOpts, TestServer, WsViewer, WAIT,
};
use moor_protocol::bridge::BridgeToServer;
use moor_protocol::{kinds, BodyError, Entry, EntryBody, NewEntry, ProducerId};
use serde_json::json;

/// The viewer received exactly `log`: every entry once, in order, identical.
#[track_caller]
fn assert_saw_exactly(who: &str, state: &ViewerState, log: &[Entry]) {
    let seqs: Vec<u64> = state.entries.iter().map(|e| e.seq.0).collect();
    let want: Vec<u64> = log.iter().map(|e| e.seq.0).collect();
    assert_eq!(
        seqs,
        want,
        "{who} got seqs that differ from the log ({})",
        summary(log)
    );
    assert_eq!(
        state.entries, log,
        "{who} got entries whose content differs from /entries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_viewers_resume_through_resets_and_cuts_and_end_with_the_full_log() {
    // arrange: the bridge streams through its own proxy, the viewers through another one.
    let opts = ServerOpts::new().flag("--keepalive-ms", 200);
    let mut rig = Rig::start(opts, &["count", "1000", "--interval-ms", "5"]).await;
    let viewer_proxy = FaultProxy::start(rig.server.addr()).await;
    let viewer_opts = SseOpts {
        idle_timeout: Some(Duration::from_secs(3)),
        ..SseOpts::default()
    };
    let viewers: Vec<SseClient> = (0..3)
        .map(|_| {
            SseClient::connect(
                &viewer_proxy.url(),
                rig.server.token(),
                rig.id,
                viewer_opts.clone(),
            )
        })
        .collect();

    // act: six times, once every viewer got 30 entries more than any of them had at the last
    // break (so each has a live, resumed connection), break all their connections.
    let mut mark = 30;
    for round in 0..6 {
        for v in &viewers {
            v.wait_seq(mark, WAIT).await;
        }
        let broken = if round % 2 == 0 {
            viewer_proxy.reset_all().await
        } else {
            viewer_proxy.cut_all().await
        };
        assert!(
            broken >= viewers.len(),
            "round {round}: every viewer had a live connection"
        );
        mark = viewers
            .iter()
            .map(|v| v.recorder().with(ViewerState::last_seq))
            .max()
            .unwrap_or(0)
            + 30;
    }

    // assert
    let log = rig.finish(&lines(1000)).await;
    let head = log.last().expect("log").seq.0;
    for (i, v) in viewers.iter().enumerate() {
        v.wait_seq(head, WAIT).await;
        let state = v.snapshot();
        assert_saw_exactly(&format!("viewer {i}"), &state, &log);
        assert!(
            state.connections >= 7,
            "viewer {i} reconnected after each break: {} connections",
            state.connections
        );
        assert!(
            state.resets.is_empty(),
            "viewer {i} got a reset: {:?}",
            state.resets
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_viewer_loses_nothing_when_the_server_caps_stream_lifetime() {
    // arrange: streams end after 1 s; the agent runs for ~4 s.
    let opts = ServerOpts::new().flag("--sse-lifetime-ms", 1000);
    let mut rig = Rig::start(opts, &["count", "400", "--interval-ms", "10"]).await;
    let viewer = SseClient::connect(
        &rig.server.url(),
        rig.server.token(),
        rig.id,
        SseOpts::default(),
    );

    // act: nothing; the server ends the stream every second and the viewer resumes.

    // assert
    let log = rig.finish(&lines(400)).await;
    let head = log.last().expect("log").seq.0;
    viewer.wait_seq(head, WAIT).await;
    let state = viewer.snapshot();
    assert_saw_exactly("viewer", &state, &log);
    assert!(
        state.connections >= 3,
        "the lifetime cap should have ended streams: {} connections",
        state.connections
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_after_cursor_gives_exactly_the_entries_after_it() {
    // arrange: a finished session.
    let opts = ServerOpts::new().flag("--keepalive-ms", 200);
    let mut rig = Rig::start(opts, &["count", "50"]).await;
    let log = rig.finish(&lines(50)).await;
    let head = log.last().expect("log").seq.0;

    for after in [0, 1, 10, head - 1, head] {
        // act
        let query_token = after % 2 == 1;
        let viewer = SseClient::connect(
            &rig.server.url(),
            rig.server.token(),
            rig.id,
            SseOpts {
                after: Some(after),
                token_in_query: query_token,
                ..SseOpts::default()
            },
        );

        // assert: everything after the cursor arrives, then a keep-alive shows the stream is
        // live and nothing else is coming before it.
        let keepalives_needed = viewer.snapshot().keepalives + 1;
        viewer
            .wait_for(
                WAIT,
                &format!("entries after {after} and a keep-alive"),
                |s| (s.last_seq() >= head || after == head) && s.keepalives >= keepalives_needed,
            )
            .await;
        let state = viewer.snapshot();
        assert_saw_exactly(&format!("?after={after}"), &state, &log[after as usize..]);
        let page = rig.api.entries_after(rig.id, after, 1000).await;
        assert_eq!(
            page.entries,
            log[after as usize..],
            "/entries?after={after}"
        );
        assert_eq!(page.head_seq.0, head);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_cursor_ahead_of_head_gets_a_reset_event() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "20"]).await;
    let log = rig.finish(&lines(20)).await;
    let head = log.last().expect("log").seq.0;

    for (how, opts) in [
        (
            "?after",
            SseOpts {
                after: Some(head + 100),
                ..SseOpts::default()
            },
        ),
        (
            "Last-Event-ID",
            SseOpts {
                last_event_id: Some((head + 1).to_string()),
                ..SseOpts::default()
            },
        ),
    ] {
        // act
        let viewer = SseClient::connect(&rig.server.url(), rig.server.token(), rig.id, opts);

        // assert
        viewer
            .wait_for(
                WAIT,
                &format!("a reset for a cursor ahead of head ({how})"),
                |s| !s.resets.is_empty(),
            )
            .await;
        viewer
            .wait_for(WAIT, "the client to stop after the reset", |s| s.finished)
            .await;
        let state = viewer.snapshot();
        assert!(
            state.entries.is_empty(),
            "{how}: no entries for a cursor ahead of head"
        );
        assert_eq!(state.resets.len(), 1, "{how}: one reset");
        assert_eq!(
            state.resets[0].head_seq.0, head,
            "{how}: the reset names the head"
        );
    }
    assert_eq!(
        rig.api.entries_all(rig.id).await,
        log,
        "the log is unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_viewer_gets_the_same_entries_as_sse() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "300", "--interval-ms", "5"]).await;

    // act: both viewers attach from the start while the bridge streams.
    let ws = WsViewer::connect(rig.server.addr(), rig.server.token(), rig.id, 0).await;
    let sse = SseClient::connect(
        &rig.server.url(),
        rig.server.token(),
        rig.id,
        SseOpts::default(),
    );

    // assert
    let log = rig.finish(&lines(300)).await;
    let head = log.last().expect("log").seq.0;
    ws.recorder()
        .wait_for(WAIT, &format!("websocket viewer at seq {head}"), |s| {
            s.last_seq() >= head
        })
        .await;
    sse.wait_seq(head, WAIT).await;
    let ws_state = ws.recorder().snapshot();
    assert_contiguous(&ws_state.entries);
    assert_saw_exactly("websocket viewer", &ws_state, &log);
    assert_saw_exactly("sse viewer", &sse.snapshot(), &log);
}

/// Forward compatibility: an entry of a kind nothing in this tree models, with an arbitrary
/// payload, is stored and streamed exactly as the producer wrote it, and the state fold counts
/// it as unknown rather than malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_of_a_kind_nobody_knows_reaches_sse_viewers_unchanged() {
    // arrange: a raw bridge, a viewer, and a kind from some newer producer.
    let server = TestServer::start(ServerOpts::new()).await;
    let mut bridge = RawBridge::connect(server.addr(), Some(server.token()))
        .await
        .expect("bridge socket");
    let session = bridge.hello("future", ProducerId::new()).await.session_id;
    let viewer = SseClient::connect(&server.url(), server.token(), session, SseOpts::default());
    let kind = "agent.future_thing";
    let payload = json!({
        "nested": {"list": [1, "two", null, {"x": 1.5, "neg": -3}], "flag": true},
        "text": "quotes \" and é and \u{1}",
        "empty": {},
    });
    assert!(
        matches!(
            EntryBody::decode(kind, &payload),
            Err(BodyError::UnknownKind)
        ),
        "the test needs a kind nobody models"
    );
    let future = NewEntry {
        producer_seq: 1,
        ts: moor_protocol::now_ms(),
        kind: kind.into(),
        payload: payload.clone(),
    };

    // act
    bridge
        .send(&BridgeToServer::Entries {
            entries: vec![future],
        })
        .await;
    bridge.wait_ack(1, WAIT).await;

    // assert: the viewer got it as sent, and it is what the log stores.
    viewer
        .wait_for(WAIT, "the future entry", |s| {
            s.entries.iter().any(|e| e.kind == kind)
        })
        .await;
    let seen = viewer.snapshot().entries;
    let seen = seen.iter().find(|e| e.kind == kind).expect("seen");
    assert_eq!(seen.payload, payload, "payload changed on the way");
    assert_eq!(seen.author, kinds::AUTHOR_BRIDGE);
    let stored = server.entries_all(session).await;
    assert_eq!(stored.iter().find(|e| e.kind == kind), Some(seen));
    let api = server.api();
    let counts = eventually_some(WAIT, "the state to fold the entry", || async {
        let state = api.session(&session.to_string()).await?.state?;
        (state.head >= seen.seq).then_some(state.counts)
    })
    .await;
    assert_eq!(counts.unknown_kinds, 1, "{counts:?}");
    assert_eq!(counts.malformed, 0, "{counts:?}");
}
