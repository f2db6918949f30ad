use std::fs::OpenOptions;
use std::io::Write;

use moor_protocol::payload::{AgentOutput, OutputStream};
use moor_protocol::NewEntry;

use super::segment::{encode, segment_name, HEADER_LEN};
use super::*;

fn drafts(texts: &[&str]) -> Vec<Draft> {
    texts.iter().map(|t| Draft::new(output(t))).collect()
}

fn output(text: &str) -> AgentOutput {
    AgentOutput {
        stream: OutputStream::Stdout,
        text: text.into(),
    }
}

fn texts(spool: &Spool, from: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = from;
    while let Some(batch) = spool.read_batch(next, 1000, usize::MAX).unwrap() {
        for entry in batch.entries().unwrap() {
            assert_eq!(entry.producer_seq, next);
            out.push(entry.payload["text"].as_str().unwrap().to_owned());
            next += 1;
        }
    }
    out
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names
}

#[test]
fn appended_entries_get_contiguous_seqs_and_read_back_in_order() {
    // arrange
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    // act
    let a = spool.append_batch(drafts(&["a", "b"])).unwrap();
    let b = spool.append_batch(drafts(&["c"])).unwrap();
    // assert
    assert_eq!((a, b), (1..3, 3..4));
    assert_eq!(spool.durable(), 3);
    assert_eq!(spool.unacked(), 3);
    assert_eq!(texts(&spool, 1), ["a", "b", "c"]);
    assert_eq!(texts(&spool, 2), ["b", "c"]);
    assert!(spool.read_batch(4, 10, usize::MAX).unwrap().is_none());
}

#[test]
fn read_batch_respects_entry_and_byte_limits_but_always_returns_one() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    spool
        .append_batch(drafts(&["one", "two", "three", "four"]))
        .unwrap();
    let batch = spool.read_batch(1, 3, usize::MAX).unwrap().unwrap();
    assert_eq!((batch.first(), batch.last(), batch.len()), (1, 3, 3));
    let tiny = spool.read_batch(2, 10, 1).unwrap().unwrap();
    assert_eq!((tiny.first(), tiny.last()), (2, 2));
}

#[test]
fn ack_drops_entries_and_the_mark_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    let mut acked = spool.subscribe_acked();
    spool.append_batch(drafts(&["a", "b", "c"])).unwrap();
    spool.ack(2).unwrap();
    assert!(acked.has_changed().unwrap());
    assert_eq!(*acked.borrow_and_update(), 2);
    assert_eq!(spool.unacked(), 1);
    spool.ack(1).unwrap(); // acks never move backwards
    assert_eq!(spool.acked(), 2);
    drop(spool);

    let spool = Spool::open(dir.path()).unwrap();
    assert_eq!((spool.acked(), spool.durable()), (2, 3));
}

#[test]
fn producer_seq_survives_reopen_even_when_everything_was_acked() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open_with(dir.path(), 64).unwrap();
    spool.append_batch(drafts(&["a", "b"])).unwrap();
    spool.append_batch(drafts(&["c"])).unwrap();
    spool.ack(3).unwrap();
    drop(spool);
    // Even without the mark file, segment names carry the counter.
    fs::remove_file(dir.path().join(ACKED_FILE)).unwrap();

    let spool = Spool::open_with(dir.path(), 64).unwrap();
    assert_eq!(spool.append_batch(drafts(&["d"])).unwrap(), 4..5);
    assert_eq!(texts(&spool, 4), ["d"]);
}

#[test]
fn unacked_entries_are_still_there_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    spool.append_batch(drafts(&["a", "b", "c"])).unwrap();
    spool.ack(1).unwrap();
    drop(spool);

    let spool = Spool::open(dir.path()).unwrap();
    assert_eq!(texts(&spool, 2), ["b", "c"]);
    assert_eq!(spool.append_batch(drafts(&["d"])).unwrap(), 4..5);
}

#[test]
fn a_torn_tail_is_discarded_and_its_seq_reused() {
    // arrange: two good records, then half of a third, as after a crash mid-write
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    spool.append_batch(drafts(&["a", "b"])).unwrap();
    drop(spool);
    let seg = dir.path().join(segment_name(1));
    let mut torn = Vec::new();
    encode(3, br#"{"producer_seq":3}"#, &mut torn);
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&torn[..torn.len() - 3]).unwrap();
    drop(f);
    // act
    let spool = Spool::open(dir.path()).unwrap();
    // assert
    assert_eq!(spool.durable(), 2);
    assert_eq!(texts(&spool, 1), ["a", "b"]);
    assert_eq!(spool.append_batch(drafts(&["c"])).unwrap(), 3..4);
    assert_eq!(texts(&spool, 1), ["a", "b", "c"]);
}

