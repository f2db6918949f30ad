//! `moor-checkpoint-bench`: what a checkpoint costs on a large repository, measured with the
//! real `moor` against the real `moord`.
//!
//! A repository of `--files` files (default 10,000, ~1 KiB each, in 100 directories) with
//! `--changed` of them modified (default 100): the time to take a checkpoint (`moor checkpoints
//! create`: git plumbing through a temporary index, commit, ref, manifest, upload queue), the
//! time to upload it (`moor checkpoints push`: which blobs are missing, the missing blobs, the
//! manifest) and the bytes sent. Then the same repository with one more file changed, to show
//! that content already on the server is not sent again. Medians of `--runs` runs (default 5),
//! each with a fresh set of changed files.
//!
//! `cargo build --release --workspace && target/release/moor-checkpoint-bench [--files N]
//! [--changed M] [--runs R]`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use moor_e2e::bench::{count_arg, median, runs};
use moor_e2e::util::bin_path;
use moor_e2e::{BridgeOpts, ServerOpts, TestServer};

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(["-c", "commit.gpgSign=false"])
        .args(args)
        .current_dir(dir)
        .output()?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn path_of(i: usize) -> String {
    format!("dir{:03}/file{i:05}.txt", i % 100)
}

/// Runs `moor checkpoints <args>`; returns stdout and the wall time.
fn moor(dir: &Path, server: &TestServer, args: &[&str]) -> Result<(String, Duration)> {
    let started = Instant::now();
    let out = Command::new(bin_path("moor"))
        .arg("checkpoints")
        .args(args)
        .args(["--server", &server.url(), "--token", server.token()])
        .current_dir(dir)
        .output()?;
    let took = started.elapsed();
    if !out.status.success() {
        bail!(
            "moor checkpoints {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), took))
}

/// (blob bytes, manifest bytes) from `moor checkpoints push`'s line.
fn sent(push: &str) -> Result<(u64, u64)> {
    // "uploaded N blobs (B bytes) and M bytes of manifests; ..."
    let num = |after: &str| -> Option<u64> {
        let rest = push.split(after).nth(1)?;
        rest.split(|c: char| !c.is_ascii_digit())
            .find(|s| !s.is_empty())?
            .parse()
            .ok()
    };
    match (num("blobs ("), num(") and ")) {
        (Some(b), Some(m)) => Ok((b, m)),
        _ => bail!("unexpected push output {push:?}"),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let files = count_arg("--files", 10_000)?;
    let changed = count_arg("--changed", 100)?.min(files);
    let runs = runs(5)?;
    let server = TestServer::start(ServerOpts::new()).await;
    // The session the checkpoints are uploaded under (it exists once a bridge connected).
    let plain = tempfile::tempdir()?;
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), "bench", &[])
        .command(&["true".into()])
        .cwd(plain.path())
        .spawn();
    bridge.wait_success(Duration::from_secs(60)).await;

    let dir = tempfile::tempdir()?;
    let repo = dir.path();
    git(repo, &["init", "-q"])?;
    let line = "the quick brown fox jumps over the lazy dog, again and again and again\n";
    for i in 0..files {
        let p = repo.join(path_of(i));
        std::fs::create_dir_all(p.parent().context("parent")?)?;
        std::fs::write(&p, format!("file {i}\n{}", line.repeat(14)))?;
    }
    git(repo, &["add", "-A"])?;
    git(repo, &["commit", "-q", "-m", "base"])?;
    let repo_bytes: u64 = (0..files)
        .map(|i| {
            std::fs::metadata(repo.join(path_of(i)))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum();

    let (mut take, mut push, mut blob_bytes, mut manifest_bytes) = (vec![], vec![], vec![], vec![]);
    let (mut again_push, mut again_bytes) = (vec![], vec![]);
    for run in 0..runs {
        // A fresh set of files each run, so nothing is already on the server.
        for k in 0..changed {
            let i = (run * changed + k) % files;
            let p = repo.join(path_of(i));
            let mut text = std::fs::read_to_string(&p)?;
            text.push_str(&format!("changed in run {run}\n"));
            std::fs::write(&p, text)?;
        }
        let (_, t) = moor(repo, &server, &["create", "--session", "bench"])?;
        take.push(t.as_secs_f64());
        let (out, t) = moor(repo, &server, &["push"])?;
        push.push(t.as_secs_f64());
        let (b, m) = sent(&out)?;
        blob_bytes.push(b as f64);
        manifest_bytes.push(m as f64);
        // One more file changed: only it (and the new patch and manifest) is sent.
        let extra = repo.join(path_of((run * changed + changed) % files));
        let mut text = std::fs::read_to_string(&extra)?;
        text.push_str("one more\n");
        std::fs::write(&extra, text)?;
        moor(repo, &server, &["create", "--session", "bench"])?;
        let (out, t) = moor(repo, &server, &["push"])?;
        again_push.push(t.as_secs_f64());
        let (b, m) = sent(&out)?;
        again_bytes.push((b + m) as f64);
        git(repo, &["commit", "-q", "-am", &format!("run {run}")])?;
    }
    println!(
        "Checkpoint of a {files}-file repository ({:.1} MB) with {changed} files changed, median of {runs} runs:",
        repo_bytes as f64 / 1e6
    );
    println!(
        "  take (moor checkpoints create)   {:7.0} ms",
        1000.0 * median(take.clone())
    );
    println!(
        "  upload (moor checkpoints push)   {:7.0} ms",
        1000.0 * median(push.clone())
    );
    println!(
        "  total                            {:7.0} ms",
        1000.0 * (median(take) + median(push))
    );
    println!(
        "  bytes uploaded                   {:7.0} KB blobs (changed files + patch) + {:.0} KB manifest",
        median(blob_bytes) / 1e3,
        median(manifest_bytes) / 1e3
    );
    println!(
        "  next checkpoint, 1 more file     {:7.0} ms upload, {:.0} KB sent (the {changed} blobs already there are not)",
        1000.0 * median(again_push),
        median(again_bytes) / 1e3
    );
    Ok(())
}
