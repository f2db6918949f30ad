//! WebSocket close codes used by `moord`. Codes 4000–4999 are Mooring's own.
//!
//! For a bridge, only [`is_terminal`] codes end its retry loop; every other code, standard or
//! not, means "reconnect with backoff".

/// Normal closure.
pub const NORMAL: u16 = 1000;
/// The server is going away (shutdown); reconnect, possibly to another node.
pub const GOING_AWAY: u16 = 1001;
/// Protocol error at the WebSocket layer.
pub const PROTOCOL_ERROR: u16 = 1002;
/// Frame too large.
pub const MESSAGE_TOO_BIG: u16 = 1009;
/// Unexpected server error.
pub const INTERNAL_ERROR: u16 = 1011;

/// A frame could not be decoded or was not expected in this state.
pub const BAD_FRAME: u16 = 4000;
/// The credentials were refused or revoked. Terminal for a bridge.
pub const UNAUTHORIZED: u16 = 4001;
/// The peer speaks another protocol version. Terminal for a bridge.
pub const VERSION_MISMATCH: u16 = 4002;
/// A newer connection for the same session took over. Terminal for a bridge.
pub const SUPERSEDED: u16 = 4003;
/// The session has ended; nothing more can be appended. Terminal for a bridge.
pub const SESSION_ENDED: u16 = 4004;
/// A producer seq skipped ahead of the server's mark; reconnect and resend from the mark.
pub const PRODUCER_GAP: u16 = 4005;
/// A replayed producer seq carried different content from what is stored. Terminal for a
/// bridge: its spool and the server disagree about history.
pub const CONTENT_MISMATCH: u16 = 4006;
/// No frame arrived within the idle timeout.
pub const HEARTBEAT_TIMEOUT: u16 = 4007;
/// The viewer fell behind the live stream; reconnect with your cursor.
pub const LAGGED: u16 = 4008;
/// The connection reached its maximum lifetime; reconnect.
pub const LIFETIME: u16 = 4009;
/// The server had an internal error handling this connection; reconnect.
pub const SERVER_ERROR: u16 = 4010;
/// The account's quota (sessions, live sessions or stored log bytes) is used up; the reason
/// says which. Retrying does not help until the owner frees some.
pub const QUOTA_EXCEEDED: u16 = 4012;
/// A later connection of the same bridge (same producer) took over: either the bridge moved
/// on purpose, or a connect attempt it had given up on reached the server late. Not terminal:
/// a bridge that still uses this connection reconnects, and its new connection takes over.
pub const SUPERSEDED_BY_SAME_BRIDGE: u16 = 4013;
/// The server's disk is full: the entries (or the handshake's own writes) were not stored. Not
/// terminal: the bridge keeps its spool and reconnects with backoff; once space is freed, it
/// resends from the server's mark and nothing is lost or stored twice.
pub const STORAGE_FULL: u16 = 4014;
/// The hello named a session no session can have (empty, too long, or a UUID not written in
/// its canonical lower-case hyphenated form). Terminal for a bridge: retrying the same hello
/// cannot help.
pub const INVALID_SESSION: u16 = 4011;

/// The close for a connection a later one took over, and its reason: when both are one
/// bridge's (`same_bridge`), [`SUPERSEDED_BY_SAME_BRIDGE`], after which the bridge reconnects if
/// it still uses this connection; else [`SUPERSEDED`], after which it stops.
pub fn superseded(same_bridge: bool) -> (u16, &'static str) {
    if same_bridge {
        (
            SUPERSEDED_BY_SAME_BRIDGE,
            "a later connection of this bridge took over; reconnect if this one is in use",
        )
    } else {
        (
            SUPERSEDED,
            "a newer bridge connection for this session took over",
        )
    }
}

/// Whether a bridge must stop retrying after this close code.
pub fn is_terminal(code: u16) -> bool {
    matches!(
        code,
        UNAUTHORIZED
            | VERSION_MISMATCH
            | SUPERSEDED
            | SESSION_ENDED
            | CONTENT_MISMATCH
            | QUOTA_EXCEEDED
            | INVALID_SESSION
    )
}

/// A short plain-words description of a close code, for people reading a terminal or a log.
pub fn describe(code: u16) -> &'static str {
    match code {
        NORMAL => "closed normally",
        GOING_AWAY => "server going away",
        PROTOCOL_ERROR => "websocket protocol error",
        1006 => "connection dropped without a close frame",
        MESSAGE_TOO_BIG => "frame too large",
        INTERNAL_ERROR => "server error",
        BAD_FRAME => "bad frame",
        UNAUTHORIZED => "credentials refused or revoked",
        VERSION_MISMATCH => "protocol version mismatch",
        SUPERSEDED => "superseded by a newer bridge for this session",
        SESSION_ENDED => "session has ended",
        PRODUCER_GAP => "producer seq gap",
        CONTENT_MISMATCH => "replayed entry differs from the stored one",
        HEARTBEAT_TIMEOUT => "heartbeat timeout",
        LAGGED => "fell behind the live stream",
        LIFETIME => "connection lifetime reached",
        SERVER_ERROR => "server error",
        QUOTA_EXCEEDED => "account quota used up",
        INVALID_SESSION => "invalid session id or name",
        SUPERSEDED_BY_SAME_BRIDGE => "superseded by a later connection of the same bridge",
        STORAGE_FULL => "server disk full",
        _ => "unknown close code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_codes_are_never_terminal() {
        for code in [
            NORMAL,
            GOING_AWAY,
            PROTOCOL_ERROR,
            1006,
            INTERNAL_ERROR,
            LIFETIME,
            LAGGED,
            SUPERSEDED_BY_SAME_BRIDGE,
            STORAGE_FULL,
        ] {
            assert!(!is_terminal(code), "{code}");
        }
        for code in [
            UNAUTHORIZED,
            SUPERSEDED,
            SESSION_ENDED,
            CONTENT_MISMATCH,
            VERSION_MISMATCH,
            QUOTA_EXCEEDED,
            INVALID_SESSION,
        ] {
            assert!(is_terminal(code), "{code}");
        }
    }
}
