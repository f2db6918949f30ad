//! Encoding and decoding of link frames. Pure, so the wire shapes are unit-tested here rather
//! than through a socket.

use moor_protocol::bridge::{BridgeToServer, ServerToBridge};
use tokio_tungstenite::tungstenite::Message;

use super::error::ConnectError;
use crate::spool::fit::fit_body;
use crate::spool::Batch;

/// What one WebSocket message from the server means to the link.
#[derive(Debug)]
pub(super) enum Incoming {
    /// A protocol frame.
    Frame(Box<ServerToBridge>),
    /// The server closed: code (1005 when it gave none) and reason.
    Close(u16, String),
    /// Ping, pong, or something we ignore; it still proves the peer is alive.
    Other,
}

/// Classify a received message. A frame we cannot decode (a newer server's addition, say) is
/// logged and skipped rather than acted on: every frame that matters is either repeated (acks
/// are cumulative) or re-derived at the next `Welcome` (pending inputs).
pub(super) fn decode(msg: Message) -> Incoming {
    match msg {
        Message::Text(text) => match serde_json::from_str::<ServerToBridge>(text.as_str()) {
            Ok(frame) => Incoming::Frame(Box::new(frame)),
            Err(e) => {
                tracing::warn!(error = %e, frame = truncate(text.as_str(), 200), "ignoring an undecodable frame");
                Incoming::Other
            }
        },
        Message::Close(frame) => match frame {
            Some(frame) => Incoming::Close(u16::from(frame.code), frame.reason.to_string()),
            None => Incoming::Close(1005, String::new()),
        },
        Message::Binary(_) => {
            tracing::warn!("ignoring a binary frame");
            Incoming::Other
        }
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Incoming::Other,
    }
}

/// A control frame as a text message.
pub(super) fn encode(frame: &BridgeToServer) -> Result<Message, ConnectError> {
    serde_json::to_string(frame)
        .map(Message::text)
        .map_err(|e| ConnectError::BadFrame(format!("could not encode a frame: {e}")))
}

/// The start of every `entries` frame; besides its entries, the frame holds only the commas
/// between them and the closing `]}`.
const HEAD: &[u8] = br#"{"type":"entries","entries":["#;

/// How many spooled bytes one `entries` frame may carry: `configured`, and no more than fits in
/// the server's frame limit (`server_limit`, 0 when the server did not say). A spooled record
/// is its entry's JSON behind a header longer than the comma that replaces it in the frame, so a
/// batch within this budget makes a frame within the limit (a batch holds at least one entry,
/// so one entry larger than the limit is still sent, cut by [`entries_message`]).
pub(super) fn batch_budget(configured: usize, server_limit: u64) -> usize {
    match usize::try_from(server_limit) {
        Ok(0) | Err(_) => configured,
        Ok(limit) => configured.min(limit.saturating_sub(HEAD.len() + 2)).max(1),
    }
}

/// The largest entry a frame of the server's (`server_limit`, 0 when it did not say) holds.
pub(super) fn entry_room(server_limit: u64) -> usize {
    match usize::try_from(server_limit) {
        Ok(0) | Err(_) => usize::MAX,
        Ok(limit) => limit.saturating_sub(HEAD.len() + 2),
    }
}

