//! Who holds a shell agent's terminal. A shell with job control gives the terminal to each
//! command it runs (the command's process group becomes the terminal's foreground group) and
//! takes it back at its prompt, so the foreground group says whether the shell waits for input
//! or a command runs, and which. For any other program in the foreground nothing of the kind
//! can be known, so only shells are watched (`agent.start`'s `capabilities.terminal_wait`).
//!
//! Sampled every [`SAMPLE_EVERY`] with `tcgetpgrp` on the PTY's master side; an
//! `agent.terminal` entry is written only when the answer changes.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use moor_protocol::payload::AgentTerminal;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::spool::{Draft, Spool};

/// How often the terminal's foreground group is read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Longest command name recorded.
const MAX_NAME_BYTES: usize = 64;

/// Shells whose foreground group tells whether they wait at their prompt.
const SHELLS: &[&str] = &[
    "bash", "sh", "dash", "zsh", "fish", "ksh", "mksh", "ash", "tcsh", "csh", "yash",
];

/// Whether `program` (a path or a name) is a shell with job control.
pub fn is_shell(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| SHELLS.contains(&n.trim_start_matches('-')))
}

/// Writes `agent.terminal` whenever the foreground of the terminal behind `master` changes,
/// until `stop`. `shell` is the agent's pid (its process group id too: it leads its session).
pub async fn watch(master: OwnedFd, shell: u32, spool: Spool, stop: CancellationToken) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last: Option<AgentTerminal> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        // No foreground group (the shell is gone, or between two jobs): nothing to say.
        let Ok(group) = rustix::termios::tcgetpgrp(&master) else {
            continue;
        };
        let pid = group.as_raw_nonzero().get() as u32;
        let now = AgentTerminal {
            waiting: pid == shell,
            foreground: command_name(pid),
            pid,
        };
        if last.as_ref() == Some(&now) {
            continue;
        }
        if let Err(e) = spool.append(vec![Draft::new(now.clone())]).await {
            tracing::warn!(error = %e, "could not spool the terminal's foreground");
            return;
        }
        last = Some(now);
    }
}

/// The command name of process `pid` (`/proc/<pid>/comm`), or "" if it is gone.
fn command_name(pid: u32) -> String {
    let mut name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default();
    if name.len() > MAX_NAME_BYTES {
        let mut end = MAX_NAME_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shells_are_known_by_their_name_whatever_the_path() {
        assert!(is_shell("/bin/bash"));
        assert!(is_shell("zsh"));
        assert!(is_shell("-bash"));
        assert!(!is_shell("/usr/bin/vim"));
        assert!(!is_shell("claude"));
        assert!(!is_shell("bashful"));
    }
}
