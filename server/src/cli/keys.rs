//! `moord keys rotate|retire`: the JWT signing keys in `<data-dir>/jwt-keys.json`.
//!
//! Calls `access::jwt` only.

use crate::access::jwt::Keys;
use crate::ServerConfig;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum KeysCommand {
    /// Sign new tokens with a fresh key; tokens signed with older keys stay valid.
    Rotate,
    /// Remove every key but the current one: older tokens stop verifying.
    Retire,
}

/// Runs `moord keys …` on the data directory of `config`.
pub(crate) fn run(cmd: KeysCommand, config: ServerConfig) -> anyhow::Result<()> {
    crate::util::create_private_dir(&config.data_dir)?;
    match cmd {
        KeysCommand::Rotate => {
            say!("new signing key {}", Keys::rotate(&config.data_dir)?)
        }
        KeysCommand::Retire => {
            say!("retired {} key(s)", Keys::retire_old(&config.data_dir)?)
        }
    }
    Ok(())
}