/// `BridgeToServer::Entries` for a spool batch, spliced from the spooled JSON bytes: no decode
/// and re-encode per resend, and a replay is byte-for-byte what was first sent. A batch within
/// [`batch_budget`] is within the frame limit, but for one entry larger than `room` on its own:
/// that one is cut to fit (the same way on every resend), not refused for ever.
pub(super) fn entries_message(batch: &Batch, room: usize) -> Result<Message, ConnectError> {
    let size = HEAD.len() + 2 + batch.bodies().map(|b| b.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(size.min(room.saturating_add(HEAD.len() + 2)));
    out.extend_from_slice(HEAD);
    for (i, body) in batch.bodies().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match fit_body(body, room).map_err(|e| ConnectError::BadFrame(e.to_string()))? {
            Some(fitted) => out.extend_from_slice(&fitted),
            None => out.extend_from_slice(body),
        }
    }
    out.extend_from_slice(b"]}");
    String::from_utf8(out)
        .map(Message::text)
        .map_err(|e| ConnectError::BadFrame(format!("spooled entry is not UTF-8: {e}")))
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::close;
    use moor_protocol::payload::{AgentExit, AgentOutput, OutputStream};
    use moor_protocol::NewEntry;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;

    use super::*;
    use crate::spool::{Draft, Spool};

    #[test]
    fn a_spliced_entries_frame_decodes_as_the_protocol_type() {
        // arrange
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let output = AgentOutput {
            stream: OutputStream::Stdout,
            text: "a\"b".into(),
        };
        let exit = AgentExit {
            code: Some(0),
            ..AgentExit::default()
        };
        let drafts = vec![Draft::at(1, output.clone()), Draft::at(2, exit.clone())];
        spool.append_batch(drafts).unwrap();
        let batch = spool.read_batch(1, 10, usize::MAX).unwrap().unwrap();
        // act
        let Message::Text(text) = entries_message(&batch, usize::MAX).unwrap() else {
            panic!("not text")
        };
        // assert
        let frame: BridgeToServer = serde_json::from_str(text.as_str()).unwrap();
        let want = BridgeToServer::Entries {
            entries: vec![NewEntry::typed(1, 1, output), NewEntry::typed(2, 2, exit)],
        };
        assert_eq!(frame, want);
    }

    #[test]
    fn a_batch_within_the_budget_makes_a_frame_within_the_servers_limit() {
        // arrange: 300 short entries, about 60 bytes of JSON each
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let drafts = (1..=300)
            .map(|seq| {
                let output = AgentOutput {
                    stream: OutputStream::Stdout,
                    text: format!("line {seq}"),
                };
                Draft::at(seq, output)
            })
            .collect();
        spool.append_batch(drafts).unwrap();
        for limit in [1_000, 4_096, 10_000] {
            // act
            let budget = batch_budget(512 * 1024, limit);
            let batch = spool.read_batch(1, usize::MAX, budget).unwrap().unwrap();
            let Message::Text(text) = entries_message(&batch, entry_room(limit)).unwrap() else {
                panic!("not text")
            };
            // assert: within the limit, and not needlessly small (the spool's record headers
            // count against the budget, the frame's commas are smaller)
            assert!(
                text.len() as u64 <= limit,
                "{} bytes over {limit}",
                text.len()
            );
            assert!(
                text.len() as u64 > limit / 2,
                "{} bytes for {limit}",
                text.len()
            );
        }
        // A limit smaller than one entry still lets one through.
        let one = spool.read_batch(1, usize::MAX, batch_budget(512 * 1024, 50));
        assert_eq!(one.unwrap().unwrap().last(), 1);
        assert_eq!(batch_budget(512 * 1024, 0), 512 * 1024, "no limit said");
        assert_eq!(entry_room(0), usize::MAX, "no limit said");
        assert_eq!(
            batch_budget(1024, 1 << 30),
            1024,
            "the configured bound holds"
        );
    }

    #[test]
    fn one_entry_larger_than_the_servers_limit_is_cut_to_fit_the_same_way_each_time() {
        // arrange: one entry of 20 kB, a server that takes frames of 4 kB
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let output = AgentOutput {
            stream: OutputStream::Stdout,
            text: "x".repeat(20_000),
        };
        spool.append_batch(vec![Draft::at(1, output)]).unwrap();
        let limit = 4_096;
        let batch = spool
            .read_batch(1, usize::MAX, batch_budget(512 * 1024, limit))
            .unwrap()
            .unwrap();

        // act: sent, and sent again after a reconnect
        let frames: Vec<String> = (0..2)
            .map(
                |_| match entries_message(&batch, entry_room(limit)).unwrap() {
                    Message::Text(text) => text.as_str().to_owned(),
                    other => panic!("not text: {other:?}"),
                },
            )
            .collect();

        // assert: within the limit, the entry cut and saying so, byte for byte the same twice
        assert!(frames[0].len() as u64 <= limit, "{}", frames[0].len());
        assert_eq!(frames[0], frames[1]);
        let BridgeToServer::Entries { entries } = serde_json::from_str(&frames[0]).unwrap() else {
            panic!("not entries")
        };
        let text = entries[0].payload["text"].as_str().unwrap();
        assert!(
            text.ends_with("bytes cut: the entry was over 4065 bytes]"),
            "{text}"
        );
    }

    #[test]
    fn close_frames_and_bad_text_are_classified() {
        let close = Message::Close(Some(CloseFrame {
            code: CloseCode::from(close::SUPERSEDED),
            reason: "newer".into(),
        }));
        assert!(matches!(decode(close), Incoming::Close(4003, r) if r == "newer"));
        assert!(matches!(
            decode(Message::Close(None)),
            Incoming::Close(1005, _)
        ));
        assert!(matches!(
            decode(Message::text("{\"type\":\"nope\"}")),
            Incoming::Other
        ));
        let ack = decode(Message::text(r#"{"type":"ack","producer_seq":9}"#));
        assert!(matches!(ack, Incoming::Frame(f) if *f == ServerToBridge::Ack { producer_seq: 9 }));
    }
}
