//! The `git` command line, run with a hygienic environment: explicit `--git-dir`/`--work-tree`,
//! no hooks, no optional locks, no signing, and no `GIT_*` variables inherited from whoever
//! started `moor` (a hook's `GIT_INDEX_FILE` would otherwise redirect everything).
//!
//! Blocking: call from `spawn_blocking` in async code.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Variables that change which repository, index or objects git uses.
const REPO_ENV: [&str; 12] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_REPLACE_REF_BASE",
    "GIT_QUARANTINE_PATH",
];

/// Config that keeps our commands from having side effects on the user's repository.
const SAFE_CONFIG: [&str; 8] = [
    "core.hooksPath=/dev/null",
    "core.splitIndex=false",
    "commit.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.fsmonitor=false",
    "advice.detachedHead=false",
    "core.quotePath=false",
];

/// A git failure, with what was run and what git said.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be started.
    #[error("cannot run git ({0}); is git installed?")]
    Spawn(std::io::Error),
    /// git exited with an error.
    #[error("git {args} failed: {stderr}")]
    Failed {
        /// The arguments, for the message.
        args: String,
        /// git's own words.
        stderr: String,
    },
    /// Output that does not parse.
    #[error("unexpected output from git {0}")]
    Parse(String),
    /// Reading or writing a file next to git.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where a repository is, as git reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The work tree's root.
    pub work_tree: PathBuf,
    /// This work tree's git dir (`.git`, or `.git/worktrees/<name>` for a linked worktree).
    pub git_dir: PathBuf,
    /// The shared git dir (objects and refs).
    pub common_dir: PathBuf,
    /// `sha1` or `sha256`.
    pub object_format: String,
}

/// Why a directory cannot be checkpointed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Not inside a git repository at all.
    #[error("{0} is not in a git work tree")]
    NotARepo(PathBuf),
    /// Inside a bare repository or a `.git` directory.
    #[error(
        "{0} is inside a git repository but not in a work tree (bare repository or .git directory)"
    )]
    NotAWorkTree(PathBuf),
    /// git itself failed.
    #[error(transparent)]
    Git(#[from] GitError),
}

/// A `git` invocation builder over a [`Repo`].
#[derive(Debug)]
pub struct Git<'a> {
    repo: &'a Repo,
    cmd: Command,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
}

fn base_command() -> Command {
    let mut cmd = Command::new("git");
    for var in REPO_ENV {
        cmd.env_remove(var);
    }
    cmd.env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    for c in SAFE_CONFIG {
        cmd.arg("-c").arg(c);
    }
    cmd
}

impl Repo {
    /// Finds the repository whose work tree holds `dir`.
    pub fn probe(dir: &Path) -> Result<Self, ProbeError> {
        let mut cmd = base_command();
        cmd.arg("-C").arg(dir).args([
            "rev-parse",
            "--is-inside-work-tree",
            "--show-toplevel",
            "--absolute-git-dir",
            "--git-common-dir",
            "--show-object-format",
        ]);
        let out = cmd.stdin(Stdio::null()).output().map_err(GitError::Spawn)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if stderr.contains("not a git repository") {
                return Err(ProbeError::NotARepo(dir.to_owned()));
            }
            // Outside a work tree, --show-toplevel fails ("this operation must be run in a work
            // tree") after printing `false`.
            if String::from_utf8_lossy(&out.stdout).starts_with("false") {
                return Err(ProbeError::NotAWorkTree(dir.to_owned()));
            }
            return Err(GitError::Failed {
                args: "rev-parse".into(),
                stderr: stderr.trim().to_owned(),
            }
            .into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        if lines.first() != Some(&"true") {
            return Err(ProbeError::NotAWorkTree(dir.to_owned()));
        }
        let [_, top, git_dir, common, format] = lines[..] else {
            return Err(GitError::Parse("rev-parse".into()).into());
        };
        let git_dir = PathBuf::from(git_dir);
        let common = Path::new(common);
        let common_dir = if common.is_absolute() {
            common.to_owned()
        } else {
            // Relative to the directory git ran in.
            dir.join(common)
        };
        Ok(Self {
            work_tree: PathBuf::from(top),
            git_dir,
            common_dir: common_dir.canonicalize().unwrap_or(common_dir),
            object_format: format.to_owned(),
        })
    }

    /// A git command on this repository.
    pub fn git(&self) -> Git<'_> {
        let mut cmd = base_command();
        cmd.arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            .current_dir(&self.work_tree);
        Git {
            repo: self,
            cmd,
            args: Vec::new(),
            stdin: None,
        }
    }

