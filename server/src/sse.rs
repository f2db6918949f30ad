//! `GET /api/v1/sessions/{id}/events`: the log as Server-Sent Events.
//!
//! `id:` is the seq, `event:` the kind, `data:` the entry as JSON. Resumes from `Last-Event-ID`
//! (which wins, since `EventSource` resends it on the original URL) or `?after=`. Entries ready
//! at the same time are written in one chunk. The stream ends at shutdown or after the
//! configured lifetime, and the client resumes from its last id. It never buffers without bound:
//! it pulls from a [`Tail`] (one page of history at most) into chunks of about [`CHUNK_BYTES`],
//! and a pump hands them to the response one at a time; a reader that takes no chunk for the
//! stall timeout is cut off with a comment saying so, and resumes with `Last-Event-ID` like
//! after any other end. A transport: it calls the session core, `access` and `viewing`, never
//! `http` or `ws`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::{Bytes, BytesMut};

use moor_protocol::web::RESET_EVENT;
use std::sync::Arc;

use moor_protocol::state::SessionState;
use tokio::sync::watch;
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::access::AuthUser;
use crate::compress::GzipStream;
use crate::error::ApiError;
use crate::metrics::Transport;
use crate::session::cursor::check_cursor;
use crate::session::tail::Tail;
use crate::sse_pump::Pump;
use crate::state::AppState;
use crate::util::{query_param, sleep_until_opt};
use crate::viewing::{open_viewer_stream, Opened};

/// Flush a chunk once it holds this much.
const CHUNK_BYTES: usize = 64 * 1024;

