//! The accept loop: HTTP/1.1 (with WebSocket upgrades) straight on hyper, over TLS when the
//! server has a certificate.
//!
//! `axum::serve` negotiates HTTP/1 or HTTP/2 per connection, and its connection future carries
//! the HTTP/2 state machine inline: about 15 KiB per idle socket before the first byte. Mooring
//! holds thousands of long-lived viewer streams and speaks HTTP/1.1 only (HTTP/2 belongs to a
//! reverse proxy in front, if any), so it serves connections with hyper's HTTP/1 builder
//! directly. The TLS handshake runs in the connection's own task, never in the accept loop.
//!
//! Calls nothing in the crate: it gets the finished router from `lib`.

use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Time allowed for a request head to arrive on a new or idle connection.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` (over TLS with `tls`) until `shutdown` is cancelled, then lets
/// in-flight requests finish (streams end themselves on the same token) for at most `grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
    grace: Duration,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    let mut builder = http1::Builder::new();
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
        let shutdown = shutdown.clone();
        let builder = builder.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            match tls {
                None => serve_connection(&builder, tcp, service, shutdown, peer).await,
                // Boxed, so plain connections' futures do not carry the TLS state inline.
                Some(tls) => {
                    Box::pin(async move {
                        if let Some(stream) = tls_handshake(tls, tcp, &shutdown, peer).await {
                            serve_connection(&builder, stream, service, shutdown, peer).await;
                        }
                    })
                    .await;
                }
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

/// Runs the TLS handshake (bounded by the header timeout); `None` when it fails, times out or
/// the server shuts down first.
async fn tls_handshake(
    tls: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    shutdown: &CancellationToken,
    peer: std::net::SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let handshake = tokio::select! {
        _ = shutdown.cancelled() => return None,
        h = tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(tcp)) => h,
    };
    match handshake {
        Ok(Ok(stream)) => Some(stream),
        // Plain HTTP on the TLS port, a client that does not trust the certificate, a scanner:
        // nothing to answer.
        Ok(Err(e)) => {
            tracing::debug!(error = %e, %peer, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// Serves one connection until it ends; on shutdown, finishes the request in flight first.
async fn serve_connection<I, S>(
    builder: &http1::Builder,
    io: I,
    service: S,
    shutdown: CancellationToken,
    peer: std::net::SocketAddr,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming> + Send,
    S::Future: Send + 'static,
    S::ResBody: Send + 'static,
    <S::ResBody as hyper::body::Body>::Data: Send,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
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
}
