//! `moord migrate-store`: copies a SQLite database into an empty Postgres database.
//!
//! Calls `store` only.

/// Copies `from` into `to` and says what it copied.
pub(crate) async fn run(from: &str, to: &str) -> anyhow::Result<()> {
    let n = crate::store::migrate::copy(from, to).await?;
    say!(
        "copied {} sessions, {} entries, {} producer marks, {} checkpoints, {} account rows into {}",
        n.sessions,
        n.entries,
        n.producers,
        n.checkpoints,
        n.accounts,
        crate::store::redact_url(to)
    );
    Ok(())
}
