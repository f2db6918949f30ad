//! `moor-test-agent`: a real agent stand-in for the end-to-end tests.
//!
//! `count N [--start S] [--interval-ms K] [--stderr-every M] [--prefix P] [--progress-file F]
//! [--pad B] [--burst L]` prints `P<S>` … `P<N>` on stdout (default prefix `line-`), one line at a
//! time, flushing each; with `--pad B` each line carries ` ` and B filler bytes after its number;
//! with `--burst L` it pauses K ms only after every L-th line (bursts); every M-th line is followed
//! by `err-<i>` on stderr. After each line it records the number of
//! the last printed line in F (atomically, via rename), so a test can tell how far it got.
//!
//! With `--echo-inputs K` it also prints `got: <line>` for each stdin line while counting, and
//! exits only once it has echoed K lines.
//!
//! `echo [--exit-after N]` prints `got: <line>` for every stdin line and exits on EOF (or after
//! N lines).
//!
//! `replay FILE [--times N] [--then-crash CODE]` prints FILE's lines N times (a recorded Claude
//! Code stream-json capture, say), then reads stdin; with `--then-crash`, the first user message
//! it gets makes it print half a line and exit with CODE, like a crashing agent.
//!
//! The pacing only shapes the workload; tests never rely on it for synchronisation.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("count") => count(&args[1..]),
        Some("echo") => echo(&args[1..]),
        Some("replay") => replay(&args[1..]),
        _ => usage("expected a mode: count N | echo"),
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("moor-test-agent: {why}");
    eprintln!("usage: moor-test-agent count N [--start S] [--interval-ms K] [--stderr-every M] [--prefix P] [--progress-file F] [--echo-inputs K] [--pad B] [--burst L]");
    eprintln!("       moor-test-agent echo [--exit-after N]");
    eprintln!("       moor-test-agent replay FILE [--times N] [--then-crash CODE]");
    ExitCode::from(64)
}

/// Value of `--name V` in `args`, parsed.
fn flag<T: std::str::FromStr>(args: &[String], name: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{name} needs a value"))?;
            v.parse()
                .map(Some)
                .map_err(|_| format!("{name}: bad value {v:?}"))
        }
    }
}

fn count(args: &[String]) -> ExitCode {
    let parsed = (|| -> Result<_, String> {
        let n: u64 = args
            .first()
            .ok_or("count needs N")?
            .parse()
            .map_err(|_| "N must be a number")?;
        Ok((
            n,
            flag::<u64>(args, "--start")?.unwrap_or(1),
            flag::<u64>(args, "--interval-ms")?.unwrap_or(0),
            flag::<u64>(args, "--stderr-every")?.unwrap_or(0),
            flag::<String>(args, "--prefix")?.unwrap_or_else(|| "line-".to_owned()),
            flag::<PathBuf>(args, "--progress-file")?,
            flag::<u64>(args, "--echo-inputs")?,
            flag::<usize>(args, "--pad")?.unwrap_or(0),
            flag::<u64>(args, "--burst")?.unwrap_or(1).max(1),
        ))
    })();
    let (n, start, interval_ms, stderr_every, prefix, progress, echo_inputs, pad, burst) =
        match parsed {
            Ok(p) => p,
            Err(e) => return usage(&e),
        };
    let filler = if pad > 0 {
        format!(" {}", "x".repeat(pad))
    } else {
        String::new()
    };
    // Echoing runs beside the count, so stdout is locked per line, not for the whole loop.
    let echoer = echo_inputs.map(|k| std::thread::spawn(move || echo_lines(Some(k))));
    let stdout = std::io::stdout();
    for i in start..=n {
        let mut out = stdout.lock();
        // A closed pipe (the bridge died) ends the agent, as it would a real one.
        if writeln!(out, "{prefix}{i}{filler}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::from(3);
        }
        if stderr_every > 0 && i % stderr_every == 0 {
            let mut err = std::io::stderr().lock();
            if writeln!(err, "err-{i}").and_then(|()| err.flush()).is_err() {
                return ExitCode::from(3);
            }
        }
        if let Some(path) = &progress {
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, i.to_string())
                .and_then(|()| std::fs::rename(&tmp, path))
                .is_err()
            {
                return ExitCode::from(4);
            }
        }
        if interval_ms > 0 && i < n && i % burst == 0 {
            drop(out);
            std::thread::sleep(Duration::from_millis(interval_ms));
        }
    }
    match echoer.map(std::thread::JoinHandle::join) {
        None => ExitCode::SUCCESS,
        Some(Ok(code)) => ExitCode::from(code),
        Some(Err(_)) => ExitCode::from(5),
    }
}

fn echo(args: &[String]) -> ExitCode {
    match flag::<u64>(args, "--exit-after") {
        Ok(exit_after) => ExitCode::from(echo_lines(exit_after)),
        Err(e) => usage(&e),
    }
}

/// Prints `got: <line>` for each stdin line until EOF or `exit_after` lines; the exit code.
fn echo_lines(exit_after: Option<u64>) -> u8 {
    let stdout = std::io::stdout();
    for (seen, line) in (1u64..).zip(std::io::stdin().lock().lines()) {
        let Ok(line) = line else {
            return 3;
        };
        let mut out = stdout.lock();
        if writeln!(out, "got: {line}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return 3;
        }
        if exit_after.is_some_and(|n| seen >= n) {
            break;
        }
    }
    0
}

fn replay(args: &[String]) -> ExitCode {
    let parsed = (|| -> Result<_, String> {
        let file = args.first().ok_or("replay needs FILE")?;
        let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        Ok((
            text,
            flag::<u64>(args, "--times")?.unwrap_or(1),
            flag::<u8>(args, "--then-crash")?,
        ))
    })();
    let (text, times, crash) = match parsed {
        Ok(p) => p,
        Err(e) => return usage(&e),
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    for _ in 0..times {
        if out.write_all(text.as_bytes()).is_err() {
            return ExitCode::from(3);
        }
    }
    if out.flush().is_err() {
        return ExitCode::from(3);
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else {
            return ExitCode::from(3);
        };
        if let (Some(code), true) = (crash, line.contains(r#""type":"user""#)) {
            let _ = out.write_all(br#"{"type":"assistant","message":{"#);
            let _ = out.flush();
            return ExitCode::from(code);
        }
    }
    ExitCode::SUCCESS
}