#[test]
fn garbage_after_the_last_record_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    spool.append_batch(drafts(&["a"])).unwrap();
    drop(spool);
    let seg = dir.path().join(segment_name(1));
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[0u8; 40]).unwrap();
    drop(f);
    let spool = Spool::open(dir.path()).unwrap();
    assert_eq!(texts(&spool, 1), ["a"]);
}

#[test]
fn damage_in_an_older_segment_is_an_error_not_a_silent_loss() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open_with(dir.path(), 1).unwrap();
    spool.append_batch(drafts(&["a"])).unwrap();
    spool.append_batch(drafts(&["b"])).unwrap();
    drop(spool);
    let first = dir.path().join(segment_name(1));
    let len = fs::metadata(&first).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    assert!(matches!(
        Spool::open_with(dir.path(), 1),
        Err(SpoolError::Corrupt { .. })
    ));
}

#[test]
fn fully_acked_segments_are_deleted_but_the_newest_is_kept() {
    // arrange: a 1-byte target size makes every batch its own segment
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open_with(dir.path(), 1).unwrap();
    for text in ["a", "b", "c", "d"] {
        spool.append_batch(drafts(&[text])).unwrap();
    }
    assert_eq!(segment_files(dir.path()).len(), 4);
    // act
    spool.ack(2).unwrap();
    // assert
    assert_eq!(
        segment_files(dir.path()),
        [segment_name(3), segment_name(4)]
    );
    assert_eq!(spool.dropped_upto(), 2);
    spool.ack(4).unwrap();
    assert_eq!(segment_files(dir.path()), [segment_name(4)]);
    assert!(matches!(
        spool.read_batch(1, 10, usize::MAX),
        Err(SpoolError::Missing(1))
    ));
    // the next append rotates away from the acked segment, which the next ack removes
    spool.append_batch(drafts(&["e"])).unwrap();
    spool.ack(5).unwrap();
    assert_eq!(segment_files(dir.path()), [segment_name(5)]);
}

#[test]
fn resume_after_a_mark_beyond_the_spool_skips_ahead_instead_of_reusing_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    spool.append_batch(drafts(&["a", "b"])).unwrap();
    spool.resume_after(10).unwrap();
    assert_eq!((spool.durable(), spool.acked()), (10, 10));
    assert_eq!(spool.append_batch(drafts(&["k"])).unwrap(), 11..12);
    drop(spool);
    let spool = Spool::open(dir.path()).unwrap();
    assert_eq!(texts(&spool, 11), ["k"]);
    assert_eq!(spool.append_batch(drafts(&["l"])).unwrap(), 12..13);
}

#[test]
fn spooled_bytes_are_exactly_the_new_entry_json() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    let draft = Draft::at(5, output("é\u{1}"));
    spool.append_batch(vec![draft]).unwrap();
    let batch = spool.read_batch(1, 1, usize::MAX).unwrap().unwrap();
    let want = NewEntry::typed(1, 5, output("é\u{1}"));
    assert_eq!(
        batch.bodies().next().unwrap(),
        serde_json::to_vec(&want).unwrap()
    );
}

#[tokio::test]
async fn async_append_publishes_the_durable_seq() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    let mut durable = spool.subscribe_durable();
    spool.append(drafts(&["x", "y"])).await.unwrap();
    durable.changed().await.unwrap();
    assert_eq!(*durable.borrow(), 2);
}

fn pty_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 256) as u8).collect()
}

fn bodies(spool: &Spool, max_bytes: usize) -> Vec<Vec<u8>> {
    let batch = spool.read_batch(1, 100, max_bytes).unwrap().unwrap();
    batch.bodies().map(<[u8]>::to_vec).collect()
}

