//! Binary-safe output batching: raw byte chunks in, `agent.pty.output` entries out.
//!
//! One writer takes everything that queued up while the previous fsync ran and cuts it into
//! entries of at most [`kinds::PTY_OUTPUT_MAX_BYTES`], so a program printing megabytes per second
//! costs a few entries and one fsync per burst, while a single echoed keystroke still goes out
//! at once (no timer delays it).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use moor_protocol::kinds;
use moor_protocol::payload::InputKeys;
use tokio::sync::mpsc;

use crate::spool::{Record, Spool, SpoolError};

/// Most bytes spooled with one fsync.
const BURST_BYTES: usize = 8 * 1024 * 1024;

/// The `agent.pty.output` entries for `bytes`, in order, as the spool keeps them: raw.
pub fn output_records(bytes: &[u8]) -> Vec<Record> {
    bytes
        .chunks(kinds::PTY_OUTPUT_MAX_BYTES)
        .map(|piece| Record::pty_output(piece.to_vec()))
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
        spool.append(output_records(&burst)).await?;
    }
    Ok(total)
}

/// Decode the bytes of an `input.keys` payload: `data` (base64) or `text`.
pub fn key_bytes(keys: &InputKeys) -> Result<Vec<u8>, String> {
    match (&keys.data, &keys.text) {
        (Some(data), _) => STANDARD
            .decode(data)
            .map_err(|e| format!("\"data\" is not valid base64: {e}")),
        (None, Some(text)) => Ok(text.as_bytes().to_vec()),
        (None, None) => Err("payload needs \"data\" (base64) or \"text\"".into()),
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::EntryBody;

    use super::*;

    #[test]
    fn output_is_cut_into_bounded_base64_entries_that_decode_to_the_input() {
        // arrange
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let bytes: Vec<u8> = (0..kinds::PTY_OUTPUT_MAX_BYTES * 2 + 7)
            .map(|i| (i * 31 % 256) as u8)
            .collect();
        // act
        let records = output_records(&bytes);
        spool.append_batch(records).unwrap();
        // assert
        let batch = spool.read_batch(1, 10, usize::MAX).unwrap().unwrap();
        let entries = batch.entries().unwrap();
        assert_eq!(entries.len(), 3);
        let mut back = Vec::new();
        for e in entries {
            let Ok(EntryBody::AgentPtyOutput(out)) = EntryBody::decode(&e.kind, &e.payload) else {
                panic!("not agent.pty.output: {e:?}")
            };
            back.extend(STANDARD.decode(out.data).unwrap());
        }
        assert_eq!(back, bytes);
    }

    #[test]
    fn key_payloads_take_text_or_base64() {
        let keys = |text: Option<&str>, data: Option<&str>| InputKeys {
            text: text.map(str::to_owned),
            data: data.map(str::to_owned),
        };
        assert_eq!(
            key_bytes(&keys(Some("ls\r"), None)).unwrap(),
            b"ls\r".to_vec()
        );
        assert_eq!(key_bytes(&keys(None, Some("/wA="))).unwrap(), vec![0xff, 0]);
        assert!(key_bytes(&keys(None, Some("%%"))).is_err());
        assert!(key_bytes(&keys(None, None)).is_err());
    }
}
