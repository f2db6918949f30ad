//! The sessions `moor host` started and that still run, kept in `host-sessions.json` in the
//! state dir, so that a `moor host` started again (after a crash, an upgrade, a reboot of the
//! unit) finds them: it can still stop them, counts them against `max_sessions`, and records
//! their end. It is not their parent any more, so it watches them by pid and cannot know how
//! they ended: their `host.session.exited` says `status_unknown`.
//!
//! A pid alone could name another process after a reboot or a wrap-around: each child is kept
//! with its start time (from `/proc`, where there is one), and a process with another start
//! time is not that child.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The file, in the state dir.
const FILE: &str = "host-sessions.json";

/// How often an adopted child (one an earlier `moor host` started) is looked at, to see that
/// it ended.
pub(super) const ADOPTED_POLL: Duration = Duration::from_millis(500);

/// A session's `moor run` this machine started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Child {
    /// Its pid, also its process group.
    pub(super) pid: u32,
    /// When it started, in clock ticks since boot (`/proc/PID/stat`); None where unknown.
    pub(super) started: Option<u64>,
    /// It was asked to stop.
    pub(super) stopping: bool,
}

impl Child {
    /// The child `pid`, just spawned.
    pub(super) fn spawned(pid: u32) -> Self {
        Self {
            pid,
            started: start_time(pid),
            stopping: false,
        }
    }

    /// Whether this child still runs: its pid is alive, not a zombie, and started when it did.
    pub(super) fn still_runs(&self) -> bool {
        if !Path::new("/proc/self/stat").exists() {
            // No /proc: the pid alone says it.
            return rustix::process::Pid::from_raw(self.pid as i32)
                .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok());
        }
        proc_stat(self.pid).is_some_and(|stat| {
            !stat.zombie && self.started.is_none_or(|started| started == stat.started)
        })
    }
}

/// The running children by session name, written through to the state dir.
#[derive(Debug)]
pub(super) struct Children {
    path: PathBuf,
    running: BTreeMap<String, Child>,
}

impl Children {
    /// The children an earlier `moor host` left in `state_dir` (none if there is no file; an
    /// unreadable one is reported and set aside, since the sessions still end on their own).
    pub(super) fn load(state_dir: &Path) -> Self {
        let path = state_dir.join(FILE);
        let running = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                crate::status::say(format!(
                    "moor host: {} is not readable ({e}); the sessions it lists are not tracked",
                    path.display()
                ));
                BTreeMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                crate::status::say(format!(
                    "moor host: cannot read {} ({e}); the sessions it lists are not tracked",
                    path.display()
                ));
                BTreeMap::new()
            }
        };
        Self { path, running }
    }

    /// The children, by session name.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Child)> {
        self.running.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.running.len()
    }

    pub(super) fn contains(&self, session: &str) -> bool {
        self.running.contains_key(session)
    }

    pub(super) fn get(&self, session: &str) -> Option<Child> {
        self.running.get(session).copied()
    }

    /// Adds or replaces `session`'s child, then writes the table.
    pub(super) fn insert(&mut self, session: &str, child: Child) -> std::io::Result<()> {
        self.running.insert(session.to_owned(), child);
        self.save()
    }

    /// Removes `session`'s child, then writes the table; the child it was.
    pub(super) fn remove(&mut self, session: &str) -> std::io::Result<Option<Child>> {
        let child = self.running.remove(session);
        if child.is_some() {
            self.save()?;
        }
        Ok(child)
    }

    /// Writes the table whole: to a temporary file, then renamed over the old one.
    fn save(&self) -> std::io::Result<()> {
        let tmp = self.path.with_extension("json.tmp");
        let json = serde_json::to_vec(&self.running).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// What `/proc/PID/stat` says of a process.
struct ProcStat {
    started: u64,
    zombie: bool,
}

/// `pid`'s start time, in clock ticks since boot (None without `/proc`).
fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|s| s.started)
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Field 3 (state) and field 22 (starttime) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields are
/// counted from its last `)`.
fn parse_stat(stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some(ProcStat {
        started,
        zombie: state == "Z" || state == "X",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (moor (run) x) S 1 4242 4242 0 -1 4194560 1 0 0 0 3 1 0 0 20 0 \
                    5 0 987654 12345 300 18446744073709551615";
        let stat = parse_stat(line).expect("parsed");
        assert_eq!(stat.started, 987_654);
        assert!(!stat.zombie);
        let zombie = line.replace(") S 1", ") Z 1");
        assert!(parse_stat(&zombie).expect("parsed").zombie);
        assert!(parse_stat("4242 (moor").is_none());
    }

    #[test]
    fn this_process_still_runs_and_a_child_with_another_start_time_does_not() {
        let me = Child::spawned(std::process::id());
        assert!(me.still_runs());
        if let Some(started) = me.started {
            let other = Child {
                started: Some(started + 1),
                ..me
            };
            assert!(!other.still_runs(), "a reused pid is not the child");
        }
    }

    #[test]
    fn the_table_survives_a_restart_and_a_corrupt_one_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let mut children = Children::load(dir.path());
        children.insert("a", Child::spawned(1)).unwrap();
        children.insert("b", Child::spawned(2)).unwrap();
        children.remove("a").unwrap();
        let again = Children::load(dir.path());
        assert_eq!(again.len(), 1);
        assert_eq!(again.get("b"), children.get("b"));
        std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
        assert_eq!(Children::load(dir.path()).len(), 0);
    }
}
