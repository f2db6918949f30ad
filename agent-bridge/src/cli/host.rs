//! `moor host` (run the machine's host process) and `moor host install` (write a systemd user
//! unit or a launchd agent that runs it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::run::{token_for, LinkArgs};
use crate::config::parse_duration;
use crate::host::{self, HostConfig, HostParams};

/// The systemd user unit template (`@EXEC@` is the command line).
const SYSTEMD_UNIT: &str = include_str!("../../../deploy/moor-host.service");
/// The launchd agent template (`@ARGS@` is the argument list).
const LAUNCHD_PLIST: &str = include_str!("../../../deploy/dev.mooring.host.plist");

#[derive(Debug, clap::Args)]
pub(super) struct HostArgs {
    #[command(subcommand)]
    command: Option<HostCommand>,
    /// moord base URL (http(s):// or ws(s)://).
    #[arg(long, env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER, global = true)]
    server: String,
    /// Bearer token for moord (default: the credentials of `moor login`); used to register
    /// the machine and obtain its own credential, which everything else runs with.
    #[arg(long, env = "MOOR_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// The configuration file: projects, agents, max_sessions (default:
    /// $MOOR_CONFIG_DIR/host.toml, else ~/.config/moor/host.toml).
    #[arg(long, env = "MOOR_HOST_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Where the machine's spool and its sessions' spools and output live (default:
    /// $XDG_STATE_HOME/moor or ~/.local/state/moor).
    #[arg(long, env = "MOOR_STATE_DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// How long a stopped session's agent gets between SIGTERM and SIGKILL (its `moor run` then
    /// ends the session, or is killed 30 s later).
    #[arg(long, env = "MOOR_HOST_STOP_GRACE", default_value = "10s", value_parser = parse_duration, global = true)]
    stop_grace: Duration,
    /// How often the machine registers again (its projects' branch and dirty state).
    #[arg(long, env = "MOOR_HOST_REFRESH", default_value = "60s", value_parser = parse_duration, global = true)]
    refresh: Duration,
    #[command(flatten)]
    link: LinkArgs,
}

#[derive(Debug, clap::Subcommand)]
enum HostCommand {
    /// Write a systemd user unit (Linux) or a launchd agent (macOS) that runs `moor host` with
    /// these flags, and print how to enable it.
    Install {
        /// Write the file into this directory (default: ~/.config/systemd/user on Linux,
        /// ~/Library/LaunchAgents on macOS).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Write a launchd agent even off macOS (or a systemd unit with `false`).
        #[arg(long)]
        launchd: Option<bool>,
    },
}

/// `moor host [install]`.
pub(super) fn host(args: HostArgs) -> anyhow::Result<i32> {
    let config_path = match &args.config {
        Some(p) => p.clone(),
        None => crate::login::config_dir()
            .context("no config dir: set MOOR_CONFIG_DIR or HOME, or pass --config")?
            .join("host.toml"),
    };
    if let Some(HostCommand::Install { dir, launchd }) = &args.command {
        return install(&args, &config_path, dir.as_deref(), *launchd);
    }
    let config = HostConfig::load(&config_path)?;
    let token = token_for(&args.server, args.token.as_deref())?;
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => crate::config::default_state_dir()?,
    };
    let params = HostParams {
        server: args.server,
        token: token.clone(),
        config,
        state_dir,
        link: args.link.config(),
        stop_grace: args.stop_grace,
        refresh: args.refresh,
        moor: std::env::current_exe().context("find the moor binary")?,
    };
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        token.keep_fresh(shutdown.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut int = signal(SignalKind::interrupt())?;
            let mut term = signal(SignalKind::terminate())?;
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            stop.cancel();
            anyhow::Ok(())
        });
        host::run(params, shutdown).await
    })?;
    Ok(0)
}

/// Writes the service file for this OS.
fn install(
    args: &HostArgs,
    config: &Path,
    dir: Option<&Path>,
    launchd: Option<bool>,
) -> anyhow::Result<i32> {
    let moor = std::env::current_exe().context("find the moor binary")?;
    let mut argv = vec![
        moor.display().to_string(),
        "host".to_owned(),
        "--server".to_owned(),
        args.server.clone(),
        "--config".to_owned(),
        config.display().to_string(),
    ];
    if let Some(d) = &args.state_dir {
        argv.extend(["--state-dir".to_owned(), d.display().to_string()]);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let launchd = launchd.unwrap_or(cfg!(target_os = "macos"));
    let (default_dir, file, text) = if launchd {
        let items: Vec<String> = argv
            .iter()
            .map(|a| format!("        <string>{}</string>", xml_escape(a)))
            .collect();
        (
            home.map(|h| h.join("Library/LaunchAgents")),
            "dev.mooring.host.plist",
            LAUNCHD_PLIST.replace("@ARGS@", &items.join("\n")),
        )
    } else {
        let exec: Vec<String> = argv.iter().map(|a| systemd_quote(a)).collect();
        (
            home.map(|h| h.join(".config/systemd/user")),
            "moor-host.service",
            SYSTEMD_UNIT.replace("@EXEC@", &exec.join(" ")),
        )
    };
    let dir = dir
        .map(Path::to_owned)
        .or(default_dir)
        .context("no HOME: pass --dir")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let path = dir.join(file);
    std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    super::say(format_args!("wrote {}", path.display()));
    if launchd {
        super::say(format_args!(
            "enable it: launchctl load -w {}",
            path.display()
        ));
    } else {
        super::say(format_args!(
            "enable it: systemctl --user daemon-reload && systemctl --user enable --now moor-host"
        ));
    }
    Ok(0)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One systemd `ExecStart` word: quoted, with `\`, `"`, `%` and `$` escaped.
fn systemd_quote(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%")
        .replace('$', "$$");
    format!("\"{escaped}\"")
}

#[cfg(test)]
mod tests {
    #[test]
    fn systemd_words_are_quoted() {
        assert_eq!(super::systemd_quote("a b%$\""), "\"a b%%$$\\\"\"");
    }
}
