//! WebSocket clients: a recording viewer (`WsViewer`) and a hand-driven bridge (`RawBridge`)
//! that can send frames the real `moor` never would.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, Hello, ServerToBridge, Welcome};
use moor_protocol::web::ServerToViewer;
use moor_protocol::{NewEntry, ProducerId, Seq, SessionId, PROTOCOL_VERSION};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use crate::sse::Recorder;

/// A client WebSocket.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Close code reported when the connection ended without a close frame.
pub const ABNORMAL_CLOSE: u16 = 1006;

/// Opens a WebSocket to `url` with an optional bearer token.
pub async fn connect(url: &str, token: Option<&str>) -> Result<Ws, tungstenite::Error> {
    let mut req = url.into_client_request()?;
    if let Some(t) = token {
        req.headers_mut().insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {t}")).expect("token is a valid header value"),
        );
    }
    // Large enough for the oversized-frame test: the limit under test is the server's.
    let config = WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let (ws, _resp) =
        tokio_tungstenite::connect_async_with_config(req, Some(config), false).await?;
    Ok(ws)
}

/// A viewer on `GET /api/v1/sessions/{id}/ws?after=N`, recording entries like an SSE client.
#[derive(Debug)]
pub struct WsViewer {
    rec: Recorder,
    stop: CancellationToken,
}

impl WsViewer {
    /// Connects (panics if the upgrade fails) and records frames until the socket closes.
    pub async fn connect(server: SocketAddr, token: &str, session: SessionId, after: u64) -> Self {
        let url = format!("ws://{server}/api/v1/sessions/{session}/ws?after={after}");
        let ws = connect(&url, Some(token))
            .await
            .unwrap_or_else(|e| panic!("viewer websocket {url}: {e}"));
        Self::record_socket(ws)
    }

    /// Records the frames of a viewer socket already connected (through a proxy, say).
    pub fn record_socket(ws: Ws) -> Self {
        let rec = Recorder::default();
        rec.update(|s| s.connections += 1);
        let stop = CancellationToken::new();
        tokio::spawn(record(ws, rec.clone(), stop.clone()));
        Self { rec, stop }
    }

    /// The recorded state.
    pub fn recorder(&self) -> &Recorder {
        &self.rec
    }
}

impl Drop for WsViewer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn record(mut ws: Ws, rec: Recorder, stop: CancellationToken) {
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => break,
            m = ws.next() => m,
        };
        match msg {
            Some(Ok(Message::Text(text))) => match serde_json::from_str::<ServerToViewer>(&text) {
                Ok(ServerToViewer::Entry(e)) => rec.update(|s| s.entries.push(e)),
                Ok(ServerToViewer::Reset(r)) => rec.update(|s| s.resets.push(r)),
                Ok(ServerToViewer::Heartbeat) => rec.update(|s| s.keepalives += 1),
                Ok(other) => rec.update(|s| s.errors.push(format!("unexpected frame {other:?}"))),
                Err(e) => rec.update(|s| s.errors.push(format!("bad frame {text}: {e}"))),
            },
            Some(Ok(Message::Close(frame))) => {
                rec.update(|s| s.errors.push(format!("closed: {frame:?}")));
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                rec.update(|s| s.errors.push(format!("websocket: {e}")));
                break;
            }
            None => break,
        }
    }
    rec.update(|s| s.finished = true);
}

/// How a WebSocket ended, from the client's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The close code (1006 when no close frame came).
    pub code: u16,
    /// The close reason.
    pub reason: String,
    /// An `error` frame the server sent before closing, if any.
    pub error: Option<(moor_protocol::ErrorCode, String)>,
}

/// A bridge connection driven by hand, frame by frame.
#[derive(Debug)]
pub struct RawBridge {
    ws: Ws,
    /// The last `error` frame the server sent.
    error: Option<(moor_protocol::ErrorCode, String)>,
}

impl RawBridge {
    /// Opens `ws://server/api/v1/bridge` with an optional bearer token.
    pub async fn connect(
        server: SocketAddr,
        token: Option<&str>,
    ) -> Result<Self, tungstenite::Error> {
        let ws = connect(&format!("ws://{server}/api/v1/bridge"), token).await?;
        Ok(Self { ws, error: None })
    }

