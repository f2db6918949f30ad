//! `GET /api/v1/sessions/{id}/events`: the log as Server-Sent Events.
//!
//! `id:` is the seq, `event:` the kind, `data:` the entry as JSON. Resumes from `Last-Event-ID`
//! (which wins, since `EventSource` resends it on the original URL) or `?after=`. Entries ready
//! at the same time are written in one chunk. The stream ends at shutdown or after the
//! configured lifetime, and the client resumes from its last id; it never buffers without bound
//! because it pulls from a [`Tail`].

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use moor_protocol::web::{Reset, RESET_EVENT};
use moor_protocol::Seq;
use std::sync::Arc;

use moor_protocol::state::SessionState;
use tokio::sync::watch;
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::access::{session_for, Role};
use crate::auth::{query_param, AuthUser};
use crate::error::ApiError;
use crate::state::AppState;
use crate::tail::Tail;

/// Flush a chunk once it holds this much.
const CHUNK_BYTES: usize = 64 * 1024;

/// The client's cursor: `Last-Event-ID` header, else `?after=`, else 0.
pub(crate) fn cursor(headers: &HeaderMap, query: Option<&str>) -> Result<Seq, ApiError> {
    let raw = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("?").to_owned())
        .or_else(|| query_param(query.unwrap_or(""), "after"));
    match raw {
        None => Ok(Seq::ZERO),
        Some(s) if s.trim().is_empty() => Ok(Seq::ZERO),
        Some(s) => s
            .trim()
            .parse::<u64>()
            .map(Seq)
            .map_err(|_| ApiError::InvalidCursor(s)),
    }
}

/// The reset payload for a cursor the server cannot honour, or `None` if it can.
pub(crate) fn check_cursor(cursor: Seq, head: Seq) -> Option<Reset> {
    (cursor > head).then(|| Reset {
        reason: format!("cursor {cursor} is ahead of the log head {head}; start again from 0"),
        head_seq: head,
    })
}

/// The SSE handler.
pub async fn events(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let cursor = cursor(&headers, query.as_deref())?;
    let session = session_for(&state, &who, &key, Role::Viewer).await?;
    // Ends with shutdown, and when the caller's credential is revoked.
    let stop = state.auth.revocations.token_for(&who);
    let role_stop = state.auth.revocations.member_token(&who, session.id);
    let tail = Tail::new(state.store.log.clone(), &state.hub, session.id, cursor);
    // Read the head after subscribing, so the check cannot race a commit.
    let head = state.store.log.find_session(&key).await?.head_seq;
    let body = match check_cursor(cursor, head) {
        Some(reset) => Body::from(format!(
            "event: {RESET_EVENT}\ndata: {}\n\n",
            serde_json::to_string(&reset).unwrap_or_default()
        )),
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
            Body::from_stream(stream(tail, feed, &state, stop, role_stop))
        }
    };
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
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
        deadline: (!cfg.sse_lifetime.is_zero()).then(|| Instant::now() + cfg.sse_lifetime),
        shutdown: stop,
        role_stop,
        started: false,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        if !st.started {
            st.started = true;
            // Reconnect quickly after the server ends a stream.
            return Some((Ok(Bytes::from_static(b"retry: 1000\n\n")), st));
        }
        let mut buf = BytesMut::new();
        fill(&mut st.tail, &mut buf);
        if buf.is_empty() {
            let deadline = st.deadline;
            loop {
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
                    _ = st.keepalive.tick() => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st)),
                    next = st.tail.next() => match next {
                        Ok(f) => {
                            buf.extend_from_slice(f.sse());
                            fill(&mut st.tail, &mut buf);
                        }
                        Err(e) => {
                            tracing::warn!(error = ?e, "sse stream ended by a store error");
                            return None;
                        }
                    },
                }
                break;
            }
        }
        st.keepalive.reset();
        Some((Ok(buf.freeze()), st))
    })
}

fn fill(tail: &mut Tail, buf: &mut BytesMut) {
    while buf.len() < CHUNK_BYTES {
        match tail.ready() {
            Some(f) => buf.extend_from_slice(f.sse()),
            None => break,
        }
    }
}

pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_id_wins_over_after() {
        let mut h = HeaderMap::new();
        assert_eq!(cursor(&h, Some("after=5")).unwrap(), Seq(5));
        h.insert("last-event-id", HeaderValue::from_static("9"));
        assert_eq!(cursor(&h, Some("after=5")).unwrap(), Seq(9));
        assert!(matches!(
            cursor(&HeaderMap::new(), Some("after=abc")),
            Err(ApiError::InvalidCursor(_))
        ));
        assert!(matches!(
            cursor(&HeaderMap::new(), Some("after=-1")),
            Err(ApiError::InvalidCursor(_))
        ));
    }

    #[test]
    fn a_cursor_ahead_of_the_head_is_reset() {
        assert!(check_cursor(Seq(3), Seq(3)).is_none());
        assert_eq!(
            check_cursor(Seq(4), Seq(3)).map(|r| r.head_seq),
            Some(Seq(3))
        );
    }
}
