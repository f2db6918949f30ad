//! On-disk record format of spool segments, and the scan that recovers them after a crash.
//!
//! A segment file is named after the producer seq of its first record
//! (`00000000000000000042.seg`) and holds records back to back:
//!
//! ```text
//! [len: u32 LE][crc32: u32 LE][seq: u64 LE][body: len bytes of NewEntry JSON]
//! ```
//!
//! The CRC covers `seq` and `body`, so a torn or garbled tail (a crash mid-write, a filesystem
//! that reordered unsynced writes) is detected rather than trusted. Because a record is only sent
//! after its fsync, a torn tail was never sent and can be discarded.

use std::fs::File;
use std::io::Read;
use std::ops::Range;

/// Bytes before each record body.
pub(crate) const HEADER_LEN: usize = 16;
/// Upper bound for one record body; a larger length in a header means the header is garbage.
pub(crate) const MAX_BODY_LEN: usize = 64 * 1024 * 1024;
/// File name suffix of segments.
pub(crate) const SEGMENT_SUFFIX: &str = ".seg";

/// The file name of the segment whose first record has `first_seq`.
pub(crate) fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}{SEGMENT_SUFFIX}")
}

/// The first seq encoded in a segment file name, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn checksum(seq: u64, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// Append one encoded record to `out`.
pub(crate) fn encode(seq: u64, body: &[u8], out: &mut Vec<u8>) {
    // MAX_BODY_LEN fits in u32; longer bodies are refused before they get here.
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(seq, body).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(body);
}

/// One decoded record: its seq and where its body lies in the buffer it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordRef {
    pub(crate) seq: u64,
    pub(crate) start: usize,
    pub(crate) body: Range<usize>,
}

/// Decode the record at `pos` of `buf`, or `None` if it is incomplete or fails its CRC.
pub(crate) fn decode_at(buf: &[u8], pos: usize) -> Option<RecordRef> {
    let header = buf.get(pos..pos.checked_add(HEADER_LEN)?)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    if len > MAX_BODY_LEN {
        return None;
    }
    let body_start = pos + HEADER_LEN;
    let body = buf.get(body_start..body_start.checked_add(len)?)?;
    (checksum(seq, body) == crc).then(|| RecordRef {
        seq,
        start: pos,
        body: body_start..body_start + len,
    })
}

/// What a scan of one segment found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Byte offset of each valid record; record `i` has seq `first_seq + i`.
    pub(crate) offsets: Vec<u64>,
    /// End of the last valid record.
    pub(crate) end: u64,
    /// Bytes after `end` that do not form a valid record (a torn tail).
    pub(crate) torn_bytes: u64,
}

/// Read a whole segment and validate its records in order, stopping at the first one that is
/// torn, fails its CRC, or breaks the seq sequence.
pub(crate) fn scan(file: &mut File, first_seq: u64) -> std::io::Result<Scan> {
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    let mut scan = Scan::default();
    let mut pos = 0usize;
    let mut expected = first_seq;
    while pos < buf.len() {
        match decode_at(&buf, pos) {
            Some(rec) if rec.seq == expected => {
                scan.offsets.push(pos as u64);
                pos = rec.body.end;
                expected += 1;
            }
            _ => break,
        }
    }
    scan.end = pos as u64;
    scan.torn_bytes = (buf.len() - pos) as u64;
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_like_numbers() {
        assert_eq!(segment_name(42), "00000000000000000042.seg");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("42.seg"), None);
        assert_eq!(parse_segment_name("acked"), None);
        assert!(segment_name(9) < segment_name(10));
    }

    #[test]
    fn a_flipped_bit_or_a_short_tail_is_rejected() {
        let mut buf = Vec::new();
        encode(7, br#"{"a":1}"#, &mut buf);
        let rec = decode_at(&buf, 0).unwrap();
        assert_eq!((rec.seq, &buf[rec.body.clone()]), (7, &br#"{"a":1}"#[..]));
        assert!(decode_at(&buf[..buf.len() - 1], 0).is_none());
        let mut flipped = buf.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x01;
        assert!(decode_at(&flipped, 0).is_none());
        assert!(decode_at(&buf, buf.len()).is_none());
    }
}
