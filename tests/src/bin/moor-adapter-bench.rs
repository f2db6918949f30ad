//! `moor-adapter-bench`: what the agent adapters cost, measured on the real `moor` and `moord`.
//!
//! - PTY throughput: a program printing 100 MB (random bytes, terminal in raw mode) into a bare
//!   PTY that is simply drained, side by side with the same program under `moor run --mode pty`
//!   with a live SSE viewer decoding every byte; MB/s of each and the ratio.
//! - ACP adapter per event: the session/update lines of a Gemini CLI capture, replayed the
//!   same way under `--mode acp`.
//! - Codex adapter per event: the item notifications of a `codex app-server` capture, replayed
//!   the same way under `--mode codex`.
//! - Headless adapters per event: a Gemini CLI `stream-json` capture and a `codex exec --json`
//!   capture, printed many times by one turn's process under `--mode gemini-headless` and
//!   `--mode codex-exec` (a prompt starts the turn).
//! - Claude adapter per event: a recorded Claude Code capture (stream-json, partial messages)
//!   replayed many times as the agent's output under `--mode claude`, and the same lines under
//!   `--mode lines` as a baseline; moor's CPU time and the wall time until a live viewer has the
//!   last entry, per input line (event).
//!
//! `cargo build --release --workspace && target/release/moor-adapter-bench [--runs N] [--mb M]
//! [--replays R] [--only pty]`. Medians of N runs (default 3); `--only pty` stops after the PTY
//! throughput. Every wait is bounded.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use futures_util::StreamExt;
use moor_e2e::bench::{arg, count_arg, median, runs};
use moor_e2e::{BridgeOpts, ServerOpts, TestServer};
use moor_protocol::SessionId;
use tokio::io::AsyncReadExt;

/// Hard limit on any single measurement.
const GUARD: Duration = Duration::from_secs(300);

#[tokio::main]
async fn main() -> Result<()> {
    let runs = runs(3)?;
    let mb: u64 = count_arg("--mb", 100)?;
    let replays: u64 = count_arg("--replays", 1000)?;
    let only_pty = match arg("--only").as_deref() {
        None => false,
        Some("pty") => true,
        Some(other) => bail!("--only takes pty, not {other}"),
    };
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("random.bin");
    std::fs::write(&file, moor_e2e::util::random_bytes((mb << 20) as usize, 42))?;
    let script = format!("stty raw -echo && cat {}", file.display());
    let total = mb << 20;

    // Each run measures the two back to back, so a busy machine slows both alike; the ratio is
    // the median of the per-run ratios.
    let (mut bare, mut moor, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let b = bare_pty(&script, total).await?;
        let m = moor_pty(&script, total).await?;
        bare.push(b);
        moor.push(m);
        ratio.push(m / b);
    }
    println!("PTY throughput, {mb} MB of random bytes, median of {runs}:");
    println!(
        "  bare PTY (drained)                 {:8.1} MB/s",
        median(bare)
    );
    println!(
        "  moor --mode pty -> moord -> viewer {:8.1} MB/s  ({:.0}% of bare, median of per-run ratios)",
        median(moor),
        100.0 * median(ratio)
    );
    if only_pty {
        return Ok(());
    }

    let capture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../agent-bridge/tests/fixtures/claude-code/06_bash_include_partial_messages.stream.jsonl",
    );
    let lines = std::fs::read_to_string(&capture)
        .with_context(|| format!("read {}", capture.display()))?
        .lines()
        .count() as u64;
    let events = lines * replays;
    println!("Claude adapter, capture of {lines} stream-json lines replayed {replays}x ({events} events), median of {runs}:");
    for mode in ["claude", "lines"] {
        per_event(mode, &capture, replays, events, runs).await?;
    }
    acp_per_event(runs, replays, dir.path()).await?;
    codex_per_event(runs, replays, dir.path()).await?;
    headless_per_event(runs, replays).await
}

/// The headless adapters per event: one turn whose process prints a real capture (a shell
/// call, its result, text and the turn's end) `replays` times; the viewer counts the results.
async fn headless_per_event(runs: usize, replays: u64) -> Result<()> {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent-bridge/tests/fixtures");
    for (mode, capture) in [
        ("gemini-headless", "gemini-headless/04_shell_yolo.jsonl"),
        ("codex-exec", "codex-exec/03_command.jsonl"),
    ] {
        let capture = fixtures.join(capture);
        let lines = std::fs::read_to_string(&capture)
            .with_context(|| format!("read {}", capture.display()))?
            .lines()
            .count() as u64;
        let events = lines * replays;
        println!("{mode} adapter, a capture of {lines} lines printed {replays}x by one turn ({events} events), median of {runs}:");
        per_event(mode, &capture, replays, events, runs).await?;
    }
    Ok(())
}

