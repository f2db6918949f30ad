//! JSON-RPC 2.0 over stdio, as the Agent Client Protocol uses it: one JSON object per line.
//! [`parse`] classifies what the agent sent; the builders return one line, newline included.
//!
//! Pure. Only protocol version 1 is spoken; the client offers no file system and no terminal,
//! so a conforming agent never asks for them (one that does gets "method not found").

use serde_json::{json, Value};

/// The ACP protocol version this client speaks.
pub const PROTOCOL_VERSION: u64 = 1;
/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// One message from the agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The answer to one of our requests.
    Response {
        /// Our request id.
        id: u64,
        /// `result`, or the error's message.
        outcome: Result<Value, String>,
    },
    /// A request the agent wants answered (`session/request_permission`, `fs/...`).
    Request {
        /// The agent's id, echoed in the answer (a number or a string).
        id: Value,
        /// Method.
        method: String,
        /// Params.
        params: Value,
    },
    /// A notification (`session/update`).
    Notification {
        /// Method.
        method: String,
        /// Params.
        params: Value,
    },
    /// Not a JSON-RPC message; kept for the log.
    Invalid(String),
}

/// Classify one line.
pub fn parse(line: &str) -> Incoming {
    let value: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Incoming::Invalid("not a JSON object".into()),
        Err(e) => return Incoming::Invalid(format!("not JSON: {e}")),
    };
    let method = value.get("method").and_then(Value::as_str);
    let params = || value.get("params").cloned().unwrap_or(Value::Null);
    match (value.get("id"), method) {
        (Some(id), Some(method)) if !id.is_null() => Incoming::Request {
            id: id.clone(),
            method: method.to_owned(),
            params: params(),
        },
        (None, Some(method)) => Incoming::Notification {
            method: method.to_owned(),
            params: params(),
        },
        (Some(id), None) => {
            let Some(id) = id.as_u64() else {
                return Incoming::Invalid("a response to an id this client never used".into());
            };
            let outcome = match value.get("error") {
                Some(e) if !e.is_null() => Err(error_text(e)),
                _ => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
            };
            Incoming::Response { id, outcome }
        }
        _ => Incoming::Invalid("neither a request, a notification nor a response".into()),
    }
}

fn error_text(error: &Value) -> String {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("error");
    match error.get("code").and_then(Value::as_i64) {
        Some(code) => format!("{message} ({code})"),
        None => message.to_owned(),
    }
}

fn line(value: Value) -> String {
    let mut s = value.to_string();
    s.push('\n');
    s
}

/// A request of ours.
pub fn request(id: u64, method: &str, params: Value) -> String {
    line(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A notification of ours (`session/cancel`).
pub fn notification(method: &str, params: Value) -> String {
    line(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// The answer to the agent's request `id`.
pub fn result(id: &Value, result: Value) -> String {
    line(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// An error answer to the agent's request `id`.
pub fn error(id: &Value, code: i64, message: &str) -> String {
    line(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

/// `initialize` params: no file system, no terminal offered.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {
            "fs": {"readTextFile": false, "writeTextFile": false},
            "terminal": false,
        },
        "clientInfo": {"name": "moor", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// `session/new` (or, with `id`, `session/load`) params.
pub fn session_params(cwd: &str, id: Option<&str>) -> Value {
    let mut params = json!({"cwd": cwd, "mcpServers": []});
    if let Some(id) = id {
        params["sessionId"] = json!(id);
    }
    params
}

/// `session/prompt` params: one text block.
pub fn prompt_params(session_id: &str, text: &str) -> Value {
    json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})
}

/// The answer to `session/request_permission`: the option chosen, or cancelled when none is.
pub fn permission_outcome(option_id: Option<&str>) -> Value {
    match option_id {
        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_classified_by_id_and_method() {
        let r = parse(r#"{"jsonrpc":"2.0","id":3,"result":{"sessionId":"s"}}"#);
        assert_eq!(
            r,
            Incoming::Response {
                id: 3,
                outcome: Ok(json!({"sessionId": "s"}))
            }
        );
        let e = parse(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"boom"}}"#);
        assert_eq!(
            e,
            Incoming::Response {
                id: 4,
                outcome: Err("boom (-32603)".into())
            }
        );
        let q =
            parse(r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{}}"#);
        assert!(matches!(q, Incoming::Request { id, .. } if id == json!(0)));
        let n = parse(r#"{"jsonrpc":"2.0","method":"session/update","params":{"a":1}}"#);
        assert!(matches!(n, Incoming::Notification { method, .. } if method == "session/update"));
        assert!(matches!(parse("hello"), Incoming::Invalid(_)));
        assert!(matches!(parse("[1]"), Incoming::Invalid(_)));
        assert!(matches!(
            parse(r#"{"id":"x","result":1}"#),
            Incoming::Invalid(_)
        ));
    }

    #[test]
    fn builders_write_single_lines() {
        for msg in [
            request(1, "initialize", initialize_params()),
            notification("session/cancel", json!({"sessionId": "s"})),
            result(&json!(0), permission_outcome(Some("proceed_once"))),
            error(&json!("x"), METHOD_NOT_FOUND, "no"),
        ] {
            assert!(msg.ends_with('\n'));
            assert_eq!(msg.matches('\n').count(), 1);
            let v: Value = serde_json::from_str(&msg).unwrap();
            assert_eq!(v["jsonrpc"], "2.0");
        }
        assert_eq!(session_params("/p", Some("s1"))["sessionId"], json!("s1"));
        assert_eq!(
            permission_outcome(None)["outcome"]["outcome"],
            json!("cancelled")
        );
    }
}
