//! `moord user add|revoke`: account administration from the command line, through the same
//! library calls as the API ([`Server::add_user`], [`Server::revoke_user`]).
//!
//! Calls the library's `Server` only.

use anyhow::Context;

use crate::{Server, ServerConfig};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum UserCommand {
    /// Add a user; asks for the password (or reads one line from stdin).
    Add {
        /// Login name.
        name: String,
        /// Make the user an administrator (manages users, owns every session).
        #[arg(long)]
        admin: bool,
        /// Read the password from stdin instead of asking.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Revoke a user: no more logins, refreshes or requests with their tokens.
    Revoke {
        /// Login name.
        name: String,
    },
}

/// Runs `moord user …` against the store `config` names.
pub(crate) async fn run(cmd: UserCommand, config: ServerConfig) -> anyhow::Result<()> {
    let server = Server::build(config).await?;
    match cmd {
        UserCommand::Add {
            name,
            admin,
            password_stdin,
        } => {
            let password = read_password(password_stdin)?;
            server.add_user(&name, password, admin).await?;
            let what = if admin { "administrator" } else { "user" };
            say!("{what} {name} added");
        }
        UserCommand::Revoke { name } => {
            server.revoke_user(&name).await?;
            say!("user {name} revoked");
        }
    }
    Ok(())
}

/// One line from stdin; on a terminal, asked for without echo.
fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    use std::io::{BufRead, IsTerminal};
    let tty = !from_stdin && std::io::stdin().is_terminal();
    let stty = |arg: &str| {
        let _ = std::process::Command::new("stty").arg(arg).status();
    };
    if tty {
        eprint!("password: ");
        stty("-echo");
    }
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if tty {
        stty("echo");
        eprintln!();
    }
    read.context("read password")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}
