//! The link and spool driven directly, without an agent process.

use std::time::Duration;

use moor_bridge::link::{Link, LinkEnd, LinkPorts};
use moor_bridge::session_dir::SessionDir;
use moor_bridge::spool::Draft;
use moor_bridge::{ConnectError, LinkConfig};
use moor_protocol::payload::{AgentOutput, OutputStream};
use moor_protocol::{close, Seq};
use tokio_util::sync::CancellationToken;

use crate::support::{Event, FakeServer, Script};
use crate::{bare_link, bare_link_to, fast_link, memory_link, within, TOKEN};

fn lines(range: std::ops::Range<u64>) -> Vec<Draft> {
    range
        .map(|i| {
            Draft::new(AgentOutput {
                stream: OutputStream::Stdout,
                text: i.to_string(),
            })
        })
        .collect()
}

/// A session directory for one bridge, in a state directory of its own (kept while it lives).
fn session_dir() -> (tempfile::TempDir, SessionDir) {
    let state = tempfile::tempdir().unwrap();
    let dir = SessionDir::open(state.path(), "s1").unwrap();
    (state, dir)
}

/// [`fast_link`] with a backoff of `initial` doubling up to `max`.
fn backing_off(initial: Duration, max: Duration) -> LinkConfig {
    let mut config = fast_link();
    config.backoff.initial = initial;
    config.backoff.max = max;
    config
}

/// Spool `count` lines, tell the link the session is over, and run it until it ends.
async fn deliver(link: Link, ports: &LinkPorts, dir: &SessionDir, count: u64) -> LinkEnd {
    dir.spool.append(lines(0..count)).await.unwrap();
    ports.finish.send_replace(true);
    within("link ends", link.run(CancellationToken::new()))
        .await
        .unwrap()
}

fn assert_exactly_once_in_order(server: &FakeServer, count: u64) {
    let seen = server.seen.lock().unwrap();
    let seqs: Vec<u64> = seen.entries.iter().map(|e| e.producer_seq).collect();
    assert_eq!(seqs, (1..=count).collect::<Vec<_>>());
    assert_eq!(seen.gaps, 0);
}