/// The SSE handler.
#[utoipa::path(
    get, path = "/sessions/{id}/events", operation_id = "streamEvents", tag = "streams",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("after" = Option<u64>, Query, description = "Start after this seq (default 0)"),
        ("state" = Option<bool>, Query, description = "`true`: also send coalesced `state` events carrying the `SessionState`"),
        ("access_token" = Option<String>, Query, description = "The access token, for clients that cannot set headers (see the `access_token` security scheme)"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this seq; wins over `after`"),
    ),
    responses(
        (status = 200, description = "The log as Server-Sent Events: `id:` the seq, `event:` the kind, `data:` the `Entry` as JSON; `event: reset` with a `Reset` for a cursor ahead of the log; `event: state` with a `SessionState` when asked for", content((String = "text/event-stream"))),
        crate::openapi::ReadErrors,
    )
)]
pub async fn events(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let Opened {
        cursor,
        session,
        slot,
        stop,
        role_stop,
        ..
    } = open_viewer_stream(&state, &who, &key, &headers, query.as_deref()).await?;
    let tail = Tail::new(state.store.log.clone(), &state.hub, session.id, cursor)
        .page_bytes(state.config.max_page_bytes)
        .counted(Transport::Sse);
    // Read the head after subscribing, so the check cannot race a commit.
    let head = state.store.log.find_session(&key).await?.head_seq;
    let gzip = crate::compress::accepts_gzip(&headers);
    let body = match check_cursor(cursor, head) {
        Some(reset) => {
            let text = format!(
                "event: {RESET_EVENT}\ndata: {}\n\n",
                serde_json::to_string(&reset).unwrap_or_default()
            );
            match gzip {
                true => Body::from(crate::compress::gzip(text.as_bytes())),
                false => Body::from(text),
            }
        }
        None => {
            let feed = (query_param(query.as_deref().unwrap_or(""), "state").as_deref()
                == Some("true"))
            .then(|| {
                let mut rx = state.states.watch(session.id);
                // The first event carries the state as it is now.
                rx.mark_changed();
                StateFeed {
                    rx,
                    sent_at: None,
                    due: None,
                }
            });
            Body::from_stream(Pump::new(
                stream(tail, feed, &state, stop, role_stop),
                &state.sse_stalls,
                slot,
                state.hub.clone(),
                gzip.then(GzipStream::new),
            ))
        }
    };
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    match gzip {
        true => crate::compress::mark_gzip(h),
        false => crate::compress::mark_vary(h),
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

/// Minimum time between two `state` events on one stream: state changes are coalesced.
const STATE_EVERY: Duration = Duration::from_millis(250);
/// SSE event name of a coalesced [`moor_protocol::state::SessionState`] update (no `id:`, so
/// it never moves the client's cursor).
pub const STATE_EVENT: &str = "state";

/// Coalesced state updates for streams opened with `?state=true`.
struct StateFeed {
    rx: watch::Receiver<Arc<SessionState>>,
    sent_at: Option<Instant>,
    due: Option<Instant>,
}

impl StateFeed {
    fn event(&mut self) -> Bytes {
        self.sent_at = Some(Instant::now());
        self.due = None;
        let state = self.rx.borrow_and_update().clone();
        let data = serde_json::to_string(&*state).unwrap_or_default();
        Bytes::from(format!("event: {STATE_EVENT}\ndata: {data}\n\n"))
    }
}

async fn state_changed(feed: &mut Option<StateFeed>) -> bool {
    match feed {
        Some(f) => f.rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

struct StreamState {
    /// Counts this stream as a viewer while it lives.
    _watching: crate::hub::Watching,
    state: Option<StateFeed>,
    tail: Tail,
    keepalive: Interval,
    /// When the stream last wrote something: a keep-alive is due a period after it. The timer
    /// is moved on when it fires early, not on every write (which would touch the timer wheel
    /// once per entry).
    last_write: Instant,
    deadline: Option<Instant>,
    shutdown: CancellationToken,
    /// Cancelled when the caller's role on the session is removed or changed.
    role_stop: CancellationToken,
    started: bool,
}

fn stream(
    tail: Tail,
    feed: Option<StateFeed>,
    state: &AppState,
    stop: CancellationToken,
    role_stop: CancellationToken,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let cfg = &state.config;
    let period = cfg.keepalive.max(Duration::from_millis(10));
    let mut keepalive = interval_at(Instant::now() + period, period);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let st = StreamState {
        _watching: state.hub.watching(tail.session()),
        state: feed,
        tail,
        keepalive,
        last_write: Instant::now(),
        deadline: (!cfg.sse_lifetime.is_zero()).then(|| Instant::now() + cfg.sse_lifetime),
        shutdown: stop,
        role_stop,
        started: false,
    };
    futures_util::stream::unfold(st, move |mut st| async move {
        if !st.started {
            st.started = true;
            // Reconnect quickly after the server ends a stream.
            return Some((Ok(Bytes::from_static(b"retry: 1000\n\n")), st));
        }
        let chunk = match ready_chunk(&mut st.tail) {
            Some(chunk) => chunk,
            None => loop {
                let deadline = st.deadline;
                let state_due = st.state.as_ref().and_then(|f| f.due);
                tokio::select! {
                    _ = st.shutdown.cancelled() => return None,
                    _ = st.role_stop.cancelled() => return None,
                    alive = state_changed(&mut st.state) => {
                        let feed = st.state.as_mut()?;
                        if !alive {
                            st.state = None;
                            return Some((Ok(Bytes::from_static(b": state feed ended\n\n")), st));
                        }
                        match feed.sent_at {
                            Some(at) if at.elapsed() < STATE_EVERY => {
                                feed.due = Some(at + STATE_EVERY);
                                continue;
                            }
                            _ => return Some((Ok(feed.event()), st)),
                        }
                    }
                    _ = sleep_until_opt(state_due) => {
                        let feed = st.state.as_mut()?;
                        return Some((Ok(feed.event()), st));
                    }
                    _ = sleep_until_opt(deadline) => return None,
                    _ = st.keepalive.tick() => {
                        let due = st.last_write + period;
                        if Instant::now() < due {
                            st.keepalive.reset_at(due);
                            continue;
                        }
                        st.last_write = Instant::now();
                        return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
                    }
                    ready = st.tail.wait() => match ready {
                        Ok(()) => match ready_chunk(&mut st.tail) {
                            Some(chunk) => break chunk,
                            None => continue,
                        },
                        Err(e) => {
                            tracing::warn!(error = ?e, "sse stream ended by a store error");
                            return None;
                        }
                    },
                }
            },
        };
        st.last_write = Instant::now();
        Some((Ok(chunk), st))
    })
}

/// What the tail has at hand, as one chunk: a run of a stored page's events as the page holds
/// them (about 64 KiB), or the frames at hand written one after another into about
/// [`CHUNK_BYTES`] (up to the next run, which goes as a chunk of its own).
fn ready_chunk(tail: &mut Tail) -> Option<Bytes> {
    if let Some(run) = tail.ready_sse() {
        return Some(run);
    }
    let mut buf = BytesMut::new();
    while buf.len() < CHUNK_BYTES && !tail.run_is_next() {
        match tail.ready() {
            Some(f) => f.write_sse(&mut buf),
            None => break,
        }
    }
    (!buf.is_empty()).then(|| buf.freeze())
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use moor_protocol::payload::BridgeConnected;
    use moor_protocol::{kinds, EntryBody, Seq};
    use serde_json::json;

    use super::*;
    use crate::hub::{LIVE_PAYLOAD_BYTES, SESSION_LIVE_BYTES};
    use crate::state::testing;
    use crate::store::{Append, IdemKey, Range};

    #[tokio::test]
    async fn an_idle_stream_sends_keep_alives_at_the_interval_and_ends_at_its_lifetime() {
        // arrange: a session with one entry, tailed past it on real time (the store read)
        let t = testing::state(|c| {
            c.keepalive = Duration::from_secs(15);
            c.sse_lifetime = Duration::from_secs(40);
        })
        .await;
        let state = &t.state;
        let session = state.store.log.open_session("s", None).await.unwrap().id;
        let entry = Append {
            ts: 0,
            kind: kinds::BRIDGE_CONNECTED.into(),
            author: kinds::AUTHOR_SERVER.into(),
            payload: EntryBody::from(BridgeConnected {
                connection: 1,
                producer: None,
                agent: None,
            })
            .payload()
            .into(),
            key: IdemKey::None,
        };
        state.log.append(session, vec![entry]).await.unwrap();
        let mut tail = Tail::new(state.store.log.clone(), &state.hub, session, Seq::ZERO);
        assert_eq!(tail.next().await.unwrap().seq(), Seq(1));
        // act: nothing happens on the session for a long (virtual) while
        tokio::time::pause();
        let start = Instant::now();
        let body = stream(
            tail,
            None,
            state,
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let mut body = std::pin::pin!(body);
        let mut seen = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = String::from_utf8(chunk.unwrap().to_vec()).unwrap();
            seen.push((start.elapsed().as_secs(), chunk));
        }
        let ended = start.elapsed();
        // assert: the retry hint at once, keep-alives at 15 and 30 s, the end at 40 s
        let expect = [
            (0, "retry: 1000\n\n"),
            (15, ": keep-alive\n\n"),
            (30, ": keep-alive\n\n"),
        ];
        let seen: Vec<(u64, &str)> = seen.iter().map(|(at, c)| (*at, c.as_str())).collect();
        assert_eq!(seen, expect);
        // (Timers have millisecond resolution.)
        assert!(
            ended.abs_diff(Duration::from_secs(40)) <= Duration::from_millis(2),
            "{ended:?}"
        );
    }

    fn output(text: String) -> Append {
        Append {
            ts: 0,
            kind: kinds::AGENT_OUTPUT.into(),
            author: kinds::AUTHOR_BRIDGE.into(),
            payload: json!({ "text": text }).into(),
            key: IdemKey::None,
        }
    }

    #[tokio::test]
    async fn a_tail_gets_a_large_live_entry_whole_and_reads_one_over_the_fan_outs_budget_from_the_store(
    ) {
        // arrange: a tail that has caught up with a one-entry session, so it is live
        let t = testing::state(|_| {}).await;
        let state = &t.state;
        let session = state.store.log.open_session("s", None).await.unwrap().id;
        state
            .log
            .append(session, vec![output("a".into())])
            .await
            .unwrap();
        let mut tail = Tail::new(state.store.log.clone(), &state.hub, session, Seq::ZERO);
        assert_eq!(tail.next().await.unwrap().seq(), Seq(1));
        // a second subscriber makes the hub replace the session's channel with a full one, and
        // the tail's next entry comes from the store after it subscribes again
        let mut watcher = state.hub.subscribe(session);
        state
            .log
            .append(session, vec![output("b".into())])
            .await
            .unwrap();
        assert_eq!(tail.next().await.unwrap().seq(), Seq(2));
        assert!(!watcher.recv().await.unwrap().is_notice());
        let pages = state.hub.metrics().replay_pages.get();
        // act: an entry over the small-entry bound, one over the session's whole budget for
        // large entries, and a small one are committed while the tail is live
        let large = "x".repeat(LIVE_PAYLOAD_BYTES * 4);
        let huge = "x".repeat(SESSION_LIVE_BYTES);
        let batch = vec![
            output(large.clone()),
            output(huge.clone()),
            output("c".into()),
        ];
        state.log.append(session, batch).await.unwrap();
        let mut got = Vec::new();
        let mut read_before = Vec::new();
        for _ in 0..3 {
            let f = tail.next().await.unwrap();
            got.push((f.seq().0, f.entry().payload["text"].as_str().unwrap().len()));
            read_before.push(state.hub.metrics().replay_pages.get() > pages);
        }
        // assert: the fan-out carried the large entry whole, so the tail had it without a store
        // read, and the huge one as a notice without its payload, which the tail read from the
        // store; the tail gave every entry once, in order, whole
        assert!(!watcher.recv().await.unwrap().is_notice());
        let notice = watcher.recv().await.unwrap();
        assert!(notice.is_notice() && notice.entry().payload.is_null());
        assert!(!watcher.recv().await.unwrap().is_notice());
        assert_eq!(got, [(3, large.len()), (4, huge.len()), (5, 1)]);
        assert_eq!(read_before, [false, true, true]);
    }

    fn output_n(i: u64) -> Append {
        output(i.to_string())
    }

    /// Every chunk `tail` has until its cursor reaches `head`.
    async fn chunks_until(tail: &mut Tail, head: u64) -> Vec<Bytes> {
        let mut chunks = Vec::new();
        while tail.cursor().0 < head {
            tail.wait().await.unwrap();
            chunks.extend(ready_chunk(tail));
        }
        chunks
    }

    fn ids(chunks: &[Bytes]) -> Vec<u64> {
        let text: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        String::from_utf8(text)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("id: ")?.parse().ok())
            .collect()
    }

    #[tokio::test]
    async fn viewers_catching_up_from_one_page_send_slices_of_its_events_then_live_frames() {
        // arrange: a session longer than a page
        let t = testing::state(|_| {}).await;
        let state = &t.state;
        let session = state.store.log.open_session("s", None).await.unwrap().id;
        let batch: Vec<Append> = (1..=1500).map(output_n).collect();
        state.log.append(session, batch).await.unwrap();
        let tail = || Tail::new(state.store.log.clone(), &state.hub, session, Seq::ZERO);
        let (mut a, mut b) = (tail(), tail());

        // act: both ask for the first page, both catch up, then an entry is committed while
        // they are live
        a.wait().await.unwrap();
        b.wait().await.unwrap();
        let from_a = chunks_until(&mut a, 1500).await;
        let from_b = chunks_until(&mut b, 1500).await;
        state.log.append(session, vec![output_n(0)]).await.unwrap();
        let live = chunks_until(&mut a, 1501).await;

        // assert: every entry once and in order, in chunks of about CHUNK_BYTES; the first
        // page's events are one text both viewers send, not a copy each
        assert_eq!(ids(&from_a), (1..=1500).collect::<Vec<u64>>());
        assert_eq!(from_a, from_b);
        assert!(from_a.len() > 2 && from_a.iter().all(|c| c.len() < CHUNK_BYTES + 100));
        assert_eq!(from_a[0].as_ptr(), from_b[0].as_ptr(), "one text for both");
        let stored = state
            .store
            .log
            .read_raw(session, Range::After(Seq::ZERO), 1)
            .await;
        let mut first = BytesMut::new();
        stored.unwrap().0[0].write_sse(&mut first);
        assert!(from_a[0].starts_with(&first), "the event as stored");
        assert_eq!(ids(&live), [1501]);
        assert!(a.ready().is_none() && a.ready_sse().is_none());
        // (the last page, read alone, is written frame by frame)
        let mut last = Tail::new(state.store.log.clone(), &state.hub, session, Seq(1000));
        last.wait().await.unwrap();
        assert!(!last.run_is_next() && last.ready_sse().is_none());
        assert_eq!(
            ids(&chunks_until(&mut last, 1501).await),
            (1001..=1501).collect::<Vec<u64>>()
        );
    }

    #[tokio::test]
    async fn a_live_tail_misses_nothing_when_its_sessions_channel_grows_under_it() {
        // arrange: a tail alone on a session, live (its channel is the small first one)
        let t = testing::state(|_| {}).await;
        let state = &t.state;
        let session = state.store.log.open_session("s", None).await.unwrap().id;
        state.log.append(session, vec![output_n(1)]).await.unwrap();
        let mut tail = Tail::new(state.store.log.clone(), &state.hub, session, Seq::ZERO);
        assert_eq!(tail.next().await.unwrap().seq(), Seq(1));
        state.log.append(session, vec![output_n(2)]).await.unwrap();
        // act: a second subscriber grows the channel; then a batch bigger than the small
        // channel, and single entries
        let _viewer = Tail::new(state.store.log.clone(), &state.hub, session, Seq::ZERO);
        state.log.append(session, vec![output_n(3)]).await.unwrap();
        let batch: Vec<Append> = (4..40).map(output_n).collect();
        state.log.append(session, batch).await.unwrap();
        state.log.append(session, vec![output_n(40)]).await.unwrap();
        let mut got = Vec::new();
        for _ in 2..=40 {
            got.push(tail.next().await.unwrap().seq().0);
        }
        // assert: every entry once, in order
        assert_eq!(got, (2..=40).collect::<Vec<u64>>());
        assert!(tail.ready().is_none());
    }

    #[tokio::test]
    async fn a_lone_tail_misses_nothing_when_a_big_batch_grows_its_channel() {
        // arrange: a live tail alone on a session
        let t = testing::state(|_| {}).await;
        let state = &t.state;
        let session = state.store.log.open_session("s", None).await.unwrap().id;
        state.log.append(session, vec![output_n(1)]).await.unwrap();
        let mut tail = Tail::new(state.store.log.clone(), &state.hub, session, Seq::ZERO);
        assert_eq!(tail.next().await.unwrap().seq(), Seq(1));
        // act: batches bigger than the small channel, then small ones
        for b in 0..3 {
            let batch: Vec<Append> = (0..50).map(|i| output_n(b * 50 + i)).collect();
            state.log.append(session, batch).await.unwrap();
            state.log.append(session, vec![output_n(0)]).await.unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..153 {
            got.push(tail.next().await.unwrap().seq().0);
        }
        // assert
        assert_eq!(got, (2..=154).collect::<Vec<u64>>());
    }
}
