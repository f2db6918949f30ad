//! Where a connection's bytes travel: [`Dial`] opens the byte stream that TLS and the WebSocket
//! upgrade then run over. [`TcpDial`] is the real one; tests dial in-memory pipes so the link's
//! timing (backoff, heartbeats, the idle watchdog, `Move`) runs on tokio's paused clock.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a server, before TLS and the WebSocket upgrade.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + fmt::Debug + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + fmt::Debug + 'static> Io for T {}

/// What [`Dial::dial`] returns.
pub type DialFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Box<dyn Io>>> + Send + 'a>>;

/// Opens byte streams to `host:port`.
pub trait Dial: Send + Sync + fmt::Debug {
    /// A new stream to `host:port` (an IPv6 host comes without brackets).
    fn dial<'a>(&'a self, host: &'a str, port: u16) -> DialFuture<'a>;
}

/// TCP with Nagle off: frames are small and latency matters more than packet count.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpDial;

impl Dial for TcpDial {
    fn dial<'a>(&'a self, host: &'a str, port: u16) -> DialFuture<'a> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect((host, port)).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    }
}
