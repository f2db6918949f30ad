//! `moor export SESSION`: a session's log downloaded from moord as JSONL or Markdown, streamed
//! to a file or standard output, over [`crate::recover::Api`].

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;

use super::run::token_for;
use crate::recover::with_api;

/// The longest an export download may take.
const MAX_EXPORT_TIME: Duration = Duration::from_secs(6 * 3600);

#[derive(Debug, clap::Args)]
pub(super) struct ExportArgs {
    /// Session name or id.
    session: String,
    /// `jsonl` (every entry, one JSON object a line) or `markdown` (the transcript).
    #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "markdown"])]
    format: String,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// moord base URL.
    #[arg(long, env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER)]
    server: String,
    /// Bearer token for moord (default: the credentials of `moor login`).
    #[arg(long, env = "MOOR_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// `moor export SESSION [--format jsonl|markdown] [--output FILE]`.
pub(super) fn export(args: ExportArgs) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let token = token_for(&args.server, args.token.as_deref())?;
        let (session, format) = (args.session.as_str(), args.format.as_str());
        let resp = with_api(&args.server, &token, |api| async move {
            api.export(session, format, MAX_EXPORT_TIME).await
        })
        .await?;
        let mut out: Box<dyn Write> = match &args.output {
            Some(path) => Box::new(std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("create {}", path.display()))?,
            )),
            None => Box::new(std::io::stdout().lock()),
        };
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.context("the export was cut short")?;
            out.write_all(&chunk).context("write the export")?;
        }
        out.flush().context("write the export")?;
        Ok(0)
    })
}
