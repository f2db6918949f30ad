//! `moord export SESSION`: a session's log as JSONL or Markdown, read from the store directly
//! (works while moord serves, and with it stopped), through the same export as the API.
//!
//! Calls the library's `Server` and `session::export` only.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use tokio::sync::mpsc;

use crate::session::export::{export, Format, CHUNKS_IN_FLIGHT};
use crate::{Server, ServerConfig};

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// Session name or id.
    session: String,
    /// `jsonl` (every entry, one JSON object a line) or `markdown` (the transcript).
    #[arg(long, default_value = "jsonl")]
    format: String,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

/// Runs `moord export …` against the store `config` names.
pub(crate) async fn run(args: ExportArgs, config: ServerConfig) -> anyhow::Result<()> {
    let format = Format::parse(&args.format)
        .with_context(|| format!("--format {:?}: use jsonl or markdown", args.format))?;
    let page_bytes = config.max_page_bytes;
    let server = Server::build(config).await?;
    let store = server.store().log;
    let session = store
        .find_session(&args.session)
        .await
        .with_context(|| format!("session {:?}", args.session))?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let (tx, mut rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let task = tokio::spawn(export(store, session, format, page_bytes, tx));
    while let Some(chunk) = rx.recv().await {
        out.write_all(&chunk?).context("write the export")?;
    }
    task.await.context("the export stopped")??;
    out.flush().context("write the export")?;
    Ok(())
}
