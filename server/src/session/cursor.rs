//! Viewer cursors, for every transport that resumes a viewer (SSE, viewer WebSockets): the
//! cursor a request names (`Last-Event-ID` wins over `?after=`), and the reset a cursor the log
//! cannot honour gets instead of a silent partial replay (G3).
//!
//! Part of the session core: calls `error` and `util`; never a transport.

use axum::http::HeaderMap;
use moor_protocol::web::Reset;
use moor_protocol::Seq;

use crate::error::ApiError;
use crate::util::query_param;

/// The client's cursor: `Last-Event-ID` header, else `?after=`, else 0.
pub fn cursor(headers: &HeaderMap, query: Option<&str>) -> Result<Seq, ApiError> {
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
pub fn check_cursor(cursor: Seq, head: Seq) -> Option<Reset> {
    (cursor > head).then(|| Reset {
        reason: format!("cursor {cursor} is ahead of the log head {head}; start again from 0"),
        head_seq: head,
        compacted: None,
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

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
