//! The bridge against a scriptable fake `moord` (see `support.rs`): link faults through the
//! library, and whole `moor run` lifecycles through `Bridge` and the `moor` binary.
// Test harness code: a panic is the right reaction to anything unexpected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod link;
mod run;
mod support;

use std::path::Path;
use std::time::Duration;

use moor_bridge::backoff::BackoffConfig;
use moor_bridge::link::{Link, LinkParams, LinkPorts};
use moor_bridge::session_dir::SessionDir;
use moor_bridge::status::Status;
use moor_bridge::{BridgeConfig, LinkConfig, Token};

use support::FakeServer;

pub const TOKEN: &str = "t0k-for-tests";

/// Millisecond timings so reconnect tests finish fast.
pub fn fast_link() -> LinkConfig {
    LinkConfig {
        backoff: BackoffConfig {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(100),
            stable_after: Duration::from_secs(10),
        },
        connect_timeout: Duration::from_secs(2),
        ..LinkConfig::default()
    }
}

fn show_status() -> bool {
    std::env::var_os("TEST_LOG").is_some()
}

/// A `Bridge` configuration against `server` with a private state dir.
pub fn bridge_config(server: &FakeServer, state: &Path, command: &[&str]) -> BridgeConfig {
    BridgeConfig {
        server: server.url(),
        token: Token::new(TOKEN),
        session: Some("s1".into()),
        state_dir: Some(state.to_owned()),
        command: command.iter().map(|s| s.to_string()).collect(),
        link: fast_link(),
        print_status: show_status(),
        ..BridgeConfig::default()
    }
}

/// A link with no agent behind it, as a benchmark would use it.
pub fn bare_link(server: &FakeServer, dir: &SessionDir, config: LinkConfig) -> (Link, LinkPorts) {
    bare_link_to(&server.url(), dir, config)
}

/// A link to `server` over in-memory pipes: nothing leaves the runtime, so the test can run on
/// paused time (`#[tokio::test(start_paused = true)]`) and read the server's timeline.
pub fn memory_link(server: &FakeServer, dir: &SessionDir, config: LinkConfig) -> (Link, LinkPorts) {
    let (link, ports) = bare_link(server, dir, config);
    (link.with_dial(server.dial()), ports)
}

/// A link to `servers` (one base URL, or several separated by commas).
pub fn bare_link_to(servers: &str, dir: &SessionDir, config: LinkConfig) -> (Link, LinkPorts) {
    Link::new(LinkParams {
        url: moor_bridge::config::bridge_ws_url(servers).unwrap(),
        token: Token::new(TOKEN),
        session: "s1".into(),
        continues: None,
        producer: dir.producer,
        agent: Default::default(),
        config,
        spool: dir.spool.clone(),
        ledger: dir.ledger.clone(),
        status: Status::new(show_status(), "s1"),
    })
}

/// Guard against hangs; the timeout is never the synchronisation itself.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(60), fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out: {what}"),
    }
}
