//! What the fake model APIs (`FakeAnthropic`, `FakeOpenAi`, `FakeGemini`) share: serving on
//! 127.0.0.1 until dropped, recording every request, answering with an SSE stream that can
//! stall (go silent with the connection open, until the fake is dropped), and reading the
//! `[[marker:…]]` scripts out of prompts. Each fake keeps its own API's shapes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::Router;
use futures_util::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;

/// A fake model API being served; stops (and releases stalled streams) when dropped.
#[derive(Debug)]
pub(crate) struct FakeServer<R> {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    shared: Shared<R>,
    serving: CancellationToken,
}

/// The handlers' state: the requests so far and the fake's lifetime.
#[derive(Debug)]
pub(crate) struct Shared<R> {
    requests: Arc<Mutex<Vec<R>>>,
    stop: CancellationToken,
}

impl<R> Clone for Shared<R> {
    fn clone(&self) -> Self {
        Self {
            requests: self.requests.clone(),
            stop: self.stop.clone(),
        }
    }
}

impl<R: Clone> FakeServer<R> {
    /// Binds 127.0.0.1:0 and serves the router `app` builds around the handlers' state.
    pub(crate) async fn start(app: impl FnOnce(Shared<R>) -> Router) -> Self {
        let shared = Shared {
            requests: Arc::new(Mutex::new(Vec::new())),
            stop: CancellationToken::new(),
        };
        let (addr, serving) = crate::util::serve_loopback(app(shared.clone()), "fake API").await;
        Self {
            addr,
            shared,
            serving,
        }
    }

    /// Every request recorded so far.
    pub(crate) fn requests(&self) -> Vec<R> {
        self.shared.requests.lock().expect("requests lock").clone()
    }
}

impl<R> Drop for FakeServer<R> {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        self.serving.cancel();
    }
}

impl<R> Shared<R> {
    /// Records one request.
    pub(crate) fn record(&self, request: R) {
        self.requests.lock().expect("requests lock").push(request);
    }

    /// An SSE answer made of `frames` (each already `event:`/`data:` lines and a blank line);
    /// with `stall`, it then goes silent with the connection open, as a stalled model stream
    /// does, until the fake is dropped.
    pub(crate) fn sse(&self, frames: Vec<String>, stall: bool) -> Response {
        let frames: Vec<Result<Bytes, Infallible>> =
            frames.into_iter().map(|f| Ok(Bytes::from(f))).collect();
        let head = stream::iter(frames);
        let body = if stall {
            let stop = self.stop.clone();
            let hang = stream::once(async move {
                stop.cancelled().await;
                Ok::<Bytes, Infallible>(Bytes::new())
            });
            Body::from_stream(head.chain(hang))
        } else {
            Body::from_stream(head)
        };
        Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(body)
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// The text of a `[[open…]]` marker in `prompt`: what follows `open` up to `]]`.
pub(crate) fn marker(prompt: &str, open: &str) -> Option<String> {
    let start = prompt.find(open)? + open.len();
    let end = prompt[start..].find("]]")? + start;
    Some(prompt[start..end].to_owned())
}

/// The word after "remember the word " in `text`: how a fake shows that a loaded session
/// carries its history.
pub(crate) fn remembered(text: &str) -> Option<String> {
    let open = "remember the word ";
    let rest = &text[text.find(open)? + open.len()..];
    let end = rest
        .find(|c: char| !c.is_alphanumeric())
        .unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}
