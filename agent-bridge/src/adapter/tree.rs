//! The agent's process tree. `moor run` makes itself a child subreaper, so what the agent starts
//! and leaves behind (Claude Code runs each Bash tool in a session of its own; a shell's
//! `setsid` children) is reparented to `moor` instead of init. When the agent exits or is
//! killed, every such process is stopped (SIGTERM, SIGKILL after a grace period) and named in
//! `agent.exit`.
//!
//! The agent's leftovers are `moor`'s descendants outside `moor`'s own process group: the agent
//! runs in a group (or session) of its own and everything it starts inherits that or makes a new
//! one, while `moor`'s own helpers (git for checkpoints) stay in `moor`'s group. Nothing is done
//! unless [`become_subreaper`] succeeded, so a test process embedding the bridge never stops
//! processes it did not start through `moor`.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use moor_protocol::payload::StoppedProcess;
use rustix::process::{getpgrp, getpid, kill_process, waitpid, Pid, Signal, WaitOptions};
use tokio::time::Instant;

/// Most stopped processes named in one `agent.exit` (all of them are stopped).
pub const MAX_LISTED: usize = 64;
/// Longest command line recorded for a stopped process.
const MAX_COMMAND_CHARS: usize = 256;
/// How often the tree is looked at again while it is being stopped.
const POLL: Duration = Duration::from_millis(20);
/// How long processes that ignored SIGTERM get to die after SIGKILL before `moor` moves on.
const KILL_WAIT: Duration = Duration::from_secs(5);

static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Makes this process a child subreaper (orphaned descendants are reparented to it) and turns
/// on stopping the agent's leftovers.
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(getpid()))?;
    SUBREAPER.store(true, Ordering::Release);
    Ok(())
}

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    zombie: bool,
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid pgrp …`; comm may hold spaces and parens.
fn parse_stat(stat: &str) -> Option<Proc> {
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgrp,
        zombie: state == "Z" || state == "X",
    })
}

fn scan() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat(&s))
        .collect()
}

/// The descendants of `me` outside the process group `group` (and their descendants, wherever
/// they moved): what the agent left.
fn leftovers(all: &[Proc], me: u32, group: u32) -> Vec<Proc> {
    let mut children: HashMap<u32, Vec<&Proc>> = HashMap::new();
    for p in all {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut stack: Vec<&Proc> = children
        .get(&me)
        .map(|c| c.iter().copied().filter(|p| p.pgrp != group).collect())
        .unwrap_or_default();
    while let Some(p) = stack.pop() {
        if found.len() >= all.len() {
            break;
        }
        found.push(p.clone());
        if let Some(c) = children.get(&p.pid) {
            stack.extend(c.iter().copied());
        }
    }
    found
}

fn pid(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

/// Collects the exit status of `moor`'s zombie children among `procs`.
fn reap(procs: &[Proc], me: u32) {
    for p in procs.iter().filter(|p| p.zombie && p.ppid == me) {
        if let Some(pid) = pid(p.pid) {
            let _ = waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }
}

/// Reaps orphans reparented to `moor` that have exited while the agent runs. Only processes
/// that lead no process group: the agent itself always leads one and is `tokio`'s to reap.
pub fn reap_orphans() {
    if !SUBREAPER.load(Ordering::Acquire) {
        return;
    }
    let (me, group) = (getpid().as_raw_nonzero().get() as u32, own_group());
    let zombies: Vec<Proc> = scan()
        .into_iter()
        .filter(|p| p.zombie && p.ppid == me && p.pgrp != group && p.pgrp != p.pid)
        .collect();
    reap(&zombies, me);
}

fn own_group() -> u32 {
    getpgrp().as_raw_nonzero().get() as u32
}

fn command_of(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut command = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ");
    if command.is_empty() {
        command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_default();
    }
    if command.chars().count() > MAX_COMMAND_CHARS {
        command = command.chars().take(MAX_COMMAND_CHARS).collect();
    }
    command
}

/// Stops everything the agent left running once it is gone (and reaped): SIGTERM, then SIGKILL
/// to whatever is still there after `grace`. Returns what was stopped, at most [`MAX_LISTED`].
/// Call it only while no agent of this `moor` runs.
pub async fn stop_leftovers(grace: Duration) -> Vec<StoppedProcess> {
    if !SUBREAPER.load(Ordering::Acquire) {
        return Vec::new();
    }
    let (me, group) = (getpid().as_raw_nonzero().get() as u32, own_group());
    let started = Instant::now();
    let mut stopped: BTreeMap<u32, StoppedProcess> = BTreeMap::new();
    let mut sent: HashMap<u32, Signal> = HashMap::new();
    loop {
        let found = leftovers(&scan(), me, group);
        reap(&found, me);
        let live: Vec<&Proc> = found.iter().filter(|p| !p.zombie).collect();
        if live.is_empty() {
            break;
        }
        let elapsed = started.elapsed();
        if elapsed >= grace + KILL_WAIT {
            tracing::warn!(left = live.len(), "processes of the agent survive SIGKILL");
            break;
        }
        let signal = match elapsed >= grace {
            true => Signal::KILL,
            false => Signal::TERM,
        };
        for p in live {
            if sent.get(&p.pid) == Some(&signal) {
                continue;
            }
            if stopped.len() < MAX_LISTED || stopped.contains_key(&p.pid) {
                let entry = stopped.entry(p.pid).or_insert_with(|| StoppedProcess {
                    pid: p.pid,
                    command: command_of(p.pid),
                    killed: false,
                });
                entry.killed = signal == Signal::KILL;
            }
            if let Some(target) = pid(p.pid) {
                let _ = kill_process(target, signal);
            }
            sent.insert(p.pid, signal);
        }
        tokio::time::sleep(POLL).await;
    }
    if !stopped.is_empty() {
        tracing::info!(
            count = stopped.len(),
            "stopped processes the agent left running"
        );
    }
    stopped.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, ppid: u32, pgrp: u32) -> Proc {
        Proc {
            pid,
            ppid,
            pgrp,
            zombie: false,
        }
    }

    #[test]
    fn stat_lines_parse_even_with_parens_and_spaces_in_the_name() {
        let stat = "4242 (weird ) name) S 17 4242 4242 0 -1 4194560 0 0";
        assert_eq!(parse_stat(stat), Some(p(4242, 17, 4242)));
        let zombie = parse_stat("9 (sh) Z 1 9 9 0").unwrap();
        assert!(zombie.zombie);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn leftovers_are_descendants_outside_moors_group_wherever_they_moved() {
        // moor 10 in group 10; its git helper 11 in group 10; the agent 20 (group 20) with a
        // tool 21 in its own session (group 21) and that tool's child 22; an orphan 30 reparented
        // to moor (group 21); an unrelated process 40.
        let all = [
            p(10, 1, 10),
            p(11, 10, 10),
            p(20, 10, 20),
            p(21, 20, 21),
            p(22, 21, 21),
            p(30, 10, 21),
            p(40, 1, 40),
        ];
        let mut pids: Vec<u32> = leftovers(&all, 10, 10).iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, [20, 21, 22, 30]);
    }
}