    /// A `Hello` for `session` from `producer`.
    pub fn hello_frame(session: &str, producer: ProducerId) -> BridgeToServer {
        BridgeToServer::Hello(Hello {
            version: PROTOCOL_VERSION,
            session: session.to_owned(),
            producer,
            last_applied_input: Seq::ZERO,
            uncertain_inputs: Vec::new(),
            continues: None,
            agent: AgentInfo {
                command: vec!["raw-bridge".into()],
                cwd: "/".into(),
                host: "test".into(),
                adapter: "lines".into(),
            },
        })
    }

    /// Sends `Hello` and waits for `Welcome`.
    pub async fn hello(&mut self, session: &str, producer: ProducerId) -> Welcome {
        self.send(&Self::hello_frame(session, producer)).await;
        match self.recv(Duration::from_secs(10)).await {
            Some(ServerToBridge::Welcome(w)) => w,
            other => panic!("expected welcome, got {other:?}"),
        }
    }

    /// Sends a frame as JSON text.
    pub async fn send(&mut self, frame: &BridgeToServer) {
        let text = serde_json::to_string(frame).expect("frame serialises");
        self.send_text(text).await;
    }

    /// Sends raw text (which may be anything).
    pub async fn send_text(&mut self, text: String) {
        self.ws
            .send(Message::text(text))
            .await
            .expect("send on bridge websocket");
    }

    /// Sends `Entries` with `agent.output` lines `texts`, producer seqs from `first_seq`.
    pub async fn send_lines(&mut self, first_seq: u64, texts: &[&str]) {
        let entries = texts
            .iter()
            .enumerate()
            .map(|(i, t)| NewEntry {
                producer_seq: first_seq + i as u64,
                ts: moor_protocol::now_ms(),
                kind: moor_protocol::kinds::AGENT_OUTPUT.to_owned(),
                payload: serde_json::json!({ "stream": "stdout", "text": t }),
            })
            .collect();
        self.send(&BridgeToServer::Entries { entries }).await;
    }

    /// Next non-heartbeat frame, or `None` if the socket closed or `timeout` passed.
    pub async fn recv(&mut self, timeout: Duration) -> Option<ServerToBridge> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()??;
            match msg {
                Ok(Message::Text(text)) => {
                    let frame: ServerToBridge = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("server sent an undecodable frame {text}: {e}"));
                    match frame {
                        ServerToBridge::Heartbeat => continue,
                        ServerToBridge::Error { code, message } => {
                            self.error = Some((code, message.clone()));
                            return Some(ServerToBridge::Error { code, message });
                        }
                        f => return Some(f),
                    }
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    /// Waits for an `Ack` covering `producer_seq`.
    pub async fn wait_ack(&mut self, producer_seq: u64, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.recv(left).await {
                Some(ServerToBridge::Ack { producer_seq: s }) if s >= producer_seq => return,
                Some(_) => continue,
                None => panic!("no ack for producer seq {producer_seq} within {timeout:?}"),
            }
        }
    }

    /// Reads until the server closes the socket and reports how (1006 without a close frame).
    /// Panics if it stays open for `timeout`.
    pub async fn expect_close(mut self, timeout: Duration) -> Closed {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Ok(m) => m,
                Err(_) => panic!("the server did not close the bridge socket within {timeout:?}"),
            };
            match msg {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return Closed {
                        code: u16::from(frame.code),
                        reason: frame.reason.to_string(),
                        error: self.error,
                    };
                }
                Some(Ok(Message::Close(None))) => {
                    return Closed {
                        code: 1005,
                        reason: String::new(),
                        error: self.error,
                    };
                }
                Some(Ok(Message::Text(text))) => {
                    if let Ok(ServerToBridge::Error { code, message }) = serde_json::from_str(&text)
                    {
                        self.error = Some((code, message));
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    return Closed {
                        code: ABNORMAL_CLOSE,
                        reason: format!("no close frame: {e}"),
                        error: self.error,
                    };
                }
                None => {
                    return Closed {
                        code: ABNORMAL_CLOSE,
                        reason: "no close frame: stream ended".into(),
                        error: self.error,
                    };
                }
            }
        }
    }
}
