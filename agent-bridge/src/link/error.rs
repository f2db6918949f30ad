//! What one connection to `moord` ends with. Only the fatal variants of [`ConnectError`] stop
//! the retry loop (G4); every other one is retried with backoff.

use moor_protocol::close;

use crate::spool::SpoolError;

/// Why a connection to `moord` ended or could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server closed with a code that ends the bridge ([`close::is_terminal`]).
    #[error("server closed the link: {} (close {code}){}", close::describe(*code), fmt_detail(detail))]
    Terminal {
        /// The close code.
        code: u16,
        /// The close reason or a preceding `error` frame's message.
        detail: String,
    },
    /// The server speaks another protocol version.
    #[error(
        "moord speaks protocol {server}, this moor speaks {ours}: {}",
        if server > ours { "upgrade moor to moord's release" } else { "upgrade moord (it is older than this moor)" }
    )]
    VersionMismatch {
        /// Ours.
        ours: u32,
        /// Theirs.
        server: u32,
    },
    /// The server's mark is below entries we already dropped after it acked them: its store
    /// lost committed entries, and nothing here can refill the hole.
    #[error(
        "server says it holds entries up to {mark}, but it had already acknowledged up to {dropped_upto}; its store lost data"
    )]
    ServerBehind {
        /// The server's `producer_mark`.
        mark: u64,
        /// Highest seq this bridge had dropped from its spool.
        dropped_upto: u64,
    },
    /// The token cannot be put in an HTTP header (control characters, say).
    #[error("the token contains characters that cannot be sent in an HTTP header")]
    InvalidToken,
    /// The local spool failed; retrying the network will not help.
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    /// The server refused the WebSocket upgrade with an HTTP status.
    #[error("server refused the connection: HTTP {status}{}", refused_hint(*status))]
    Refused {
        /// HTTP status of the upgrade response.
        status: u16,
    },
    /// The server closed the link with a non-terminal code.
    #[error("{} (close {code}){}", close::describe(*code), fmt_detail(detail))]
    Closed {
        /// The close code (1006 when the connection dropped without a close frame).
        code: u16,
        /// The close reason or a preceding `error` frame's message.
        detail: String,
    },
    /// Connecting or the handshake took longer than the connect timeout.
    #[error("no welcome from the server within {0} ms")]
    ConnectTimeout(u128),
    /// No frame arrived within the server's idle timeout: the link is dead (G5).
    #[error("no frame from the server for {0} ms")]
    Idle(u128),
    /// A send did not complete within the idle timeout (the socket is stuck).
    #[error("sending to the server stalled for {0} ms")]
    SendStalled(u128),
    /// The server sent something we could not decode or did not expect.
    #[error("unexpected frame from the server: {0}")]
    BadFrame(String),
    /// TCP, TLS or WebSocket failure.
    #[error("{0}")]
    Transport(Box<tokio_tungstenite::tungstenite::Error>),
}

fn fmt_detail(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

fn refused_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (the server refused the token; check MOOR_TOKEN)",
        500..=599 => " (server error)",
        _ => "",
    }
}

impl ConnectError {
    /// Whether the retry loop must stop.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::Terminal { .. }
                | Self::VersionMismatch { .. }
                | Self::ServerBehind { .. }
                | Self::InvalidToken
                | Self::Spool(_)
        )
    }

    /// The close code this error carries, if the server closed the link.
    pub fn close_code(&self) -> Option<u16> {
        match self {
            Self::Terminal { code, .. } | Self::Closed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A closing code decides between the two close variants.
    pub(crate) fn from_close(code: u16, detail: String) -> Self {
        if close::is_terminal(code) {
            Self::Terminal { code, detail }
        } else {
            Self::Closed { code, detail }
        }
    }
}

impl From<tokio_tungstenite::tungstenite::Error> for ConnectError {
    fn from(err: tokio_tungstenite::tungstenite::Error) -> Self {
        use tokio_tungstenite::tungstenite::Error as WsError;
        match err {
            WsError::Http(response) => Self::Refused {
                status: response.status().as_u16(),
            },
            WsError::ConnectionClosed | WsError::AlreadyClosed => Self::Closed {
                code: 1006,
                detail: String::new(),
            },
            other => Self::Transport(Box::new(other)),
        }
    }
}
