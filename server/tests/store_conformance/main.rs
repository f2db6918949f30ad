//! Store conformance: the same stories, the same assertions, on SQLite (always) and on Postgres.
//!
//! Postgres comes from `MOOR_TEST_PG_URL`, else `postgres://postgres@127.0.0.1:5432/postgres`
//! (the CI machine's server, trust auth). Each test creates its own database there and drops it
//! afterwards, even when the story fails. When no server answers and `MOOR_TEST_PG_URL` is unset
//! the Postgres variants are skipped with a loud message; when it is set, they fail instead.
// A test binary: an unwrap that fails is the test failing, with the error in the message.
#![allow(clippy::unwrap_used)]

mod bounds;
mod checkpoint_scope;
mod compaction;
mod group;
mod leases;
mod nodes;
mod notify;
mod offers;
mod retention;
mod stories;

use std::future::Future;

use moor_e2e::pg;
use moor_server::store::{self, Stores};

/// A database the stories can open store handles ("nodes") on.
#[derive(Debug)]
pub struct Db {
    /// Its URL.
    pub url: String,
    /// SQLite is one node: one process owns the file, so every "node" shares its handle.
    single: tokio::sync::OnceCell<Stores>,
}

impl Db {
    /// A database at `url`.
    pub fn new(url: String) -> Self {
        Self {
            url,
            single: tokio::sync::OnceCell::new(),
        }
    }

    /// A store handle on this database, as node `node`.
    pub async fn open(&self, node: &str) -> Stores {
        let connect = || async {
            store::connect_as(&self.url, node)
                .await
                .unwrap_or_else(|e| panic!("open {} as {node}: {e:#}", self.url))
        };
        if self.url.starts_with("sqlite:") {
            self.single.get_or_init(connect).await.clone()
        } else {
            connect().await
        }
    }
}

async fn on_sqlite<F, Fut>(story: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("conformance.db").display());
    story(Db::new(url)).await;
}

async fn on_postgres<F, Fut>(story: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(db) = pg::TestDb::create().await else {
        return;
    };
    db.run(|url| story(Db::new(url))).await;
}

/// A Postgres-only story that also gets the server's admin URL, to act on the database from
/// outside (end its connections, close it to new ones).
async fn on_postgres_as_admin<F, Fut>(story: F)
where
    F: FnOnce(Db, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(db) = pg::TestDb::create().await else {
        return;
    };
    let admin = db.admin_url().to_owned();
    db.run(|url| story(Db::new(url), admin)).await;
}

/// One test per story and engine: `sqlite::<story>` and `postgres::<story>`.
macro_rules! conformance {
    ($($story:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $story() {
                    super::on_sqlite(super::stories::$story).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $story() {
                    super::on_postgres(super::stories::$story).await
                }
            )*
        }
    };
}

conformance!(
    sessions_are_created_once_and_found_by_id_or_name,
    appends_get_contiguous_seqs_and_read_back_in_both_directions,
    entries_of_any_text_read_back_exactly_as_stored,
    a_group_append_commits_many_sessions_in_one_transaction,
    producer_replays_are_duplicates_mismatches_or_gaps,
    replays_among_other_writers_are_found_at_their_seqs,
    client_msg_ids_and_receipts_are_stored_once,
    inputs_and_their_settling_receipts_are_tracked,
    ended_and_unknown_sessions_refuse_appends,
    state_snapshots_keep_the_newest,
    checkpoints_are_stored_once_and_listed_newest_first,
    checkpoints_record_the_blobs_they_name,
    checkpoint_ids_are_scoped_by_session,
    blobs_are_known_to_their_uploaders_and_to_members,
    the_first_admin_is_created_once,
    accounts_refresh_tokens_and_roles_are_kept,
    share_links_grant_roles_until_spent_expired_or_revoked,
    a_share_link_preview_says_what_redeeming_would_without_spending_a_use,
    a_sessions_members_and_share_links_are_listed,
    a_session_keeps_an_owner_and_links_die_with_their_creators_role,
    offers_wait_for_their_user_expire_and_die_with_their_makers_ownership,
    offers_are_bounded_per_session_and_per_name,
    offers_to_one_name_raced_from_two_nodes_stay_within_its_bound,
    refresh_tokens_claims_and_share_links_raced_from_two_nodes_count_once,
    sessions_ended_from_two_nodes_at_once_end_once,
    an_end_written_after_the_log_moved_on_is_refused_whole,
    appenders_on_two_nodes_keep_seqs_contiguous_and_keys_unique,
    other_nodes_hear_of_appends_and_bridge_claims,
    session_lists_hold_the_members_sessions_only_newest_first_and_bounded,
    pages_stop_at_their_byte_bound_but_always_hold_one_entry,
    a_batch_larger_than_one_insert_statement_is_stored_whole_and_in_order,
    bridge_leases_are_held_renewed_released_and_taken_over,
    a_node_renews_the_leases_it_names_in_one_call_whatever_their_number,
    expired_leases_are_claimed_by_one_node_only,
    notifying_entries_get_an_outbox_row_in_their_commit_and_others_none,
    outbox_rows_go_to_one_node_and_back_when_a_claim_lapses,
    settled_outbox_rows_are_deleted_after_their_keep_and_a_flooded_session_is_cut,
    push_subscriptions_are_per_user_bounded_and_removed_by_endpoint,
    deliveries_are_kept_per_row_and_target_while_pending_and_bounded,
    mutes_are_per_user_and_a_users_muted_sessions_are_bounded,
    ended_sessions_past_retention_are_deleted_in_bounded_batches_live_ones_kept,
    an_owner_deletes_only_an_ended_session_without_a_live_bridge,
    an_orphaned_blob_named_or_uploaded_again_within_its_grace_is_kept,
    retention_batches_raced_from_two_nodes_do_each_batch_once,
    old_terminal_output_and_deltas_are_compacted_and_pages_say_what_is_missing,
    a_log_over_its_cap_loses_its_oldest_compactable_entries_whatever_their_age,
    compaction_never_passes_the_snapshot_nor_the_newest_entries,
    a_sessions_own_policy_is_stored_and_candidates_follow_it,
);

