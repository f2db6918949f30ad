//! `moor run --metrics-listen ADDR`: the bridge's own state for a Prometheus scraper, in the text
//! exposition format, at `GET /metrics` on a plain-HTTP listener (nothing else is served there;
//! keep it on a private address).
//!
//! Each scrape reads the spool's counters and the link's state as they are at that moment.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::spool::Spool;
use crate::status::Status;

/// Most bytes of a request head read.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// A client that has not sent its request head within this long is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The exposition: spool depth, acknowledged and durable producer seqs, link state and
/// reconnections.
pub fn render(status: &Status, spool: &Spool) -> String {
    let up = u8::from(*status.link_up().borrow());
    let connections = status.connections();
    let metrics: [(&str, &str, &str, u64); 6] = [
        (
            "moor_spool_unacked_entries",
            "gauge",
            "Entries on disk in the spool that moord has not acknowledged yet",
            spool.unacked(),
        ),
        (
            "moor_spool_durable_seq",
            "gauge",
            "Highest producer seq written to the spool (fsynced)",
            spool.durable(),
        ),
        (
            "moor_acked_seq",
            "gauge",
            "Highest producer seq moord acknowledged (stored)",
            spool.acked(),
        ),
        (
            "moor_link_up",
            "gauge",
            "1 while a connection to moord is welcomed, else 0",
            u64::from(up),
        ),
        (
            "moor_link_connections_total",
            "counter",
            "Connections moord welcomed since moor started",
            connections,
        ),
        (
            "moor_link_reconnects_total",
            "counter",
            "Connections welcomed after the first: reconnections and moves",
            connections.saturating_sub(1),
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in metrics {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        ));
    }
    out
}

/// Serves `GET /metrics` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    status: Status,
    spool: Spool,
    shutdown: CancellationToken,
) {
    loop {
        let conn = tokio::select! {
            _ = shutdown.cancelled() => return,
            conn = listener.accept() => conn,
        };
        match conn {
            Ok((stream, _)) => {
                let (status, spool) = (status.clone(), spool.clone());
                tokio::spawn(async move {
                    if let Err(e) = answer(stream, &status, &spool).await {
                        tracing::debug!(error = %e, "metrics request failed");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request head and answers it: the exposition for `GET /metrics`, else 404.
async fn answer(mut stream: TcpStream, status: &Status, spool: &Spool) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_BYTES {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return Ok(());
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let (code, ctype, body) = if line.starts_with(b"GET /metrics ") {
        (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(status, spool),
        )
    } else {
        (
            "404 Not Found",
            "text/plain",
            "only GET /metrics\n".to_owned(),
        )
    };
    let response = format!(
        "HTTP/1.1 {code}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