/// The notifications of `source` (a capture under `agent-bridge/tests/fixtures/`) that `keep`
/// accepts, plus one end marker the adapter keeps as `agent.event`, written to `dir/name`;
/// returns the file and its number of lines.
fn capture_with_end(
    source: &str,
    keep: impl Fn(&str) -> bool,
    dir: &Path,
    name: &str,
) -> Result<(PathBuf, u64)> {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../agent-bridge/tests/fixtures")
        .join(source);
    let text =
        std::fs::read_to_string(&source).with_context(|| format!("read {}", source.display()))?;
    let mut lines: Vec<&str> = text.lines().filter(|l| keep(l)).collect();
    let end = r#"{"jsonrpc":"2.0","method":"moor/bench_end","params":{}}"#;
    lines.push(end);
    let capture = dir.join(name);
    std::fs::write(&capture, lines.join("\n") + "\n")?;
    Ok((capture, lines.len() as u64))
}

/// The Codex adapter per event: the item notifications of a real `codex app-server` capture
/// (message deltas, items started and completed: text, commands and their results) replayed
/// under `--mode codex`, each replay ended by one notification the adapter keeps as
/// `agent.event`, which the viewer counts.
async fn codex_per_event(runs: usize, replays: u64, dir: &Path) -> Result<()> {
    let (capture, lines) = capture_with_end(
        "codex/01_allow_deny_interrupt.OUT.jsonl",
        |l| {
            ["item/agentMessage/delta", "item/started", "item/completed"]
                .iter()
                .any(|m| l.starts_with(&format!("{{\"method\":\"{m}\"")))
        },
        dir,
        "codex-items.jsonl",
    )?;
    let events = lines * replays;
    println!(
        "Codex adapter, {} item notifications of a codex app-server capture (+1 end marker) replayed {replays}x ({events} events), median of {runs}:",
        lines - 1
    );
    per_event("codex", &capture, replays, events, runs).await
}

/// The ACP adapter per event: the model-side notifications of a real Gemini CLI capture (text
/// chunks, tool calls and their updates) replayed under `--mode acp`, each replay ended by one
/// notification the adapter keeps as `agent.event`, which the viewer counts.
async fn acp_per_event(runs: usize, replays: u64, dir: &Path) -> Result<()> {
    let (capture, lines) = capture_with_end(
        "gemini-cli/01_prompt_allow_deny_cancel.OUT.jsonl",
        |l| {
            ["agent_message_chunk", "tool_call_update"]
                .iter()
                .any(|k| l.contains(&format!("\"sessionUpdate\":\"{k}\"")))
        },
        dir,
        "acp-updates.jsonl",
    )?;
    let events = lines * replays;
    println!(
        "ACP adapter, {} session/update lines of a Gemini CLI capture (+1 end marker) replayed {replays}x ({events} events), median of {runs}:",
        lines - 1
    );
    per_event("acp", &capture, replays, events, runs).await
}

/// `capture` (`events` in all) replayed `replays` times under `--mode mode`, `runs` times: prints
/// the medians of moor's CPU time and of the wall time to the viewer, per event.
async fn per_event(
    mode: &str,
    capture: &Path,
    replays: u64,
    events: u64,
    runs: usize,
) -> Result<()> {
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (c, w) = replay(mode, capture, replays, events).await?;
        cpu.push(c / events as f64 * 1e6);
        wall.push(w / events as f64 * 1e6);
    }
    println!(
        "  --mode {mode:<6}  moor CPU {:6.1} µs/event   wall to viewer {:6.1} µs/event",
        median(cpu),
        median(wall)
    );
    Ok(())
}

/// MB/s of the program printing into a PTY that is only drained.
async fn bare_pty(script: &str, total: u64) -> Result<f64> {
    let (pty, pts) = pty_process::open()?;
    pty.resize(pty_process::Size::new(24, 80))?;
    let started = Instant::now();
    let mut child = pty_process::Command::new("sh")
        .args(["-c", script])
        .spawn(pts)?;
    let (mut reader, _writer) = pty.into_split();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    tokio::time::timeout(GUARD, async {
        while let Ok(n @ 1..) = reader.read(&mut buf).await {
            got += n as u64;
        }
    })
    .await
    .context("bare PTY timed out")?;
    let secs = started.elapsed().as_secs_f64();
    child.wait().await?;
    if got != total {
        bail!("bare PTY delivered {got} of {total} bytes");
    }
    Ok(total as f64 / secs / 1e6)
}

