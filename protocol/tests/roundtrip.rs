//! Golden encodings: the JSON shapes other programs (the web client, scripts) rely on.

use moor_protocol::bridge::{BridgeToServer, ReceiptStatus, ServerToBridge};
use moor_protocol::{NewEntry, Seq};
use serde_json::json;

#[test]
fn bridge_frames_have_stable_json_shapes() {
    let frame = BridgeToServer::Entries {
        entries: vec![NewEntry {
            producer_seq: 7,
            ts: 1,
            kind: "agent.output".into(),
            payload: json!({"stream": "stdout", "text": "hi"}),
        }],
    };
    let v = serde_json::to_value(&frame).unwrap();
    assert_eq!(
        v,
        json!({"type": "entries", "entries": [{"producer_seq": 7, "ts": 1, "kind": "agent.output", "payload": {"stream": "stdout", "text": "hi"}}]})
    );
    let receipt = BridgeToServer::Receipt {
        input_seq: Seq(3),
        status: ReceiptStatus::Applied,
    };
    assert_eq!(
        serde_json::to_value(&receipt).unwrap(),
        json!({"type": "receipt", "input_seq": 3, "status": {"state": "applied"}})
    );
    let ack: ServerToBridge =
        serde_json::from_value(json!({"type": "ack", "producer_seq": 9})).unwrap();
    assert_eq!(ack, ServerToBridge::Ack { producer_seq: 9 });
    let hb: BridgeToServer = serde_json::from_str(r#"{"type":"heartbeat"}"#).unwrap();
    assert_eq!(
        hb,
        BridgeToServer::Heartbeat {
            spool_unacked: None
        }
    );
    let depth = BridgeToServer::Heartbeat {
        spool_unacked: Some(3),
    };
    assert_eq!(
        serde_json::to_value(&depth).unwrap(),
        json!({"type": "heartbeat", "spool_unacked": 3})
    );
    // A server that predates the report reads it as a plain heartbeat, and a report reads back.
    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Old {
        Heartbeat,
    }
    let text = serde_json::to_string(&depth).unwrap();
    assert_eq!(serde_json::from_str::<Old>(&text).unwrap(), Old::Heartbeat);
    assert_eq!(
        serde_json::from_str::<BridgeToServer>(&text).unwrap(),
        depth
    );
}

#[test]
fn unknown_frame_types_are_rejected() {
    assert!(serde_json::from_str::<BridgeToServer>(r#"{"type":"launch_missiles"}"#).is_err());
}

/// `Incoming::read` (how `moord` reads bridge frames) and the derived reader of
/// `BridgeToServer` agree on every frame: the same entries, each payload's text the one sent.
#[test]
fn incoming_reads_entries_as_the_frame_type_does() {
    use moor_protocol::bridge::Incoming;
    let payloads = [
        json!({"stream": "stdout", "text": "line \"quoted\"\n\ttabbed é ✓ \u{1}"}),
        json!({"n": [1, -2, 3.5, 1e300], "nested": {"a": null, "b": [true, false]}}),
        json!("a bare string"),
        json!(42),
    ];
    let entries: Vec<NewEntry> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| NewEntry {
            producer_seq: i as u64 + 1,
            ts: 1_700_000_000_000 + i as i64,
            kind: "agent.output".into(),
            payload: p.clone(),
        })
        .collect();
    let text = serde_json::to_string(&BridgeToServer::Entries {
        entries: entries.clone(),
    })
    .unwrap();
    let Incoming::Entries(read) = Incoming::read(&text).unwrap() else {
        panic!("an entries frame read as another");
    };
    assert_eq!(read.len(), entries.len());
    for (raw, sent) in read.iter().zip(&entries) {
        assert_eq!(
            (raw.producer_seq, raw.ts, &raw.kind),
            (sent.producer_seq, sent.ts, &sent.kind)
        );
        assert_eq!(
            raw.payload.get(),
            serde_json::to_string(&sent.payload).unwrap()
        );
    }

    // The tag need not come first; extra fields are ignored by both.
    let reordered = r#"{"entries":[{"producer_seq":1,"ts":2,"kind":"k.x","payload":{"a":1},"extra":0}],"type":"entries"}"#;
    let Ok(Incoming::Entries(read)) = Incoming::read(reordered) else {
        panic!("a reordered entries frame was not read as one");
    };
    assert_eq!(read[0].payload.get(), r#"{"a":1}"#);
    assert!(serde_json::from_str::<BridgeToServer>(reordered).is_ok());

    // Every other frame is read whole.
    for other in [
        BridgeToServer::End,
        BridgeToServer::Heartbeat {
            spool_unacked: Some(4),
        },
        BridgeToServer::Receipt {
            input_seq: Seq(9),
            status: ReceiptStatus::Delivered,
        },
    ] {
        let text = serde_json::to_string(&other).unwrap();
        match Incoming::read(&text).unwrap() {
            Incoming::Other(frame) => assert_eq!(frame, other),
            Incoming::Entries(_) => panic!("{text} read as entries"),
        }
    }

    // What one refuses, the other refuses.
    for bad in [
        "",
        "not json",
        "{}",
        r#"{"entries":[]}"#,
        r#"{"type":"entries"}"#,
        r#"{"type":"entries","entries":[{"producer_seq":1}]}"#,
        r#"{"type":"entries","entries":[{"producer_seq":-1,"ts":0,"kind":"k","payload":1}]}"#,
        r#"{"type":"entries","entries":[{"producer_seq":1,"ts":0,"kind":"k","payload":{"a":}}]}"#,
        r#"{"type":"entries","entries":[]} trailing"#,
        r#"{"type":"launch_missiles"}"#,
    ] {
        assert!(
            serde_json::from_str::<BridgeToServer>(bad).is_err(),
            "{bad}"
        );
        assert!(Incoming::read(bad).is_err(), "{bad}");
    }
}
