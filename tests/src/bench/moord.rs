//! A release `moord` started for a benchmark: its address and token, its CPU time and memory.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;

use super::{bridge, sse_open, GUARD};
use crate::ws::Ws;

/// A release `moord` on a fresh data dir (SQLite), listening on an ephemeral loopback port;
/// killed and its data dir removed on drop. Or one started by someone else ([`Moord::attach`]),
/// left alone on drop.
#[derive(Debug)]
pub struct Moord {
    /// The process, if this benchmark started it.
    child: Option<tokio::process::Child>,
    pid: u32,
    /// `host:port` it listens on.
    pub addr: String,
    /// The administrator's token.
    pub token: String,
    dir: PathBuf,
}

impl Moord {
    /// Starts `moord` (`MOOR_BENCH_MOORD`, else the one next to the running executable) on a
    /// new temp data dir.
    pub async fn start() -> Result<Self> {
        Self::start_in(std::env::temp_dir().join(format!("moor-bench-{}", uuid::Uuid::new_v4())))
            .await
    }

    /// A moord started by someone else: its address (`host:port`), an administrator's token and
    /// its process id (for its CPU time and memory).
    pub fn attach(addr: String, token: String, pid: u32) -> Self {
        Self {
            child: None,
            pid,
            addr,
            token,
            dir: PathBuf::new(),
        }
    }

    /// Stops this moord and starts another on the same data (a cold start: nothing in memory).
    pub async fn restart(mut self) -> Result<Self> {
        let Some(child) = self.child.as_mut() else {
            bail!("moord was not started by this benchmark");
        };
        let _ = child.kill().await;
        let dir = std::mem::take(&mut self.dir);
        Self::start_in(dir).await
    }

    async fn start_in(dir: PathBuf) -> Result<Self> {
        let bin = match std::env::var_os("MOOR_BENCH_MOORD") {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe()?
                .parent()
                .context("exe dir")?
                .join("moord"),
        };
        if !bin.exists() {
            bail!(
                "{} not found: run `cargo build --release --workspace` first",
                bin.display()
            );
        }
        let mut child = tokio::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&dir)
            .env(
                "RUST_LOG",
                std::env::var("MOOR_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let addr = loop {
            let line = tokio::time::timeout(GUARD, lines.next_line())
                .await??
                .context("moord exited")?;
            if let Some(rest) = line.strip_prefix("moord listening on http://") {
                break rest.trim().to_owned();
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let pid = child.id().context("pid")?;
        let token = std::fs::read_to_string(dir.join("admin.token"))?
            .trim()
            .to_owned();
        Ok(Self {
            child: Some(child),
            pid,
            addr,
            token,
            dir,
        })
    }

    /// Stops this moord, leaving its data dir (removed on drop) for the caller to read; returns
    /// that dir.
    pub async fn stop(&mut self) -> Result<PathBuf> {
        let Some(child) = self.child.as_mut() else {
            bail!("moord was not started by this benchmark");
        };
        child.kill().await?;
        Ok(self.dir.clone())
    }

    /// Pins this moord's threads to CPU 0 and this process's threads to CPU 1 until the guard
    /// is dropped, so a benchmark's clients do not compete with the server for a core.
    pub fn pin_apart(&self) -> Result<Pinned> {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        if cpus < 2 {
            bail!("pinning the clients apart needs 2 CPUs, this machine has {cpus}");
        }
        let pinned = Pinned {
            pids: [self.pid, std::process::id()],
            all: format!("0-{}", cpus - 1),
        };
        taskset(self.pid, "0")?;
        taskset(std::process::id(), "1")?;
        Ok(pinned)
    }

    /// CPU time moord has used so far (user + system), in seconds.
    pub fn cpu_secs(&self) -> Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        let rest = stat.rsplit_once(')').context("stat format")?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11).context("utime")?.parse::<f64>()?
            + f.get(12).context("stime")?.parse::<f64>()?;
        Ok(ticks / 100.0)
    }

    /// Resident memory, KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .context("VmRSS")?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .context("rss value")?
            .parse()?)
    }

    /// A bridge connection for `session`, past its welcome.
    pub async fn bridge(&self, session: &str) -> Result<Ws> {
        bridge(&self.addr, &self.token, session).await
    }

    /// An SSE stream of `session` from `after`, past its headers.
    pub async fn sse(&self, session: &str, after: u64) -> Result<BufReader<TcpStream>> {
        sse_open(&self.addr, &self.token, session, after).await
    }

    /// `GET /api/v1{path}` as the administrator over `client`, its JSON answer decoded.
    pub async fn get<T: serde::de::DeserializeOwned>(
        &self,
        client: &reqwest::Client,
        path: &str,
    ) -> Result<T> {
        Ok(client
            .get(format!("http://{}/api/v1{path}", self.addr))
            .bearer_auth(&self.token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}

impl Drop for Moord {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Moord and the benchmark pinned to separate CPUs ([`Moord::pin_apart`]); both may use every
/// CPU again once dropped.
#[derive(Debug)]
pub struct Pinned {
    pids: [u32; 2],
    all: String,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        for pid in self.pids {
            if let Err(e) = taskset(pid, &self.all) {
                eprintln!("could not unpin {pid}: {e:#}");
            }
        }
    }
}

/// `taskset -a -p -c cpus pid`: every thread of `pid` onto `cpus`.
fn taskset(pid: u32, cpus: &str) -> Result<()> {
    let out = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .context("running taskset (util-linux)")?;
    if !out.status.success() {
        bail!(
            "taskset -a -p -c {cpus} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
