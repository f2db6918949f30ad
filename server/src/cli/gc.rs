//! `moord gc`: one retention and compaction run now, with the configured policy, against the
//! store the flags name. On SQLite, run it with moord stopped: a serving moord does the same work
//! on its timer, or at once on `POST /api/v1/retention/run`, and a second process writing the
//! file would make the server's own transactions retry. On Postgres nodes take turns, so it may
//! run beside them.
//!
//! Calls the library's `Server` and `retention` only.

use crate::blobs::BlobStore;
use crate::retention::run_once;
use crate::{Server, ServerConfig};

/// Runs `moord gc` and prints what it did.
pub(crate) async fn run(config: ServerConfig) -> anyhow::Result<()> {
    let retention = config.retention.clone();
    let blobs = BlobStore::new(&config.data_dir);
    let server = Server::build(config).await?;
    let run = run_once(&server.store(), &blobs, &retention)
        .await?
        .figures();
    say!(
        "retired {} sessions, finished deleting {} ({} entries, {} unreferenced blobs); \
         compacted {} sessions: {} entries, {} bytes of payload",
        run.retired_sessions,
        run.finished_sessions,
        run.entries_deleted,
        run.blobs_deleted,
        run.compacted_sessions,
        run.compacted_entries,
        run.compacted_bytes
    );
    Ok(())
}
