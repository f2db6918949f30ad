//! moor-e2e: the real `moor` against the real `moord`, through a fault proxy.
//!
//! The harness treats both programs as black boxes: it starts their binaries, talks HTTP,
//! SSE and WebSocket to them, and breaks the TCP links between them. It depends on the wire
//! types of `moor-protocol` only, never on the server's or the bridge's library code, so what is
//! tested is exactly what ships.
//!
//! Every wait is bounded by a timeout that only guards against hangs; synchronisation comes
//! from real events (a listening line, a stored entry, an accepted connection).
//!
//! Run with `cargo build --workspace && cargo test -p moor-e2e`: `moord` and `moor` are taken
//! from the target dir next to the test executable. `TEST_LOG=1` forwards their output live;
//! otherwise it is printed, and the temp dirs kept, when a test fails.
#![warn(missing_docs)]

pub mod acp;
pub mod assert;
pub mod bench;
pub mod bridge;
pub mod claude;
pub mod fake_api;
pub mod fake_gemini;
mod fake_model;
pub mod fake_openai;
pub mod http;
pub mod invariants;
pub mod metrics;
pub mod pg;
pub mod proxy;
pub mod push;
mod record;
pub mod rig;
pub mod server;
pub mod sink;
pub mod small_fs;
pub mod soak;
pub mod sse;
pub mod term;
pub mod util;
pub mod ws;

pub use assert::{
    assert_complete_session, assert_contiguous, assert_exact_agent_output, assert_exact_stream,
    lines,
};
pub use bridge::{BridgeOpts, TestBridge};
pub use claude::ClaudeEnv;
pub use fake_api::FakeAnthropic;
pub use http::{Api, LogTail};
pub use proxy::FaultProxy;
pub use push::{Device, PushService};
pub use rig::{Rig, FINISH, WAIT};
pub use server::{ServerOpts, TestServer};
pub use sink::{Hit, SinkReceiver};
pub use sse::{SseClient, SseOpts};
pub use term::TermSession;
pub use util::{eventually, eventually_some};
pub use ws::{RawBridge, WsViewer};
