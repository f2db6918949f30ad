//! The file a person edits on the machine to say what `moor host` may start (TOML):
//!
//! ```toml
//! name = "laptop"          # optional; default: the host name
//! max_sessions = 4         # optional; default 4, at most 64
//!
//! [projects.api]
//! dir = "/home/me/src/api"
//!
//! [agents.claude]
//! command = ["claude"]
//! mode = "claude"          # auto, pty, claude, acp or lines; default auto
//! ```
//!
//! Nothing from the network is ever added to what is read here: a request names a project
//! and an agent, and only these directories and commands run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use moor_protocol::host::{is_valid_name, MAX_OFFERS};
use toml_edit::{DocumentMut, Item, Value};

/// Default for `max_sessions`.
pub const DEFAULT_MAX_SESSIONS: u32 = 4;
/// Largest `max_sessions`.
pub const MAX_SESSIONS_LIMIT: u32 = 64;
/// Largest configuration file read, bytes.
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// The agent modes `moor run --mode` takes.
pub const MODES: [&str; 8] = moor_protocol::host::AGENT_MODES;

/// One agent: the command `moor run` starts, and how it drives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDef {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// `moor run --mode`.
    pub mode: String,
}

/// What this machine may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// The machine's name.
    pub name: String,
    /// Most sessions running at once.
    pub max_sessions: u32,
    /// Project name → directory.
    pub projects: BTreeMap<String, PathBuf>,
    /// Agent name → command and mode.
    pub agents: BTreeMap<String, AgentDef>,
}

impl HostConfig {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("read the host configuration {}", path.display()))?;
        if meta.len() > MAX_FILE_BYTES {
            bail!("{} is over {MAX_FILE_BYTES} bytes", path.display());
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read the host configuration {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses and checks a configuration.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let doc: DocumentMut = text.parse().context("not valid TOML")?;
        let mut config = Self {
            name: crate::config::host_name(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            projects: BTreeMap::new(),
            agents: BTreeMap::new(),
        };
        for (key, item) in doc.iter() {
            match key {
                "name" => config.name = string(item, "name")?,
                "max_sessions" => {
                    let n = item.as_integer().context("max_sessions: give a number")?;
                    config.max_sessions = u32::try_from(n)
                        .ok()
                        .filter(|n| (1..=MAX_SESSIONS_LIMIT).contains(n))
                        .with_context(|| format!("max_sessions: 1 to {MAX_SESSIONS_LIMIT}"))?;
                }
                "projects" => config.projects = projects(item)?,
                "agents" => config.agents = agents(item)?,
                other => bail!("unknown setting {other:?} (name, max_sessions, projects, agents)"),
            }
        }
        if !is_valid_name(&config.name) {
            bail!(
                "name {:?}: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with . or - (set name = \"…\")",
                config.name
            );
        }
        Ok(config)
    }

    /// The project `name`'s directory, if configured.
    pub fn project(&self, name: &str) -> Option<&Path> {
        self.projects.get(name).map(PathBuf::as_path)
    }

    /// The agent `name`, if configured.
    pub fn agent(&self, name: &str) -> Option<&AgentDef> {
        self.agents.get(name)
    }
}

fn string(item: &Item, what: &str) -> anyhow::Result<String> {
    item.as_str()
        .map(str::to_owned)
        .with_context(|| format!("{what}: give a string"))
}

fn entries<'a>(
    item: &'a Item,
    what: &str,
) -> anyhow::Result<Vec<(&'a str, &'a dyn toml_edit::TableLike)>> {
    let table = item
        .as_table_like()
        .with_context(|| format!("{what}: give a table ([{what}.NAME])"))?;
    if table.len() > MAX_OFFERS {
        bail!("{what}: at most {MAX_OFFERS}");
    }
    table
        .iter()
        .map(|(name, item)| {
            if !is_valid_name(name) {
                bail!("{what}.{name}: names are 1 to 64 of A-Z a-z 0-9 . _ -, not starting with . or -");
            }
            let t = item
                .as_table_like()
                .with_context(|| format!("{what}.{name}: give a table"))?;
            Ok((name, t))
        })
        .collect()
}

fn projects(item: &Item) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for (name, t) in entries(item, "projects")? {
        for (key, _) in t.iter() {
            if key != "dir" {
                bail!("projects.{name}: unknown setting {key:?} (dir)");
            }
        }
        let dir = t
            .get("dir")
            .and_then(Item::as_str)
            .with_context(|| format!("projects.{name}.dir: give the directory"))?;
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            bail!("projects.{name}.dir: give an absolute path");
        }
        out.insert(name.to_owned(), dir);
    }
    Ok(out)
}

fn agents(item: &Item) -> anyhow::Result<BTreeMap<String, AgentDef>> {
    let mut out = BTreeMap::new();
    for (name, t) in entries(item, "agents")? {
        for (key, _) in t.iter() {
            if !["command", "mode"].contains(&key) {
                bail!("agents.{name}: unknown setting {key:?} (command, mode)");
            }
        }
        let command: Vec<String> = t
            .get("command")
            .and_then(Item::as_array)
            .with_context(|| format!("agents.{name}.command: give a list, e.g. [\"claude\"]"))?
            .iter()
            .map(|v| Value::as_str(v).map(str::to_owned))
            .collect::<Option<_>>()
            .with_context(|| format!("agents.{name}.command: a list of strings"))?;
        if command.is_empty() || command[0].is_empty() {
            bail!("agents.{name}.command: name the program");
        }
        let mode = match t.get("mode") {
            None => "auto".to_owned(),
            Some(m) => string(m, &format!("agents.{name}.mode"))?,
        };
        if !MODES.contains(&mode.as_str()) {
            bail!("agents.{name}.mode: one of {MODES:?}");
        }
        out.insert(name.to_owned(), AgentDef { command, mode });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_names_projects_and_agents() {
        let c = HostConfig::parse(
            "name = \"box\"\nmax_sessions = 2\n[projects.api]\ndir = \"/srv/api\"\n\
             [agents.claude]\ncommand = [\"claude\", \"--model\", \"x\"]\nmode = \"claude\"\n\
             [agents.sh]\ncommand = [\"sh\"]\nmode = \"pty\"\n",
        )
        .unwrap();
        assert_eq!(c.name, "box");
        assert_eq!(c.max_sessions, 2);
        assert_eq!(c.project("api"), Some(Path::new("/srv/api")));
        assert_eq!(c.agent("claude").unwrap().command.len(), 3);
        assert_eq!(c.agent("sh").unwrap().mode, "pty");
    }

    #[test]
    fn bad_configurations_are_refused() {
        for bad in [
            "[projects.api]\ndir = \"relative\"\n",
            "[projects.\"../x\"]\ndir = \"/x\"\n",
            "[agents.a]\ncommand = []\n",
            "[agents.a]\ncommand = [\"a\"]\nmode = \"shell\"\n",
            "max_sessions = 0\n",
            "unknown = 1\n",
            "[projects.api]\ndir = \"/x\"\nextra = 1\n",
        ] {
            assert!(HostConfig::parse(bad).is_err(), "{bad}");
        }
    }
}