#[test]
fn terminal_output_is_spooled_raw_and_read_back_as_the_json_it_stands_for() {
    use base64::Engine;
    use moor_protocol::payload::AgentPtyOutput;
    // arrange: the same output, once raw and once as the JSON entry, each beside a JSON entry
    let (raw_dir, json_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (raw, json) = (
        Spool::open(raw_dir.path()).unwrap(),
        Spool::open(json_dir.path()).unwrap(),
    );
    let bytes = pty_bytes(30_000);
    let as_entry = Draft::at(
        1_700_000_000_123,
        AgentPtyOutput {
            data: base64::engine::general_purpose::STANDARD.encode(&bytes),
        },
    );
    // act
    raw.append_batch(vec![
        Record::PtyOutput {
            ts: 1_700_000_000_123,
            bytes: bytes.clone(),
        },
        Record::Entry(Draft::at(5, output("after"))),
    ])
    .unwrap();
    json.append_batch(vec![as_entry, Draft::at(5, output("after"))])
        .unwrap();
    // assert: the same bytes go out; a quarter fewer are written
    assert_eq!(bodies(&raw, usize::MAX), bodies(&json, usize::MAX));
    let reopened = Spool::open(raw_dir.path()).unwrap();
    assert_eq!(bodies(&reopened, usize::MAX), bodies(&json, usize::MAX));
    let size = |dir: &Path| -> u64 {
        let name = &segment_files(dir)[0];
        fs::metadata(dir.join(name)).unwrap().len()
    };
    let (raw_size, json_size) = (size(raw_dir.path()), size(json_dir.path()));
    assert!(
        raw_size * 4 < json_size * 3 + 400,
        "raw {raw_size} bytes against {json_size}"
    );
}

#[test]
fn a_batch_of_terminal_output_holds_to_its_json_byte_bound() {
    // arrange
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    let pieces: Vec<Record> = (0..3)
        .map(|_| Record::pty_output(pty_bytes(3000)))
        .collect();
    spool.append_batch(pieces).unwrap();
    // What one entry counts against the bound: its JSON and a record's header, as if spooled
    // as JSON.
    let one = bodies(&spool, usize::MAX)[0].len() + HEADER_LEN;
    // act
    let two = bodies(&spool, 2 * one + 1);
    let at_least_one = bodies(&spool, 10);
    // assert: 3,000 raw bytes each, but about 4,000 of JSON: the bound counts the JSON
    assert!(one > 4000, "{one}");
    assert_eq!(two.len(), 2);
    assert_eq!(at_least_one.len(), 1);
    assert_eq!(
        spool
            .read_batch(1, 100, 2 * one + 1)
            .unwrap()
            .unwrap()
            .last(),
        2
    );
}

#[test]
fn raw_and_json_spools_of_the_same_entries_give_the_same_batches() {
    use base64::Engine;
    use moor_protocol::payload::AgentPtyOutput;
    // arrange: a mix of terminal output (empty, small, larger than a read) and other entries,
    // spooled once with raw output and once as the JSON entries it stands for
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let (raw_dir, json_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // (One segment each: the two rotate at different seqs, and a batch ends with its segment.)
    let (raw, json) = (
        Spool::open(raw_dir.path()).unwrap(),
        Spool::open(json_dir.path()).unwrap(),
    );
    for _ in 0..40 {
        let (mut as_raw, mut as_json) = (Vec::new(), Vec::new());
        for _ in 0..=next(6) {
            let ts = next(1 << 40) as i64;
            if next(3) == 0 {
                let d = Draft::at(ts, output(&"x".repeat(next(3000) as usize)));
                as_raw.push(Record::Entry(d.clone()));
                as_json.push(d);
            } else {
                let bytes = pty_bytes(next(6000) as usize);
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                as_raw.push(Record::PtyOutput { ts, bytes });
                as_json.push(Draft::at(ts, AgentPtyOutput { data }));
            }
        }
        assert_eq!(
            raw.append_batch(as_raw).unwrap(),
            json.append_batch(as_json).unwrap()
        );
    }
    // act and assert: from every seq, with bounds from one entry to many, the same entries in
    // the same batches, byte for byte
    for from in 1..=raw.durable() {
        let (entries, bytes) = (1 + next(20) as usize, next(40_000) as usize);
        let a = raw.read_batch(from, entries, bytes).unwrap().unwrap();
        let b = json.read_batch(from, entries, bytes).unwrap().unwrap();
        assert_eq!((a.first(), a.last()), (b.first(), b.last()), "from {from}");
        assert!(a.bodies().eq(b.bodies()), "from {from}");
    }
}

#[test]
fn an_entry_over_the_size_limit_is_spooled_cut_to_it_and_its_neighbours_whole() {
    // arrange: an agent's output line of 3 MiB between two short ones
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path()).unwrap();
    let big = "y".repeat(3 << 20);

    // act
    spool
        .append_batch(drafts(&["before", big.as_str(), "after"]))
        .unwrap();

    // assert
    let batch = spool.read_batch(1, 10, usize::MAX).unwrap().unwrap();
    let sizes: Vec<usize> = batch.bodies().map(<[u8]>::len).collect();
    assert!(sizes[1] <= kinds::ENTRY_MAX_BYTES, "{sizes:?}");
    let texts = texts(&spool, 1);
    assert_eq!((texts[0].as_str(), texts[2].as_str()), ("before", "after"));
    assert!(big.starts_with(texts[1].split(" … [").next().unwrap()));
    assert!(texts[1].ends_with(&format!(
        "bytes cut: the entry was over {} bytes]",
        kinds::ENTRY_MAX_BYTES
    )));
}
