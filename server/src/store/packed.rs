//! A run of entries read as one value: the database concatenates each entry's fields, each
//! preceded by its length, so a page of a thousand entries crosses from the database to the
//! server as one row instead of a thousand.
//!
//! Moving a row through the driver (a hand-off between threads, a row object, an owned copy of
//! every value, then another copy into the entry) cost several times what reading the entry
//! did. An entry is packed as
//!
//! ```text
//! <seq>,<ts>,<kind bytes>,<author bytes>,<payload bytes>:<kind><author><payload>
//! ```
//!
//! with the lengths in bytes (`octet_length`), so any text, commas and colons included, comes
//! back exactly as stored. The same SQL runs on both engines: `string_agg` is Postgres' and,
//! since 3.44, SQLite's name of the aggregate.

use std::sync::Arc;

use moor_protocol::Seq;

use super::{RawEntry, StoreError, StoreResult};

/// The packed form of one `entries` row, as a SQL expression over its columns.
pub(crate) const PACKED_ENTRY: &str = "CAST(seq AS TEXT) || ',' || CAST(ts AS TEXT) || ',' \
     || CAST(octet_length(kind) AS TEXT) || ',' || CAST(octet_length(author) AS TEXT) || ',' \
     || CAST(octet_length(payload) AS TEXT) || ':' || kind || author || payload";

/// Reads back the entries of [`PACKED_ENTRY`]s concatenated, in ascending seq order whatever
/// order the aggregate met them in. The entries share `text`.
pub(crate) fn unpack(text: String) -> StoreResult<Vec<RawEntry>> {
    let text: Arc<str> = text.into();
    let mut entries = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let entry = unpack_one(&text, at).ok_or_else(|| {
            StoreError::Other(anyhow::anyhow!(
                "a packed entry is malformed after {} entries",
                entries.len()
            ))
        })?;
        at = entry.end();
        entries.push(entry);
    }
    if !entries.is_sorted_by_key(|e: &RawEntry| e.seq) {
        entries.sort_unstable_by_key(|e| e.seq);
    }
    Ok(entries)
}

/// The entry packed in `text` at `at`.
fn unpack_one(text: &Arc<str>, mut at: usize) -> Option<RawEntry> {
    let bytes = text.as_bytes();
    let mut field = |end: u8| number(bytes, &mut at, end);
    let seq = u64::try_from(field(b',')?).ok()?;
    let ts = field(b',')?;
    let mut length = |end: u8| usize::try_from(field(end)?).ok();
    let lengths = [length(b',')?, length(b',')?, length(b':')?];
    RawEntry::within(Seq(seq), ts, text, at, lengths)
}

/// The decimal number at `at` in `bytes`, which `end` follows; moves `at` past `end`.
fn number(bytes: &[u8], at: &mut usize, end: u8) -> Option<i64> {
    let negative = bytes.get(*at) == Some(&b'-');
    let mut i = *at + usize::from(negative);
    let start = i;
    let mut value: i64 = 0;
    while let Some(&b) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
        value = value.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
        i += 1;
    }
    if i == start || bytes.get(i) != Some(&end) {
        return None;
    }
    *at = i + 1;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(e: &RawEntry) -> String {
        let (kind, author, payload) = (e.kind(), e.author(), e.payload());
        let lengths = format!("{},{},{}", kind.len(), author.len(), payload.len());
        format!("{},{},{lengths}:{kind}{author}{payload}", e.seq, e.ts)
    }

    fn entry(seq: u64, author: &str, payload: &str) -> RawEntry {
        RawEntry::new(Seq(seq), -5, "agent.output", author, payload)
    }

    #[test]
    fn any_text_comes_back_as_it_was_and_in_seq_order() {
        let entries = [
            entry(9, "user:a,b:c", r#"{"text":"1,2:3 ✓ \"q\""}"#),
            entry(7, "", "{}"),
            entry(8, "bridge", r#"{"data":"…:…"}"#),
        ];
        let text: String = entries.iter().map(packed).collect();
        let mut want = entries.to_vec();
        want.sort_by_key(|e| e.seq);
        assert_eq!(unpack(text).unwrap(), want);
        assert_eq!(unpack(String::new()).unwrap(), Vec::new());
    }

    #[test]
    fn a_length_past_the_text_or_inside_a_character_is_an_error() {
        let good = packed(&entry(1, "é", "{}"));
        assert!(unpack(good.clone()).is_ok());
        assert!(unpack(good.replacen(",2:", ",3:", 1)).is_err());
        assert!(unpack(good.replacen(",2,", ",1,", 1)).is_err());
        for bad in [
            "1,2,3",
            "1,2,3,4,5",
            "-1,0,0,0,0:",
            "1,2,,0,0:",
            "99999999999999999999,0,0,0,0:",
        ] {
            assert!(unpack(bad.into()).is_err(), "{bad}");
        }
    }
}