/// Postgres only: a SQLite deployment moves to Postgres with `moord migrate-store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrate_store_copies_a_sqlite_log_exactly() {
    let Some(db) = pg::TestDb::create().await else {
        return;
    };
    db.run(|url| stories::migrate_store_copies_everything(Db::new(url)))
        .await;
}

/// Postgres only: the feed survives losing its connection and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_feed_resyncs_after_its_connection_is_terminated() {
    on_postgres_as_admin(stories::feed_resyncs_after_termination).await;
}

/// Postgres only: a database that refuses connections makes the store unavailable, not broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_closed_to_connections_is_unavailable_until_it_reopens() {
    on_postgres_as_admin(stories::a_database_closed_to_connections_is_unavailable_until_it_reopens)
        .await;
}

/// Postgres only: a viewer's tail holds its stream through a short outage of the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tail_waits_through_a_short_outage() {
    on_postgres_as_admin(
        stories::a_tail_waits_through_a_short_outage_and_then_returns_what_follows,
    )
    .await;
}

/// Migration 0007 on a database holding checkpoints from before it: each one's patch and file
/// blobs are recorded, so their readers keep reading them; and 0009 keys them by session
/// without losing one.
mod blob_backfill {
    use std::borrow::Cow;
    use std::path::Path;

    use sqlx::migrate::Migrator;

    const MANIFEST: &str = r#"{"id":"00000000000000c1","patch":{"sha256":"p1","size":1},
        "files":[{"path":"a","sha256":"f1"},{"path":"gone","sha256":null}]}"#;

    /// The migrations of `dir` before 0007.
    async fn before_0007(dir: &str) -> Migrator {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut m = Migrator::new(path).await.unwrap();
        m.migrations = Cow::Owned(
            m.migrations
                .iter()
                .filter(|m| m.version < 7)
                .cloned()
                .collect(),
        );
        m
    }

    async fn assert_backfilled(url: &str, session: &str) {
        let store = moor_server::store::connect(url).await.unwrap();
        let session: moor_protocol::SessionId = session.parse().unwrap();
        for sha in ["p1", "f1"] {
            assert_eq!(
                store.checkpoints.blob_sessions(sha).await.unwrap(),
                [session],
                "{sha}"
            );
        }
        let id = "00000000000000c1";
        assert_eq!(
            store.checkpoints.checkpoint(session, id).await.unwrap().id,
            id,
            "found by its session and id"
        );
        assert_eq!(
            store.checkpoints.checkpoint_sessions(id).await.unwrap(),
            [session]
        );
        assert!(store
            .checkpoints
            .blob_sessions("null")
            .await
            .unwrap()
            .is_empty());
    }

    /// The SQL that stores, in a database as release 0006 left it, an old session (binding its
    /// id) and one checkpoint of it (binding the session's id, then the manifest).
    const SQLITE_INSERTS: [&str; 2] = [
        "INSERT INTO sessions (pk, id, name, created_at) VALUES (1, ?, 'old', 1)",
        "INSERT INTO checkpoints (id, session_pk, created_at, summary, manifest) \
         VALUES ('00000000000000c1', (SELECT pk FROM sessions WHERE id = ?), 1, '{}', ?)",
    ];
    const POSTGRES_INSERTS: [&str; 2] = [
        "INSERT INTO sessions (id, name, created_at) VALUES ($1::uuid, 'old', 1)",
        "INSERT INTO checkpoints (id, session_id, created_at, summary, manifest) \
         VALUES ('00000000000000c1', $1::uuid, 1, '{}', $2)",
    ];

    /// Brings the database of `pool` (at `url`) to release 0006 with `dir`'s migrations, stores
    /// an old session with one checkpoint through `inserts`, closes it, and asserts that the
    /// store, opened on it, backfilled the checkpoint's blobs.
    async fn assert_an_old_checkpoint_is_backfilled<DB>(
        pool: sqlx::Pool<DB>,
        url: &str,
        dir: &str,
        inserts: [&str; 2],
    ) where
        DB: sqlx::Database,
        DB::Connection: sqlx::migrate::Migrate,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        before_0007(dir).await.run(&pool).await.unwrap();
        let session = uuid::Uuid::new_v4().to_string();
        let [insert_session, insert_checkpoint] = inserts;
        sqlx::query(insert_session)
            .bind(session.as_str())
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(insert_checkpoint)
            .bind(session.as_str())
            .bind(MANIFEST)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        assert_backfilled(url, &session).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}?mode=rwc", dir.path().join("old.db").display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        assert_an_old_checkpoint_is_backfilled(pool, &url, "../migrations/sqlite", SQLITE_INSERTS)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let Some(db) = super::pg::TestDb::create().await else {
            return;
        };
        db.run(|url| async move {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            let migrations = "../migrations/postgres";
            assert_an_old_checkpoint_is_backfilled(pool, &url, migrations, POSTGRES_INSERTS).await;
        })
        .await;
    }
}
