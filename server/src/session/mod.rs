//! The session core: everything a transport does to a session's log goes through here, and
//! nothing here knows a transport. `log` commits appends (group commit across sessions, then fan-out), `tail`
//! reads a log from a cursor with no gap at the seam, `end` writes a session's end once, `export` writes a whole log as JSONL or Markdown, `cursor` parses and checks viewer
//! cursors, `input` validates and appends remote input, `states` follows each session's
//! derived state, `leases` holds bridge leases and ends the connections of nodes that are gone. It calls down into `store` and `hub` only; never `http`, `sse`, `ws` or
//! `state`.

mod commit;
pub mod cursor;
pub mod end;
pub mod export;
pub mod input;
pub mod leases;
pub mod log;
pub mod pages;
mod queues;
pub mod states;
pub mod tail;

/// A log writer that commits at once over `store`, and the state followers over it: the
/// session core as tests build it (a node's commits wait for its `--commit-window-ms`).
#[cfg(test)]
pub(crate) fn log_and_states(
    store: std::sync::Arc<dyn crate::store::LogStore>,
    hub: crate::hub::Hub,
    tasks: tokio_util::task::TaskTracker,
    shutdown: tokio_util::sync::CancellationToken,
) -> (log::Log, states::States) {
    let log = log::Log::new(
        store.clone(),
        hub.clone(),
        tasks.clone(),
        std::time::Duration::ZERO,
    );
    let states = states::States::new(store, hub, log.clone(), tasks, shutdown);
    (log, states)
}

/// Input `n` as a test submits it: an `input.text` saying `n`, under the client id `m<n>`.
#[cfg(test)]
pub(crate) fn text_input(n: u64) -> crate::store::Append {
    use moor_protocol::{kinds, payload::InputText, EntryBody};
    crate::store::Append {
        ts: 0,
        kind: kinds::INPUT_TEXT.into(),
        author: "user:test".into(),
        payload: EntryBody::from(InputText {
            text: n.to_string(),
        })
        .payload()
        .into(),
        key: crate::store::IdemKey::ClientMsg(format!("m{n}")),
    }
}

/// A real SQLite store in `dir` (its URL, for a second connection), with [`log_and_states`]
/// over it on a hub of its own.
#[cfg(test)]
pub(crate) async fn on_sqlite(
    dir: &tempfile::TempDir,
) -> (String, crate::store::Stores, log::Log, states::States) {
    let url = format!("sqlite:{}", dir.path().join("moor.db").display());
    let store = crate::store::connect(&url).await.expect("a SQLite store");
    let (log, states) = log_and_states(
        store.log.clone(),
        crate::hub::Hub::default(),
        tokio_util::task::TaskTracker::new(),
        tokio_util::sync::CancellationToken::new(),
    );
    (url, store, log, states)
}
