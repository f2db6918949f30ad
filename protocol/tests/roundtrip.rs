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