#[tokio::test]
async fn link_resends_after_abrupt_drops_without_loss_or_duplicates() {
    // arrange: every connection is cut, unacked, once it has carried 150 entries
    let server = FakeServer::start(Script {
        drop_after_entries: Some(150),
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let config = moor_bridge::LinkConfig {
        batch_max: 64,
        ..fast_link()
    };
    let (link, ports) = bare_link(&server, &dir, config);
    let running = tokio::spawn(link.run(CancellationToken::new()));
    // act
    for chunk in 0..10 {
        dir.spool
            .append(lines(chunk * 100..chunk * 100 + 100))
            .await
            .unwrap();
    }
    ports.finish.send_replace(true);
    let end = within("link ends", running).await.unwrap().unwrap();
    // assert
    assert_eq!(end, LinkEnd::Ended);
    assert_exactly_once_in_order(&server, 1000);
    assert_eq!(dir.spool.acked(), 1000);
    let seen = server.seen.lock().unwrap();
    assert!(
        seen.accepted >= 7,
        "expected many reconnects, got {}",
        seen.accepted
    );
    assert!(seen.ended);
    assert!(seen.auth.iter().all(|a| a == &format!("Bearer {TOKEN}")));
}

#[tokio::test]
async fn with_several_servers_the_link_moves_past_one_that_is_down() {
    // arrange: the first server's port has nobody listening
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let server = FakeServer::start(Script::default()).await;
    let (_state, dir) = session_dir();
    let servers = format!("{dead_url}, {}", server.url());
    let (link, ports) = bare_link_to(&servers, &dir, fast_link());
    let running = tokio::spawn(link.run(CancellationToken::new()));
    // act
    dir.spool.append(lines(0..50)).await.unwrap();
    ports.finish.send_replace(true);
    let end = within("link ends", running).await.unwrap().unwrap();
    // assert
    assert_eq!(end, LinkEnd::Ended);
    assert_exactly_once_in_order(&server, 50);
}

#[tokio::test]
async fn http_401_on_upgrade_is_retried_until_the_server_accepts() {
    let server = FakeServer::start(Script {
        reject_first: 3,
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let (link, ports) = bare_link(&server, &dir, fast_link());

    let end = deliver(link, &ports, &dir, 5).await;

    assert_eq!(end, LinkEnd::Ended);
    let seen = server.seen.lock().unwrap();
    assert_eq!((seen.upgrades, seen.accepted), (4, 1));
    drop(seen);
    assert_exactly_once_in_order(&server, 5);
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_is_declared_dead_after_its_idle_timeout_and_the_link_rebuilt() {
    // arrange: the first connection is welcomed and then hears nothing, like a half-open socket
    let script = Script {
        silent_on: vec![1],
        heartbeat_ms: 1_000,
        idle_ms: 4_000,
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let (_state, dir) = session_dir();
    let config = fast_link();
    let (link, ports) = memory_link(&server, &dir, config.clone());
    // act
    let end = deliver(link, &ports, &dir, 10).await;
    // assert: the link gave up on the silent one only once the idle timeout had passed, then
    // reconnected after one backoff delay and delivered everything there
    assert_eq!(end, LinkEnd::Ended);
    let seen = server.seen.lock().unwrap();
    let silence = seen.at(Event::Upgrade(2)) - seen.at(Event::Welcomed(1));
    let idle = Duration::from_millis(4_000);
    assert!(
        silence >= idle && silence <= idle + config.backoff.initial,
        "reconnected {silence:?} after the last word from the server"
    );
    assert_eq!(seen.accepted, 2);
    drop(seen);
    assert_exactly_once_in_order(&server, 10);
}

#[tokio::test(start_paused = true)]
async fn move_opens_the_new_connection_at_once_and_leaves_the_old_one_only_after_its_welcome() {
    // arrange: a backoff of a minute, which a move must not wait for
    let server = FakeServer::start(Script {
        move_on: vec![1],
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let config = backing_off(Duration::from_secs(60), Duration::from_secs(60));
    let (link, ports) = memory_link(&server, &dir, config);
    // act
    let end = deliver(link, &ports, &dir, 20).await;
    // assert
    assert_eq!(end, LinkEnd::Ended);
    let seen = server.seen.lock().unwrap();
    assert_eq!(
        seen.at(Event::Upgrade(2)),
        seen.at(Event::Welcomed(1)),
        "no delay between the move notice and the new connection"
    );
    let order: Vec<Event> = seen
        .log
        .iter()
        .map(|(_, e)| *e)
        .filter(|e| matches!(e, Event::Welcomed(2) | Event::Gone(1)))
        .collect();
    assert_eq!(order, [Event::Welcomed(2), Event::Gone(1)]);
    assert_eq!(seen.accepted, 2);
    drop(seen);
    assert_exactly_once_in_order(&server, 20);
}

#[tokio::test(start_paused = true)]
async fn refused_reconnects_wait_a_jittered_delay_that_doubles_up_to_the_cap() {
    // arrange: five refusals before the server lets the bridge in
    let server = FakeServer::start(Script {
        reject_first: 5,
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let config = backing_off(Duration::from_secs(1), Duration::from_secs(4));
    let (link, ports) = memory_link(&server, &dir, config);
    // act
    let end = deliver(link, &ports, &dir, 3).await;
    // assert
    assert_eq!(end, LinkEnd::Ended);
    let seen = server.seen.lock().unwrap();
    let attempts = seen.times(|e| matches!(e, Event::Upgrade(_)));
    let delays: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    let ceilings = [1, 2, 4, 4, 4].map(Duration::from_secs);
    assert_eq!(delays.len(), ceilings.len(), "{delays:?}");
    for (delay, ceiling) in delays.iter().zip(ceilings) {
        assert!(
            *delay >= ceiling / 2 && *delay <= ceiling,
            "delay {delay:?} outside [{:?}, {ceiling:?}]: {delays:?}",
            ceiling / 2
        );
    }
    assert_eq!((seen.upgrades, seen.accepted), (6, 1));
    drop(seen);
    assert_exactly_once_in_order(&server, 3);
}

#[tokio::test(start_paused = true)]
async fn only_a_connection_that_stayed_up_past_stable_after_resets_the_backoff() {
    // arrange: two refusals grow the delay; the first accepted connection is closed at once
    // (not stable), the second after 20 s (stable past 10 s)
    let server = FakeServer::start(Script {
        reject_first: 2,
        close_after_ms: vec![(1, 0), (2, 20_000)],
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let mut config = backing_off(Duration::from_secs(1), Duration::from_secs(60));
    config.backoff.stable_after = Duration::from_secs(10);
    let (link, ports) = memory_link(&server, &dir, config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(link.run(shutdown.clone()));
    // act
    server
        .wait_until("a connection after the stable one", |s| s.upgrades >= 5)
        .await;
    ports.finish.send_replace(true);
    shutdown.cancel();
    within("link stops", running).await.unwrap().unwrap();
    // assert: upgrades 3 and 4 are the accepted connections 1 and 2; the third delay (ceiling
    // 4 s) follows the first, a fresh first delay (ceiling 1 s) the second
    let seen = server.seen.lock().unwrap();
    let after_short = seen.at(Event::Upgrade(4)) - seen.at(Event::Gone(3));
    let after_stable = seen.at(Event::Upgrade(5)) - seen.at(Event::Gone(4));
    let secs = Duration::from_secs;
    assert!(
        after_short >= secs(2) && after_short <= secs(4),
        "after a connection that closed at once the delay kept growing: {after_short:?}"
    );
    assert!(
        after_stable >= Duration::from_millis(500) && after_stable <= secs(1),
        "after a stable connection the delay started again from the first: {after_stable:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_the_upgrade_is_given_up_after_the_connect_timeout() {
    // arrange: the first connection is accepted and then ignored
    let server = FakeServer::start(Script {
        unanswered_first: 1,
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let config = fast_link();
    let (link, ports) = memory_link(&server, &dir, config.clone());
    // act
    let end = deliver(link, &ports, &dir, 5).await;
    // assert: the bridge hung up on the mute server at the connect timeout, and the retry
    // (one backoff delay later) delivered everything
    assert_eq!(end, LinkEnd::Ended);
    let seen = server.seen.lock().unwrap();
    let gave_up = seen.at(Event::Gone(1)) - seen.at(Event::Upgrade(1));
    assert_eq!(gave_up, config.connect_timeout);
    let retry = seen.at(Event::Upgrade(2)) - seen.at(Event::Gone(1));
    assert!(retry <= config.backoff.initial, "{retry:?}");
    assert_eq!((seen.upgrades, seen.accepted), (2, 1));
    drop(seen);
    assert_exactly_once_in_order(&server, 5);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_link_sends_a_heartbeat_each_interval_and_stays_up() {
    // arrange: nothing to send, a server that answers heartbeats
    let server = FakeServer::start(Script {
        heartbeat_ms: 1_000,
        idle_ms: 3_000,
        ..Script::default()
    })
    .await;
    let (_state, dir) = session_dir();
    let (link, _ports) = memory_link(&server, &dir, fast_link());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(link.run(shutdown.clone()));
    // act: five heartbeat intervals of silence
    server
        .wait_until("five heartbeats", |s| {
            s.times(|e| matches!(e, Event::Heartbeat(_))).len() >= 5
        })
        .await;
    shutdown.cancel();
    let end = within("link stops", running).await.unwrap().unwrap();
    // assert: one heartbeat per interval, all on the first connection
    assert_eq!(end, LinkEnd::Shutdown);
    let seen = server.seen.lock().unwrap();
    let beats = seen.times(|e| matches!(e, Event::Heartbeat(1)));
    assert!(beats.len() >= 5, "{:#?}", seen.log);
    assert_eq!(
        beats[0] - seen.at(Event::Welcomed(1)),
        Duration::from_secs(1)
    );
    for gap in beats.windows(2).map(|w| w[1] - w[0]) {
        assert_eq!(gap, Duration::from_secs(1));
    }
    assert_eq!(seen.accepted, 1);
}

#[tokio::test]
async fn superseded_is_terminal_and_reported_as_such() {
    let script = Script {
        close_first_with: Some(close::SUPERSEDED),
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let (_state, dir) = session_dir();
    let (link, _ports) = bare_link(&server, &dir, fast_link());

    let err = within("link stops", link.run(CancellationToken::new()))
        .await
        .unwrap_err();

    assert!(
        matches!(
            err,
            ConnectError::Terminal {
                code: close::SUPERSEDED,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_fatal());
    assert_eq!(server.seen.lock().unwrap().accepted, 1);
}

#[tokio::test]
async fn a_non_terminal_close_is_retried() {
    let script = Script {
        close_first_with: Some(close::LIFETIME),
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let (_state, dir) = session_dir();
    let (link, ports) = bare_link(&server, &dir, fast_link());

    let end = deliver(link, &ports, &dir, 3).await;

    assert_eq!(end, LinkEnd::Ended);
    assert_eq!(server.seen.lock().unwrap().accepted, 2);
}

#[tokio::test]
async fn a_normal_close_after_end_is_not_taken_for_the_end_the_link_asks_again() {
    // arrange: the first `End` is answered with a plain 1000 close, not 4004: the server
    // closed the connection (an operator, say) before it read the `End`
    let script = Script {
        close_first_end_with: Some(close::NORMAL),
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let (_state, dir) = session_dir();
    let (link, ports) = bare_link(&server, &dir, fast_link());

    // act
    let end = deliver(link, &ports, &dir, 3).await;

    // assert: only the server's 4004 ends the link: it connected again and said `End` again
    assert_eq!(end, LinkEnd::Ended);
    let seen = server.seen.lock().unwrap();
    assert!(seen.ended, "the session was ended by the server");
    assert_eq!((seen.ends, seen.accepted), (2, 2));
}

#[tokio::test]
async fn a_restarted_bridge_delivers_what_the_previous_one_spooled_with_the_same_producer() {
    // arrange: a first run spooled 50 entries and died before delivering any
    let server = FakeServer::start(Script::default()).await;
    let state = tempfile::tempdir().unwrap();
    let first = SessionDir::open(state.path(), "s1").unwrap();
    first.spool.append(lines(0..50)).await.unwrap();
    let producer = first.producer;
    drop(first);
    // act: the next run adds 10 more and connects
    let dir = SessionDir::open(state.path(), "s1").unwrap();
    assert_eq!(dir.spool.append(lines(50..60)).await.unwrap(), 51..61);
    let (link, ports) = bare_link(&server, &dir, fast_link());
    ports.finish.send_replace(true);
    let end = within("link ends", link.run(CancellationToken::new()))
        .await
        .unwrap();
    // assert
    assert_eq!(end, LinkEnd::Ended);
    assert_exactly_once_in_order(&server, 60);
    assert_eq!(server.seen.lock().unwrap().hellos[0].producer, producer);
}

#[tokio::test]
async fn an_input_in_flight_at_a_crash_is_reported_uncertain_not_replayed() {
    // arrange: the ledger of a bridge that died while writing input 4
    let (state, dir) = session_dir();
    let ledger_path = dir.path().join("inputs.json");
    drop(dir);
    std::fs::write(&ledger_path, r#"{"last_applied":3,"in_flight":4}"#).unwrap();
    let server = FakeServer::start(Script::default()).await;
    let dir = SessionDir::open(state.path(), "s1").unwrap();
    let (link, ports) = bare_link(&server, &dir, fast_link());
    ports.finish.send_replace(true);
    // act
    within("link ends", link.run(CancellationToken::new()))
        .await
        .unwrap();
    // assert
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen.hellos[0].uncertain_inputs, vec![Seq(4)]);
    assert_eq!(seen.hellos[0].last_applied_input, Seq(4));
    // a welcomed Hello carried it; later Hellos do not repeat it
    assert!(dir.ledger.uncertain().is_empty());
}

#[tokio::test]
async fn shutdown_leaves_unacked_entries_in_the_spool() {
    let script = Script {
        no_ack_on: vec![1],
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let (_state, dir) = session_dir();
    let (link, _ports) = bare_link(&server, &dir, fast_link());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(link.run(shutdown.clone()));
    dir.spool.append(lines(0..5)).await.unwrap();
    server
        .wait_until("entries received", |s| s.uncommitted.len() == 5)
        .await;

    shutdown.cancel();
    let end = within("link stops", running).await.unwrap().unwrap();

    assert_eq!(end, LinkEnd::Shutdown);
    assert_eq!(dir.spool.unacked(), 5);
}
