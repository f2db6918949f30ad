//! `moord gc`: one retention and compaction run now, with the configured policy, against the
//! store the flags name (works while moord serves: every step is its own bounded transaction,
//! and on Postgres nodes take turns).
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
    let run = run_once(&server.store(), &blobs, &retention).await?;
    println!(
        "retired {} sessions, finished deleting {} ({} entries, {} unreferenced blobs); \
         compacted {} sessions: {} entries, {} bytes of payload",
        run.sweep.retired.len(),
        run.sweep.finished.len(),
        run.sweep.entries_deleted,
        run.sweep.orphan_blobs.len(),
        run.compacted.sessions,
        run.compacted.entries,
        run.compacted.bytes
    );
    Ok(())
}
