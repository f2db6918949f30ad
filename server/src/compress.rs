//! gzip for the clients that ask for it (`Accept-Encoding: gzip`): whole bodies (pages of
//! `/entries`) and streams (SSE), where every chunk handed over is flushed to a byte boundary so
//! that a live entry never waits in the compressor for more traffic.
//!
//! A stream's compressor (miniz_oxide at level [`LEVEL`]: a 32 KiB window, about 310 KiB of
//! tables and buffers) exists only while chunks are coming: [`GzipStream::rest`] drops it when
//! the stream has nothing to send, and the next chunk starts a fresh one. The deflate stream goes
//! on across compressors (each ends its part with a sync flush and never a final block; a fresh
//! one only refers back into its own output), so an idle compressed stream costs a CRC and two
//! counters, not the compressor. Clients that do not ask get the bytes unchanged. Imports
//! nothing from the crate.

use axum::http::{header, HeaderMap, HeaderValue};
use bytes::Bytes;
use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// The compression level: the fastest of deflate's, since catch-up is read while the client
/// waits and the server serves many; JSON entries still shrink several times.
pub const LEVEL: u32 = 1;

/// The gzip member header: magic, deflate, no flags, no time, no extra flags, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Whether the request's `Accept-Encoding` accepts gzip: `gzip` (or `x-gzip`) with a non-zero
/// weight, or `*` with a non-zero weight when gzip is not named.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut star = false;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let weighted = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .next_back()
                .unwrap_or(1.0);
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                return weighted > 0.0;
            }
            if coding == "*" {
                star = weighted > 0.0;
            }
        }
    }
    star
}

/// Marks a response as gzip-encoded (and as varying with `Accept-Encoding`).
pub fn mark_gzip(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    mark_vary(headers);
}

/// Marks a response whose encoding depends on the request's `Accept-Encoding`.
pub fn mark_vary(headers: &mut HeaderMap) {
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
}

/// `body` as one gzip member.
pub fn gzip(body: &[u8]) -> Vec<u8> {
    let mut s = GzipStream::new();
    let mut out = s.chunk(body).to_vec();
    out.extend_from_slice(&s.finish());
    out
}

/// One gzip member written a chunk at a time, each chunk flushed.
#[derive(Debug)]
pub struct GzipStream {
    /// Present only while chunks are coming (see the module's doc).
    deflate: Option<Box<Compress>>,
    crc: Crc,
    started: bool,
}

impl Default for GzipStream {
    fn default() -> Self {
        Self::new()
    }
}

impl GzipStream {
    /// A member not begun yet: the first chunk carries the header.
    pub fn new() -> Self {
        Self {
            deflate: None,
            crc: Crc::new(),
            started: false,
        }
    }

    /// `data` compressed and flushed to a byte boundary: a client can decode all of `data` from
    /// what it has received.
    pub fn chunk(&mut self, data: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        if !self.started {
            self.started = true;
            out.extend_from_slice(&HEADER);
        }
        self.crc.update(data);
        self.deflate(data, FlushCompress::Sync, &mut out);
        Bytes::from(out)
    }

    /// Drops the compressor until the next chunk (the stream has nothing to send now).
    pub fn rest(&mut self) {
        self.deflate = None;
    }

    /// The end of the member: a final empty block and the trailer (CRC and length).
    pub fn finish(&mut self) -> Bytes {
        let mut out = Vec::with_capacity(32);
        if !self.started {
            self.started = true;
            out.extend_from_slice(&HEADER);
        }
        self.deflate(&[], FlushCompress::Finish, &mut out);
        self.deflate = None;
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Bytes::from(out)
    }

    fn deflate(&mut self, mut data: &[u8], flush: FlushCompress, out: &mut Vec<u8>) {
        let z = self
            .deflate
            .get_or_insert_with(|| Box::new(Compress::new(Compression::new(LEVEL), false)));
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(1024));
            }
            let before = z.total_in();
            // Only fails on misuse of the stream (a call after `Finish`), which this type rules
            // out; treat it as the end of the input anyway.
            let status = z.compress_vec(data, out, flush);
            let used = (z.total_in() - before) as usize;
            data = &data[used..];
            match status {
                Ok(Status::StreamEnd) | Err(_) => return,
                // Done when all input is in and the flush left room to spare (a full output
                // buffer may hold back the rest of the flush).
                Ok(_) if data.is_empty() && out.capacity() > out.len() => return,
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn chunks_across_rests_decode_to_the_input_and_each_is_decodable_on_its_own_arrival() {
        // arrange: chunks of different sizes, with the compressor dropped between some
        let chunks: Vec<Vec<u8>> = (0..40)
            .map(|i| {
                format!(
                    "id: {i}\nevent: agent.output\ndata: {{\"text\":\"{}\"}}\n\n",
                    "ab".repeat(i * 997)
                )
                .into_bytes()
            })
            .collect();
        let mut s = GzipStream::new();
        let mut wire = Vec::new();
        let mut plain = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            // act
            wire.extend_from_slice(&s.chunk(c));
            plain.extend_from_slice(c);
            if i % 3 == 0 {
                s.rest();
            }
            // assert: what arrived so far decodes to everything sent so far
            let mut got = Vec::new();
            let mut d = flate2::read::GzDecoder::new(&wire[..]);
            let _ = d.read_to_end(&mut got);
            assert_eq!(got, plain, "after chunk {i}");
        }
        wire.extend_from_slice(&s.finish());
        assert_eq!(gunzip(&wire), plain);
    }

    #[test]
    fn a_whole_body_round_trips_and_an_empty_one_is_a_valid_member() {
        let body = br#"{"entries":[],"head_seq":0,"has_more":false}"#.repeat(500);
        let z = gzip(&body);
        assert!(z.len() < body.len() / 10, "{} of {}", z.len(), body.len());
        assert_eq!(gunzip(&z), body);
        assert_eq!(gunzip(&gzip(b"")), b"");
    }

    #[test]
    fn gzip_is_accepted_only_when_asked_for_with_a_non_zero_weight() {
        let ask = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepts_gzip(&h)
        };
        assert!(!accepts_gzip(&HeaderMap::new()));
        assert!(ask("gzip"));
        assert!(ask("gzip, deflate, br, zstd"));
        assert!(ask("br;q=1.0, GZIP;q=0.5"));
        assert!(ask("*"));
        assert!(!ask("identity"));
        assert!(!ask("br"));
        assert!(!ask("gzip;q=0"));
        assert!(!ask("gzip;q=0, *"));
        assert!(!ask("*;q=0"));
    }
}
