//! Self-tests of the harness tools that do not need `moord`: the fault proxy really resets,
//! cuts, stalls and refuses, and the test agent prints what the tests expect.

use std::io::ErrorKind;
use std::time::Duration;

use moor_e2e::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Failure guard for each wait; never the synchronisation itself.
const T: Duration = Duration::from_secs(30);

/// An upstream that echoes every byte back.
async fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn roundtrip(s: &mut TcpStream, msg: &[u8]) {
    s.write_all(msg).await.expect("write");
    let mut buf = vec![0; msg.len()];
    tokio::time::timeout(T, s.read_exact(&mut buf))
        .await
        .expect("echo in time")
        .expect("read");
    assert_eq!(buf, msg);
}

/// A fault proxy in front of an echo server, and a client connection through it that has
/// round-tripped `hello`.
async fn proxied_echo(hello: &[u8]) -> (FaultProxy, TcpStream) {
    let proxy = FaultProxy::start(echo_server().await).await;
    let mut conn = TcpStream::connect(proxy.addr()).await.expect("connect");
    roundtrip(&mut conn, hello).await;
    (proxy, conn)
}

#[tokio::test]
async fn proxy_forwards_and_counts_connections() {
    let (proxy, _conn) = proxied_echo(b"hello").await;
    proxy.wait_connections(1, T).await;
    assert_eq!(proxy.live(), 1);
}

#[tokio::test]
async fn proxy_reset_gives_the_client_a_connection_reset() {
    let (proxy, mut a) = proxied_echo(b"x").await;
    assert_eq!(proxy.reset_all().await, 1);
    let mut buf = [0u8; 8];
    let r = tokio::time::timeout(T, a.read(&mut buf))
        .await
        .expect("read ends");
    assert_eq!(
        r.expect_err("a reset, not an EOF").kind(),
        ErrorKind::ConnectionReset
    );
}

#[tokio::test]
async fn proxy_cut_gives_the_client_a_plain_eof() {
    let (proxy, mut a) = proxied_echo(b"x").await;
    assert_eq!(proxy.cut_all().await, 1);
    let mut buf = [0u8; 8];
    let n = tokio::time::timeout(T, a.read(&mut buf))
        .await
        .expect("read ends")
        .expect("EOF, not an error");
    assert_eq!(n, 0);
}

#[tokio::test]
async fn proxy_stall_holds_bytes_until_unstalled_and_spares_new_connections() {
    let (proxy, mut a) = proxied_echo(b"x").await;
    assert_eq!(proxy.stall().await, 1);
    a.write_all(b"held").await.expect("write");
    let mut buf = [0u8; 4];
    // A new connection makes full round trips through the proxy after "held" was written;
    // the stalled one still has nothing to read.
    let mut b = TcpStream::connect(proxy.addr()).await.expect("connect");
    for _ in 0..3 {
        roundtrip(&mut b, b"new").await;
    }
    match a.try_read(&mut buf) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("bytes came back through a stalled connection: {other:?}"),
    }
    proxy.unstall().await;
    tokio::time::timeout(T, a.read_exact(&mut buf))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&buf, b"held");
}

#[tokio::test]
async fn proxy_refuse_closes_new_connections_at_once() {
    let proxy = FaultProxy::start(echo_server().await).await;
    proxy.refuse(true);
    let mut a = TcpStream::connect(proxy.addr()).await.expect("connect");
    let mut buf = [0u8; 1];
    let r = tokio::time::timeout(T, a.read(&mut buf))
        .await
        .expect("closed in time");
    assert!(
        matches!(r, Ok(0) | Err(_)),
        "refused connection is closed: {r:?}"
    );
    proxy.refuse(false);
    let mut b = TcpStream::connect(proxy.addr()).await.expect("connect");
    roundtrip(&mut b, b"ok").await;
    assert_eq!(proxy.connections(), 2);
}

#[test]
fn test_agent_counts_with_prefix_start_and_stderr() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_moor-test-agent"))
        .args([
            "count",
            "5",
            "--start",
            "2",
            "--stderr-every",
            "2",
            "--prefix",
            "p-",
        ])
        .output()
        .expect("agent runs");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "p-2\np-3\np-4\np-5\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err-2\nerr-4\n");
}

#[test]
fn test_agent_echoes_until_exit_after() {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_moor-test-agent"))
        .args(["echo", "--exit-after", "2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("agent runs");
    child
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"a\nb\nc\n")
        .expect("write");
    let out = child.wait_with_output().expect("agent exits");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got: a\ngot: b\n");
}
