//! Wire types shared by `moord`, `moor` and the web client.
//!
//! This crate holds data and pure logic only: no async runtime, no framework. Every frame that
//! crosses a socket and every HTTP body is defined here, so both ends agree by construction.
#![warn(missing_docs)]

pub mod api;
pub mod bridge;
pub mod checkpoint;
pub mod close;
pub mod compaction;
pub mod debug;
pub mod entry;
pub mod error;
pub mod host;
pub mod ids;
pub mod kinds;
pub mod manifest;
pub mod notify;
pub mod payload;
pub mod recovery;
pub mod state;
pub mod transcript;
pub mod web;
pub mod work;

pub use entry::{Entry, NewEntry};
pub use error::ErrorCode;
pub use ids::{ProducerId, Seq, SessionId};
pub use payload::{BodyError, EntryBody};

/// Version of the bridge and viewer wire protocol. Sent in the first frame of every connection;
/// a peer with a different major version is refused with [`close::VERSION_MISMATCH`].
pub const PROTOCOL_VERSION: u32 = 1;

/// Current wall-clock time as milliseconds since the Unix epoch, the unit of every `ts` field.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `YYYY-MM-DD HH:MM:SS UTC` from ms since the epoch.
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_epoch_milliseconds() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc(1_709_251_199_000), "2024-02-29 23:59:59 UTC");
    }
}
