//! Binary-safe output batching: raw byte chunks in, `agent.pty.output` entries out.
//!
//! One writer takes everything that queued up while the previous fsync ran and cuts it into
//! entries of at most [`kinds::PTY_OUTPUT_MAX_BYTES`], so a program printing megabytes per second
//! costs a few entries and one fsync per burst, while a single echoed keystroke still goes out
//! at once (no timer delays it).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use moor_protocol::kinds;
use serde_json::json;
use tokio::sync::mpsc;

use crate::spool::{Draft, Spool, SpoolError};

/// Most bytes spooled with one fsync.
const BURST_BYTES: usize = 8 * 1024 * 1024;

/// The `agent.pty.output` entries for `bytes`, in order.
pub fn output_drafts(bytes: &[u8]) -> Vec<Draft> {
    bytes
        .chunks(kinds::PTY_OUTPUT_MAX_BYTES)
        .map(|piece| {
            Draft::new(
                kinds::AGENT_PTY_OUTPUT,
                json!({ "data": STANDARD.encode(piece) }),
            )
        })
        .collect()
}

/// Spool chunks from `rx` until it closes. Returns the number of bytes spooled.
pub async fn spool_chunks(
    mut rx: mpsc::Receiver<Vec<u8>>,
    spool: Spool,
) -> Result<u64, SpoolError> {
    let mut total = 0u64;
    while let Some(mut burst) = rx.recv().await {
        while burst.len() < BURST_BYTES {
            match rx.try_recv() {
                Ok(more) => burst.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        total += burst.len() as u64;
        spool.append(output_drafts(&burst)).await?;
    }
    Ok(total)
}

/// Decode the bytes of an `agent.pty.output` or `input.keys` payload: `data` (base64) or `text`.
pub fn payload_bytes(payload: &serde_json::Value) -> Result<Vec<u8>, String> {
    if let Some(data) = payload.get("data").and_then(|d| d.as_str()) {
        return STANDARD
            .decode(data)
            .map_err(|e| format!("\"data\" is not valid base64: {e}"));
    }
    if let Some(text) = payload.get("text").and_then(|t| t.as_str()) {
        return Ok(text.as_bytes().to_vec());
    }
    Err("payload needs \"data\" (base64) or \"text\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_into_bounded_base64_entries_that_decode_to_the_input() {
        let bytes: Vec<u8> = (0..kinds::PTY_OUTPUT_MAX_BYTES * 2 + 7)
            .map(|i| (i * 31 % 256) as u8)
            .collect();
        let drafts = output_drafts(&bytes);
        assert_eq!(drafts.len(), 3);
        let mut back = Vec::new();
        for d in &drafts {
            assert_eq!(d.kind, kinds::AGENT_PTY_OUTPUT);
            back.extend(payload_bytes(&d.payload).unwrap());
        }
        assert_eq!(back, bytes);
    }

    #[test]
    fn key_payloads_take_text_or_base64() {
        assert_eq!(
            payload_bytes(&json!({"text": "ls\r"})).unwrap(),
            b"ls\r".to_vec()
        );
        assert_eq!(
            payload_bytes(&json!({"data": "/wA="})).unwrap(),
            vec![0xff, 0]
        );
        assert!(payload_bytes(&json!({"data": "%%"})).is_err());
        assert!(payload_bytes(&json!({})).is_err());
    }
}
