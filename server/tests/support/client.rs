//! A small client for tests that play users against a serving server: JSON calls with a
//! bearer token, and bridge sockets driven by hand (`Hello`, entries, the close code).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, Hello, ServerToBridge};
use moor_protocol::{NewEntry, ProducerId, Seq, PROTOCOL_VERSION};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Failure guard on every wait.
pub const WAIT: Duration = Duration::from_secs(10);

/// A bridge's socket.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Calls one server as one credential.
#[derive(Clone)]
pub struct Client {
    /// Where the server listens.
    pub addr: std::net::SocketAddr,
    /// The bearer token.
    pub token: String,
    http: reqwest::Client,
}

/// How a bridge's handshake ended: welcomed, or closed with a code and reason.
pub enum Attach {
    /// The server sent `Welcome`.
    Welcome(Box<Ws>),
    /// The server closed the socket with this code and reason.
    Closed(u16, String),
}

impl Attach {
    /// The close code, if refused.
    pub fn code(&self) -> Option<u16> {
        match self {
            Attach::Welcome(_) => None,
            Attach::Closed(code, _) => Some(*code),
        }
    }

    /// The welcomed socket, or the close code it was refused with.
    pub fn welcomed(self) -> Result<Ws, u16> {
        match self {
            Attach::Welcome(ws) => Ok(*ws),
            Attach::Closed(code, _) => Err(code),
        }
    }

    /// The welcomed socket; panics if refused.
    pub fn socket(self) -> Ws {
        match self {
            Attach::Welcome(ws) => *ws,
            Attach::Closed(code, reason) => panic!("bridge refused: {code} {reason}"),
        }
    }
}

impl Client {
    /// Calls with `token`.
    pub fn new(addr: std::net::SocketAddr, token: &str) -> Self {
        Self {
            addr,
            token: token.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// Logs `name` in with `password`; a client with the access token.
    pub async fn login(addr: std::net::SocketAddr, name: &str, password: &str) -> Self {
        let anon = Self::new(addr, "");
        let resp = anon
            .http
            .post(anon.url("/auth/login"))
            .json(&json!({"name": name, "password": password}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "login {name}");
        let pair: Value = resp.json().await.unwrap();
        Self::new(addr, pair["access_token"].as_str().unwrap())
    }

    /// Adds the user `name` with `password`, as an administrator's client.
    pub async fn add_user(&self, name: &str, password: &str) {
        let body = json!({"name": name, "password": password});
        let (status, _) = self.call("POST", "/users", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "add user {name}");
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/api/v1{path}", self.addr)
    }

    /// Sends a request; the status and the JSON body (`Null` when there is none).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), self.url(path))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Shares `session` (which this client owns) with `user`, whose client is `them`: offers
    /// `role` by name, and they accept it.
    pub async fn share(&self, session: &str, user: &str, them: &Client, role: &str) {
        let (s, body) = self
            .call(
                "PUT",
                &format!("/sessions/{session}/members/{user}"),
                Some(json!({ "role": role })),
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "offer to {user}: {body}");
        let (s, body) = them
            .call("POST", &format!("/offers/{session}/accept"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{user} accepts: {body}");
    }

    /// Opens a bridge for session `name` and says `Hello`.
    pub async fn bridge(&self, name: &str) -> Attach {
        handshake(bridge_socket(self.addr, &self.token).await, hello(name)).await
    }
}

/// The `Hello` of a new producer for session `session` that has applied no input yet.
pub fn hello(session: &str) -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        session: session.into(),
        producer: ProducerId::new(),
        last_applied_input: Seq::ZERO,
        uncertain_inputs: vec![],
        continues: None,
        agent: AgentInfo {
            command: vec!["test".into()],
            ..Default::default()
        },
    }
}

/// A bridge socket to the server at `addr` with bearer `token`, before its `Hello`.
pub async fn bridge_socket(addr: std::net::SocketAddr, token: &str) -> Ws {
    let mut req = format!("ws://{addr}/api/v1/bridge")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

/// Says `hello` on `ws` and reads until the welcome or the close.
pub async fn handshake(mut ws: Ws, hello: Hello) -> Attach {
    send(&mut ws, &BridgeToServer::Hello(hello)).await;
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("answer") {
            Some(Ok(Message::Text(t))) => {
                if let Ok(ServerToBridge::Welcome(_)) = serde_json::from_str(&t) {
                    return Attach::Welcome(Box::new(ws));
                }
            }
            Some(Ok(Message::Close(Some(f)))) => {
                return Attach::Closed(u16::from(f.code), f.reason.to_string())
            }
            Some(Ok(_)) => {}
            other => panic!("bridge handshake: {other:?}"),
        }
    }
}

/// Sends one frame.
pub async fn send(ws: &mut Ws, frame: &BridgeToServer) {
    let text = serde_json::to_string(frame).unwrap();
    ws.send(Message::Text(text.into())).await.unwrap();
}

/// Sends one `agent.output` entry of `bytes` characters as producer seq `seq`, then reads
/// until its ack (`Ok`) or the close (`Err(code)`).
pub async fn output(ws: &mut Ws, seq: u64, bytes: usize) -> Result<(), u16> {
    let entry = NewEntry {
        producer_seq: seq,
        ts: 1,
        kind: moor_protocol::kinds::AGENT_OUTPUT.into(),
        payload: json!({"stream": "stdout", "text": "x".repeat(bytes)}),
    };
    send(
        ws,
        &BridgeToServer::Entries {
            entries: vec![entry],
        },
    )
    .await;
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("answer") {
            Some(Ok(Message::Text(t))) => {
                if let ServerToBridge::Ack { producer_seq } = serde_json::from_str(&t).unwrap() {
                    if producer_seq >= seq {
                        return Ok(());
                    }
                }
            }
            Some(Ok(Message::Close(Some(f)))) => return Err(u16::from(f.code)),
            Some(Ok(_)) => {}
            other => panic!("waiting for an ack: {other:?}"),
        }
    }
}
