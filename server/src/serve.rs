//! The accept loop: HTTP/1.1 (with WebSocket upgrades) straight on hyper.
//!
//! `axum::serve` negotiates HTTP/1 or HTTP/2 per connection, and its connection future carries
//! the HTTP/2 state machine inline: about 15 KiB per idle socket before the first byte. Mooring
//! holds thousands of long-lived viewer streams and speaks HTTP/1.1 only (TLS and HTTP/2 belong
//! to a reverse proxy in front), so it serves connections with hyper's HTTP/1 builder directly.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Time allowed for a request head to arrive on a new or idle connection.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `shutdown` is cancelled, then lets in-flight requests finish
/// (streams end themselves on the same token) for at most `grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    grace: Duration,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: log, back off a moment, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        // The peer address, for per-client rate limits.
        let app = app.clone();
        let service = TowerToHyperService::new(tower::util::MapRequest::new(
            app,
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        ));
        let conn = builder
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = shutdown.cancelled() => {
                    // Finish the request in flight (streams end on the same token), then close.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still open after the shutdown grace period");
    }
    Ok(())
}
