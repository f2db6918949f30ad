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

use moor_protocol::Seq;

use super::{RawEntry, StoreError, StoreResult};

/// The packed form of one `entries` row, as a SQL expression over its columns.
pub(crate) const PACKED_ENTRY: &str = "CAST(seq AS TEXT) || ',' || CAST(ts AS TEXT) || ',' \
     || CAST(octet_length(kind) AS TEXT) || ',' || CAST(octet_length(author) AS TEXT) || ',' \
     || CAST(octet_length(payload) AS TEXT) || ':' || kind || author || payload";

/// Reads back the entries of [`PACKED_ENTRY`]s concatenated, in ascending seq order whatever
/// order the aggregate met them in.
pub(crate) fn unpack(mut text: &str) -> StoreResult<Vec<RawEntry>> {
    let mut entries = Vec::new();
    while !text.is_empty() {
        let (entry, rest) = unpack_one(text).ok_or_else(|| {
            StoreError::Other(anyhow::anyhow!(
                "a packed entry is malformed after {} entries",
                entries.len()
            ))
        })?;
        entries.push(entry);
        text = rest;
    }
    if !entries.is_sorted_by_key(|e: &RawEntry| e.seq) {
        entries.sort_unstable_by_key(|e| e.seq);
    }
    Ok(entries)
}

/// The first entry of `text` and what follows it.
fn unpack_one(text: &str) -> Option<(RawEntry, &str)> {
    let (head, body) = text.split_once(':')?;
    let mut fields = head.splitn(5, ',');
    let mut next = || fields.next();
    let seq: u64 = next()?.parse().ok()?;
    let ts: i64 = next()?.parse().ok()?;
    let kind_len: usize = next()?.parse().ok()?;
    let author_len: usize = next()?.parse().ok()?;
    let payload_len: usize = next()?.parse().ok()?;
    let author_at = kind_len;
    let payload_at = author_at.checked_add(author_len)?;
    let end = payload_at.checked_add(payload_len)?;
    let entry = RawEntry {
        seq: Seq(seq),
        ts,
        kind: body.get(..author_at)?.to_owned(),
        author: body.get(author_at..payload_at)?.to_owned(),
        payload: body.get(payload_at..end)?.to_owned(),
    };
    Some((entry, body.get(end..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(e: &RawEntry) -> String {
        format!(
            "{},{},{},{},{}:{}{}{}",
            e.seq,
            e.ts,
            e.kind.len(),
            e.author.len(),
            e.payload.len(),
            e.kind,
            e.author,
            e.payload
        )
    }

    fn entry(seq: u64, author: &str, payload: &str) -> RawEntry {
        RawEntry {
            seq: Seq(seq),
            ts: -5,
            kind: "agent.output".into(),
            author: author.into(),
            payload: payload.into(),
        }
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
        assert_eq!(unpack(&text).unwrap(), want);
        assert_eq!(unpack("").unwrap(), Vec::new());
    }

    #[test]
    fn a_length_past_the_text_or_inside_a_character_is_an_error() {
        let good = packed(&entry(1, "é", "{}"));
        assert!(unpack(&good).is_ok());
        assert!(unpack(&good.replacen(",2:", ",3:", 1)).is_err());
        assert!(unpack(&good.replacen(",2,", ",1,", 1)).is_err());
        assert!(unpack("1,2,3").is_err());
    }
}