/// MB/s from starting `moor` until a live viewer has decoded every byte.
async fn moor_pty(script: &str, total: u64) -> Result<f64> {
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("bench-pty-{}", uuid::Uuid::new_v4().simple());
    let started = Instant::now();
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), &name, &[])
        .flag("--mode", "pty")
        .command(&["sh".into(), "-c".into(), script.to_owned()])
        .spawn();
    let id = server.api().wait_session(&name, GUARD).await.id;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut got = 0u64;
    view(&server, id, |e| {
        if let (true, Some(data)) = (e.kind == "agent.pty.output", &e.payload.data) {
            got += b64.decode(data.as_bytes()).map_or(0, |d| d.len() as u64);
        }
        got >= total
    })
    .await?;
    let secs = started.elapsed().as_secs_f64();
    bridge.wait_exit(GUARD).await;
    Ok(total as f64 / secs / 1e6)
}

/// (moor CPU seconds, wall seconds) to replay `capture` `replays` times under `mode` until a
/// viewer has the entry of the last line.
async fn replay(mode: &str, capture: &Path, replays: u64, events: u64) -> Result<(f64, f64)> {
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("bench-{mode}-{}", uuid::Uuid::new_v4().simple());
    let started = Instant::now();
    let times = replays.to_string();
    let capture = capture.display().to_string();
    let headless = mode == "gemini-headless" || mode == "codex-exec";
    // `exec` names the subcommand so the codex-exec adapter adds none; the replay ignores it
    // and the flags the adapters add.
    let mut agent = vec!["replay", &capture, "--times", &times];
    if headless {
        agent.push("exec");
    }
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), &name, &agent)
        .flag("--mode", mode)
        .spawn();
    let id = server.api().wait_session(&name, GUARD).await.id;
    if headless {
        // A headless agent runs when a prompt comes.
        server.api().post_input(id, "bench-prompt", "go").await;
    }
    let (mut results, mut outputs) = (0u64, 0u64);
    view(&server, id, |e| match e.kind.as_ref() {
        // One result per replay of the capture (one end marker, for acp and codex); one output
        // entry per line in lines mode.
        "agent.result" if mode == "claude" || headless => {
            results += 1;
            results >= replays
        }
        "agent.event" if mode == "acp" || mode == "codex" => {
            results += 1;
            results >= replays
        }
        "agent.output" => {
            outputs += 1;
            outputs >= events
        }
        _ => false,
    })
    .await?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(bridge.pid().context("moor pid")?)?;
    bridge.terminate();
    bridge.wait_exit(GUARD).await;
    Ok((cpu, wall))
}

/// User + system CPU time of a process so far.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_comm = stat.rsplit_once(')').context("stat format")?.1;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / rustix::param::clock_ticks_per_second() as f64)
}

/// The part of an entry the bench viewer reads, borrowed from the event's bytes (a viewer that
/// copies every payload into a JSON tree would measure itself more than moor).
#[derive(Debug, serde::Deserialize)]
struct Seen<'a> {
    seq: u64,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    payload: SeenPayload<'a>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct SeenPayload<'a> {
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
}

/// Follows the session's SSE stream from the start, handing each entry to `done` until it says
/// so.
async fn view(
    server: &TestServer,
    id: SessionId,
    mut done: impl FnMut(&Seen<'_>) -> bool,
) -> Result<()> {
    let url = format!("{}/api/v1/sessions/{id}/events?after=0", server.url());
    let resp = reqwest::Client::new()
        .get(url)
        .bearer_auth(server.token())
        .send()
        .await?
        .error_for_status()?;
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = 0u64;
    let mut last_seq = 0u64;
    let waited = tokio::time::timeout(GUARD, async {
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk?);
            let mut start = 0;
            while let Some(end) = buf[start..].iter().position(|&b| b == b'\n') {
                let line = &buf[start..start + end];
                start += end + 1;
                if let Some(data) = line.strip_prefix(b"data:") {
                    let entry: Seen<'_> = serde_json::from_slice(data)?;
                    seen += 1;
                    let seq = entry.seq;
                    if seq != last_seq + 1 {
                        bail!("the viewer got seq {seq} after {last_seq}: a gap or a duplicate");
                    }
                    last_seq = seq;
                    if done(&entry) {
                        return Ok(());
                    }
                    if entry.kind == "session.ended" {
                        bail!(
                            "the session ended before the viewer saw everything ({seen} entries)"
                        );
                    }
                }
            }
            buf.drain(..start);
        }
        bail!("the event stream ended early")
    })
    .await;
    match waited {
        Ok(result) => result,
        Err(_) => bail!("viewer timed out after {seen} entries"),
    }
}