    /// Where moor keeps its own files in this repository (temp indexes, the upload queue).
    pub fn moor_dir(&self) -> PathBuf {
        self.common_dir.join("moor")
    }

    /// The object id of the empty tree in this repository's format.
    pub fn empty_tree(&self) -> &'static str {
        if self.object_format == "sha256" {
            "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
        } else {
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        }
    }

    /// The commit HEAD points to, `None` on an unborn branch.
    pub fn head(&self) -> Result<Option<String>, GitError> {
        self.optional_line(&["rev-parse", "--verify", "-q", "HEAD^{commit}"])
    }

    /// The branch HEAD is on (short name), if any.
    pub fn branch(&self) -> Result<Option<String>, GitError> {
        self.optional_line(&["symbolic-ref", "-q", "--short", "HEAD"])
    }

    /// The line a query prints; `None` when it exits 1 (git's "there is none") or prints nothing.
    fn optional_line(&self, args: &[&str]) -> Result<Option<String>, GitError> {
        let out = self.git().args(args).run_allow(&[1])?;
        Ok(out.map(|o| lossy_line(&o)).filter(|s| !s.is_empty()))
    }

    /// The tree of `commit`.
    pub fn tree_of(&self, commit: &str) -> Result<String, GitError> {
        let out = self
            .git()
            .args(["rev-parse", "--verify", &format!("{commit}^{{tree}}")])
            .run()?;
        Ok(lossy_line(&out))
    }

    /// Whether `object` exists (of any type).
    pub fn has_object(&self, object: &str) -> Result<bool, GitError> {
        Ok(self
            .git()
            .args(["cat-file", "-e", object])
            .run_allow(&[1, 128])?
            .is_some())
    }

    /// A merge, rebase, cherry-pick, revert or bisect in progress, by name.
    pub fn operation_in_progress(&self) -> Option<&'static str> {
        let g = &self.git_dir;
        if g.join("rebase-merge").exists() || g.join("rebase-apply").exists() {
            Some("rebase")
        } else if g.join("MERGE_HEAD").exists() {
            Some("merge")
        } else if g.join("CHERRY_PICK_HEAD").exists() {
            Some("cherry-pick")
        } else if g.join("REVERT_HEAD").exists() {
            Some("revert")
        } else if g.join("BISECT_LOG").exists() {
            Some("bisect")
        } else {
            None
        }
    }
}

impl<'a> Git<'a> {
    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self.args.push(a.as_ref().to_string_lossy().into_owned());
            self.cmd.arg(a);
        }
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Uses `index` as the index file (never the user's).
    pub fn index(self, index: &Path) -> Self {
        self.env("GIT_INDEX_FILE", index)
    }

    /// Feeds `input` on stdin.
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// The underlying command, for callers that stream its output.
    pub fn into_command(self) -> Command {
        self.cmd
    }

    /// Runs it; stdout on success.
    pub fn run(self) -> Result<Vec<u8>, GitError> {
        self.run_allow(&[])?
            .ok_or_else(|| GitError::Parse("(no output)".into()))
    }

    /// Runs it; `None` when it exits with one of `ok_codes` (e.g. 1 for "not found").
    pub fn run_allow(mut self, ok_codes: &[i32]) -> Result<Option<Vec<u8>>, GitError> {
        let _ = self.repo;
        self.cmd
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = self.cmd.spawn().map_err(GitError::Spawn)?;
        // Feed stdin from a thread so a large output cannot deadlock against a large input.
        let writer = match (self.stdin.take(), child.stdin.take()) {
            (Some(input), Some(mut pipe)) => Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&input);
            })),
            _ => None,
        };
        let out = child.wait_with_output().map_err(GitError::Spawn)?;
        if let Some(w) = writer {
            let _ = w.join();
        }
        if out.status.success() {
            return Ok(Some(out.stdout));
        }
        if out.status.code().is_some_and(|c| ok_codes.contains(&c)) {
            return Ok(None);
        }
        Err(GitError::Failed {
            args: self.args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// The first line of `out`, trimmed.
pub fn lossy_line(out: &[u8]) -> String {
    String::from_utf8_lossy(out)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Splits NUL-terminated output into records.
pub fn nul_split(out: &[u8]) -> impl Iterator<Item = &[u8]> {
    out.split(|b| *b == 0).filter(|s| !s.is_empty())
}
