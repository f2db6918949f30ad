//! `moord backup PATH` and `moord restore PATH`: a consistent copy of a SQLite deployment taken
//! while `moord` serves, and that copy put into a fresh data dir.
//!
//! A backup directory holds `moor.db` (`VACUUM INTO`: one snapshot of the database, every
//! commit before it began), then `blobs/` and the keys (`jwt-keys.json`, `admin.token`, and the
//! Web Push key `vapid.key`, wherever `--vapid-key-file` puts it).
//! Blobs are copied after the snapshot, and a checkpoint is recorded only once its blobs are
//! stored, so every blob the copied database names is in the copy. Postgres deployments use
//! `pg_dump` and copy `blobs/` themselves (docs/operating.md).
//!
//! Calls `store` (the snapshot, opening the restored database) and the file system only.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::notify::vapid::VAPID_KEY_FILE;
use crate::store::{self, Engine};
use crate::ServerConfig;

/// The files of the data dir a backup carries besides the database and the blobs.
const CREDENTIALS: [&str; 2] = ["jwt-keys.json", "admin.token"];
/// The database's file name in a backup (and in a data dir).
const DB_FILE: &str = "moor.db";

/// `moord backup PATH`: PATH must not exist yet.
pub(crate) async fn backup(dest: PathBuf, config: ServerConfig) -> anyhow::Result<()> {
    let url = config.database_url();
    if Engine::of(&url)? != Engine::Sqlite {
        bail!(
            "moord backup copies a SQLite deployment; for Postgres use pg_dump and copy \
             {}/blobs (see docs/operating.md, Backups)",
            config.data_dir.display()
        );
    }
    if dest.exists() {
        bail!("{} exists: give a new directory", dest.display());
    }
    crate::util::create_private_dir(&dest).with_context(|| format!("create {}", dest.display()))?;
    store::sqlite_backup_into(&url, &dest.join(DB_FILE)).await?;
    let blobs = copy_tree(&config.data_dir.join("blobs"), &dest.join("blobs"))?;
    for name in CREDENTIALS {
        copy_if_present(&config.data_dir.join(name), &dest.join(name))?;
    }
    copy_if_present(&vapid_key_path(&config), &dest.join(VAPID_KEY_FILE))?;
    let size = std::fs::metadata(dest.join(DB_FILE))?.len();
    say!(
        "backup in {}: database {size} bytes, {blobs} blobs",
        dest.display()
    );
    Ok(())
}

/// `moord restore PATH`: into a data dir without a database.
pub(crate) async fn restore(src: PathBuf, config: ServerConfig) -> anyhow::Result<()> {
    let url = config.database_url();
    if config.database_url.is_some() {
        bail!("moord restore writes <data-dir>/moor.db; do not give --database-url ({url})");
    }
    let db = src.join(DB_FILE);
    if !db.is_file() {
        bail!("{} is not a backup: it has no {DB_FILE}", src.display());
    }
    let data = &config.data_dir;
    let target = data.join(DB_FILE);
    if target.exists() {
        bail!(
            "{} already holds a database: restore into a fresh data dir",
            data.display()
        );
    }
    crate::util::create_private_dir(data).with_context(|| format!("create {}", data.display()))?;
    let blobs = copy_tree(&src.join("blobs"), &data.join("blobs"))?;
    for name in CREDENTIALS {
        copy_if_present(&src.join(name), &data.join(name))?;
    }
    restore_vapid_key(&src.join(VAPID_KEY_FILE), &vapid_key_path(&config))?;
    // The database last, under its name only once whole.
    let partial = data.join("moor.db.restoring");
    std::fs::copy(&db, &partial).with_context(|| format!("copy {}", db.display()))?;
    std::fs::rename(&partial, &target)?;
    // Opening it migrates a backup of an older release and proves it readable.
    let stores = store::connect(&url).await?;
    let sessions = stores.log.list_sessions(None, u32::MAX).await?.len();
    say!(
        "restored {} into {}: {sessions} sessions, {blobs} blobs",
        src.display(),
        data.display()
    );
    Ok(())
}

/// Where `moord` reads its Web Push key: `--vapid-key-file`, else `<data-dir>/vapid.key`.
fn vapid_key_path(config: &ServerConfig) -> PathBuf {
    config
        .notify
        .vapid_key_file
        .clone()
        .unwrap_or_else(|| config.data_dir.join(VAPID_KEY_FILE))
}

/// Puts the backup's Web Push key where `moord` will read it. A key already there is kept (a
/// `--vapid-key-file` outside the data dir may be shared): refusing would leave the restore
/// half done, overwriting could break another deployment's subscriptions.
fn restore_vapid_key(from: &Path, to: &Path) -> anyhow::Result<()> {
    if to.exists() {
        if from.is_file() {
            eprintln!(
                "kept the Web Push key already at {}; the backup's is in {}",
                to.display(),
                from.display()
            );
        }
        return Ok(());
    }
    copy_if_present(from, to)
}

fn copy_if_present(from: &Path, to: &Path) -> anyhow::Result<()> {
    if from.is_file() {
        std::fs::copy(from, to).with_context(|| format!("copy {}", from.display()))?;
    }
    Ok(())
}

/// Copies the blob tree (`ab/<sha256>` files), leaving out uploads in progress (`tmp/`);
/// returns how many blobs it copied.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<u64> {
    if !from.is_dir() {
        return Ok(0);
    }
    crate::util::create_private_dir(to).with_context(|| format!("create {}", to.display()))?;
    let mut copied = 0;
    for dir in std::fs::read_dir(from)? {
        let dir = dir?;
        if dir.file_name() == "tmp" || !dir.file_type()?.is_dir() {
            continue;
        }
        let sub = to.join(dir.file_name());
        crate::util::create_private_dir(&sub)?;
        for file in std::fs::read_dir(dir.path())? {
            let file = file?;
            if file.file_type()?.is_file() {
                std::fs::copy(file.path(), sub.join(file.file_name()))
                    .with_context(|| format!("copy {}", file.path().display()))?;
                copied += 1;
            }
        }
    }
    Ok(copied)
}
