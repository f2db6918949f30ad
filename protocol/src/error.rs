//! Error codes carried on the wire, in HTTP error bodies and in `error` frames.

use serde::{Deserialize, Serialize};

/// Machine-readable error code; every error also carries a human message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request or frame could not be parsed or is invalid.
    BadRequest,
    /// Missing or wrong credentials.
    Unauthorized,
    /// The caller may not do this.
    Forbidden,
    /// No such resource (or not visible to the caller).
    NotFound,
    /// Conflicts with what is stored (e.g. an idempotency key reused with other content).
    Conflict,
    /// Body or frame exceeds the size limit.
    TooLarge,
    /// Protocol version not supported.
    VersionMismatch,
    /// Producer seqs must be contiguous.
    ProducerGap,
    /// A replayed producer seq carried different content.
    ContentMismatch,
    /// The session has ended.
    SessionEnded,
    /// What was asked for is over for good (first-start setup once an administrator exists).
    Gone,
    /// A cursor is not a number.
    InvalidCursor,
    /// Too many requests.
    RateLimited,
    /// The server is shutting down.
    ShuttingDown,
    /// The server cannot reach its database right now; retry after the `Retry-After` delay.
    Unavailable,
    /// The server's disk is full: nothing was stored. Retryable: retry after the `Retry-After`
    /// delay (HTTP 507), or, for a bridge, reconnect with backoff and resend from its spool.
    StorageFull,
    /// Internal error; details are in the server log.
    Internal,
}

/// The body of every error response and `error` frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// What happened and what to do, in plain words.
    pub message: String,
    /// With `conflict` on an input: the entry already stored under the request's
    /// `client_msg_id`, which a retry must repeat exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub stored: Option<crate::Entry>,
}
