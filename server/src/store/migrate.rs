//! `moord migrate-store`: copies a SQLite deployment's log into an empty Postgres database,
//! table by table, keeping every seq and idempotency key (so bridges resume from the same marks
//! and retried inputs stay duplicates), with state snapshots, checkpoint records, accounts,
//! refresh-token families, share links and session roles.
//!
//! The copy runs in one destination transaction: if anything fails, the destination is left as
//! it was and the command can simply be run again. The source is opened read-only; stop `moord`
//! before copying so nothing is appended behind the copy's back.

use std::str::FromStr;

use anyhow::{bail, Context};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteRow};
use sqlx::{Postgres, Row, Transaction};

use super::{redact_url, Engine, PgStore};

/// Rows per read from the source and per insert into the destination.
const CHUNK: i64 = 5000;

/// What was copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Sessions.
    pub sessions: u64,
    /// Log entries.
    pub entries: u64,
    /// Producer marks.
    pub producers: u64,
    /// Checkpoint records (their blobs live in `<data-dir>/blobs`, copied separately).
    pub checkpoints: u64,
    /// Rows of users, token families, refresh tokens, share links, session roles, the blobs
    /// each checkpoint names, who uploaded each blob, deleted sessions' tombstones, and each
    /// user's notification settings (devices, sinks, mutes, quiet hours).
    pub accounts: u64,
}

/// A table copied whole: its rows read from SQLite by `select` (`None`: the columns by name
/// from the table of the same name), each column with its Postgres type (`text`, `uuid` or
/// `bigint`), in the order `select` reads them.
struct Table {
    name: &'static str,
    select: Option<&'static str>,
    columns: &'static [(&'static str, &'static str)],
}

const SESSIONS: Table = Table {
    name: "sessions",
    select: Some(
        "SELECT id, name, created_at, head_seq, last_ts, ended_at, agent, compacted_through, \
         compacted_entries, compacted_bytes, sized_through, sized_bytes, keep_ended_ms, \
         compact_after_ms, max_log_bytes FROM sessions",
    ),
    columns: &[
        ("id", "uuid"),
        ("name", "text"),
        ("created_at", "bigint"),
        ("head_seq", "bigint"),
        ("last_ts", "bigint"),
        ("ended_at", "bigint"),
        ("agent", "text"),
        // A compacted log keeps saying what it lacks.
        ("compacted_through", "bigint"),
        ("compacted_entries", "bigint"),
        ("compacted_bytes", "bigint"),
        ("sized_through", "bigint"),
        ("sized_bytes", "bigint"),
        ("keep_ended_ms", "bigint"),
        ("compact_after_ms", "bigint"),
        ("max_log_bytes", "bigint"),
    ],
};

const PRODUCERS: Table = Table {
    name: "producers",
    select: Some(
        "SELECT s.id AS session_id, p.producer_id, p.last_seq \
         FROM producers p JOIN sessions s ON s.pk = p.session_pk",
    ),
    columns: &[
        ("session_id", "uuid"),
        ("producer_id", "uuid"),
        ("last_seq", "bigint"),
    ],
};

const SNAPSHOTS: Table = Table {
    name: "state_snapshots",
    select: Some(
        "SELECT s.id AS session_id, x.head_seq, x.state \
         FROM state_snapshots x JOIN sessions s ON s.pk = x.session_pk",
    ),
    columns: &[
        ("session_id", "uuid"),
        ("head_seq", "bigint"),
        ("state", "text"),
    ],
};

const CHECKPOINTS: Table = Table {
    name: "checkpoints",
    select: Some(
        "SELECT c.id, s.id AS session_id, c.created_at, c.summary, c.manifest \
         FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk",
    ),
    columns: &[
        ("id", "text"),
        ("session_id", "uuid"),
        ("created_at", "bigint"),
        ("summary", "text"),
        ("manifest", "text"),
    ],
};

/// Tables copied after the log and the checkpoints, in an order that satisfies their foreign
/// keys (most with the same columns in both dialects).
const PLAIN_TABLES: &[Table] = &[
    Table {
        name: "users",
        select: None,
        columns: &[
            ("name", "text"),
            ("password_hash", "text"),
            ("created_at", "bigint"),
            ("revoked_at", "bigint"),
            ("admin_since", "bigint"),
        ],
    },
    Table {
        name: "token_families",
        select: None,
        columns: &[
            ("family", "text"),
            ("user_name", "text"),
            ("created_at", "bigint"),
            ("revoked_at", "bigint"),
        ],
    },
    Table {
        name: "refresh_tokens",
        select: None,
        columns: &[
            ("token_hash", "text"),
            ("family", "text"),
            ("user_name", "text"),
            ("created_at", "bigint"),
            ("expires_at", "bigint"),
            ("used_at", "bigint"),
        ],
    },
    Table {
        name: "share_links",
        select: None,
        columns: &[
            ("id", "text"),
            ("token_hash", "text"),
            ("session_id", "text"),
            ("role", "text"),
            ("created_by", "text"),
            ("created_at", "bigint"),
            ("expires_at", "bigint"),
            ("uses_left", "bigint"),
            ("revoked_at", "bigint"),
            ("max_uses", "bigint"),
        ],
    },
    Table {
        name: "session_members",
        select: None,
        columns: &[
            ("session_id", "text"),
            ("principal", "text"),
            ("role", "text"),
            ("via_link", "text"),
        ],
    },
    Table {
        name: "session_offers",
        select: None,
        columns: &[
            ("session_id", "text"),
            ("principal", "text"),
            ("role", "text"),
            ("offered_by", "text"),
            ("offered_at", "bigint"),
            ("expires_at", "bigint"),
        ],
    },
    Table {
        name: "checkpoint_blobs",
        select: Some(
            "SELECT b.sha256, s.id AS session_id, b.checkpoint_id \
             FROM checkpoint_blobs b JOIN sessions s ON s.pk = b.session_pk",
        ),
        columns: &[
            ("sha256", "text"),
            ("session_id", "uuid"),
            ("checkpoint_id", "text"),
        ],
    },
    Table {
        name: "blob_uploads",
        select: None,
        columns: &[
            ("sha256", "text"),
            ("uploader", "text"),
            ("size", "bigint"),
            ("uploaded_at", "bigint"),
        ],
    },
    Table {
        name: "blob_orphans",
        select: None,
        columns: &[("sha256", "text"), ("since", "bigint")],
    },
    Table {
        name: "push_subscriptions",
        select: None,
        columns: &[
            ("id", "text"),
            ("principal", "text"),
            ("device", "text"),
            ("endpoint", "text"),
            ("p256dh", "text"),
            ("auth", "text"),
            ("created_at", "bigint"),
        ],
    },
    Table {
        name: "retired_sessions",
        select: None,
        columns: &[
            ("id", "text"),
            ("name", "text"),
            ("ended_at", "bigint"),
            ("retired_at", "bigint"),
            ("reason", "text"),
            ("done_at", "bigint"),
        ],
    },
    Table {
        name: "notify_muted_classes",
        select: None,
        columns: &[("principal", "text"), ("class", "text")],
    },
    Table {
        name: "notify_muted_sessions",
        select: None,
        columns: &[
            ("principal", "text"),
            ("session_id", "text"),
            ("at", "bigint"),
        ],
    },
    Table {
        name: "notify_quiet_hours",
        select: None,
        columns: &[
            ("principal", "text"),
            ("start_at", "text"),
            ("end_at", "text"),
            ("time_zone", "text"),
        ],
    },
    Table {
        name: "notify_sinks",
        select: None,
        columns: &[
            ("id", "text"),
            ("principal", "text"),
            ("kind", "text"),
            ("label", "text"),
            ("url", "text"),
            ("secret", "text"),
            ("created_at", "bigint"),
        ],
    },
    Table {
        name: "machines",
        select: None,
        columns: &[
            ("id", "text"),
            ("owner", "text"),
            ("name", "text"),
            ("os", "text"),
            ("version", "text"),
            ("offers", "text"),
            ("max_sessions", "bigint"),
            ("log_session", "text"),
            ("registered_at", "bigint"),
        ],
    },
    Table {
        name: "machine_sessions",
        select: None,
        columns: &[
            ("machine_id", "text"),
            ("name", "text"),
            ("project", "text"),
            ("agent", "text"),
            ("created_at", "bigint"),
        ],
    },
];

/// Copies everything from the SQLite database at `from` into the Postgres database at `to`
/// (created and migrated if needed, and required to hold no session yet).
pub async fn copy(from: &str, to: &str) -> anyhow::Result<Copied> {
    if Engine::of(from)? != Engine::Sqlite || Engine::of(to)? != Engine::Postgres {
        bail!(
            "migrate-store copies a sqlite: database into a postgres: database (got {} -> {})",
            redact_url(from),
            redact_url(to)
        );
    }
    let src = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::from_str(from)
                .with_context(|| format!("parse {from:?}"))?
                .read_only(true),
        )
        .await
        .with_context(|| format!("open {from}"))?;
    let dst = PgStore::connect(to, "migrate-store").await?;
    let mut tx = dst.pool().begin().await.context("begin on postgres")?;
    let existing: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut *tx)
        .await
        .context("count destination sessions")?;
    if existing > 0 {
        bail!(
            "{} already holds {existing} session(s); migrate into an empty database",
            redact_url(to)
        );
    }
    let mut copied = Copied {
        sessions: copy_table(&src, &mut tx, &SESSIONS).await?,
        ..Copied::default()
    };

    let mut after: (i64, i64) = (0, 0);
    loop {
        let rows = sqlx::query(
            "SELECT e.session_pk, s.id AS session_id, e.seq, e.ts, e.kind, e.author, e.payload, \
             p.producer_id, e.producer_seq, e.client_msg_id, e.ref_seq \
             FROM entries e JOIN sessions s ON s.pk = e.session_pk \
             LEFT JOIN producers p ON p.pk = e.producer_pk \
             WHERE (e.session_pk, e.seq) > (?, ?) ORDER BY e.session_pk, e.seq LIMIT ?",
        )
        .bind(after.0)
        .bind(after.1)
        .bind(CHUNK)
        .fetch_all(&src)
        .await
        .context("read entries")?;
        let Some(last) = rows.last() else { break };
        after = (last.try_get("session_pk")?, last.try_get("seq")?);
        copy_entries(&mut tx, &rows).await?;
        copied.entries += rows.len() as u64;
    }

    // The copied entries fired the outbox trigger: they are history, not news to send.
    sqlx::query("DELETE FROM notify_outbox")
        .execute(&mut *tx)
        .await
        .context("clear the outbox of copied entries")?;
    copied.producers = copy_table(&src, &mut tx, &PRODUCERS).await?;
    copy_table(&src, &mut tx, &SNAPSHOTS).await?;
    copied.checkpoints = copy_table(&src, &mut tx, &CHECKPOINTS).await?;
    for table in PLAIN_TABLES {
        copied.accounts += copy_table(&src, &mut tx, table).await?;
    }

    // Every session's head must match what was copied: a torn source would show here.
    let bad: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sessions s WHERE s.head_seq <> \
         (SELECT count(*) FROM entries e WHERE e.session_id = s.id)",
    )
    .fetch_one(&mut *tx)
    .await
    .context("check copied heads")?;
    if bad > 0 {
        bail!("{bad} session(s) have a head seq that does not match their entries; nothing was written");
    }
    tx.commit().await.context("commit the copy")?;
    Ok(copied)
}

/// Copies every row of `table`; returns how many.
async fn copy_table(
    src: &sqlx::SqlitePool,
    tx: &mut Transaction<'_, Postgres>,
    table: &Table,
) -> anyhow::Result<u64> {
    let Table {
        name: table,
        select,
        columns,
    } = table;
    let names: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
    let select = match select {
        Some(sql) => (*sql).to_owned(),
        None => format!("SELECT {} FROM {table}", names.join(", ")),
    };
    let rows = sqlx::query(&select)
        .fetch_all(src)
        .await
        .with_context(|| format!("read {table}"))?;
    for chunk in rows.chunks(CHUNK as usize) {
        let arrays: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| format!("${}::{ty}[]", i + 1))
            .collect();
        let sql = format!(
            "INSERT INTO {table} ({}) SELECT * FROM UNNEST({})",
            names.join(", "),
            arrays.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for (name, ty) in columns.iter() {
            query = if *ty == "bigint" {
                query.bind(column::<Option<i64>>(chunk, name)?)
            } else {
                query.bind(column::<Option<String>>(chunk, name)?)
            };
        }
        query
            .execute(&mut **tx)
            .await
            .with_context(|| format!("write {table}"))?;
    }
    Ok(rows.len() as u64)
}

/// One column of `rows`, decoded as `T`.
fn column<T>(rows: &[SqliteRow], name: &str) -> anyhow::Result<Vec<T>>
where
    T: for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    rows.iter()
        .map(|r| {
            r.try_get(name)
                .with_context(|| format!("read column {name}"))
        })
        .collect()
}

async fn copy_entries(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[SqliteRow],
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO entries (session_id, seq, ts, kind, author, payload, producer_id, \
         producer_seq, client_msg_id, ref_seq) \
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], \
         $6::text[], $7::uuid[], $8::bigint[], $9::text[], $10::bigint[])",
    )
    .bind(column::<String>(rows, "session_id")?)
    .bind(column::<i64>(rows, "seq")?)
    .bind(column::<i64>(rows, "ts")?)
    .bind(column::<String>(rows, "kind")?)
    .bind(column::<String>(rows, "author")?)
    .bind(column::<String>(rows, "payload")?)
    .bind(column::<Option<String>>(rows, "producer_id")?)
    .bind(column::<Option<i64>>(rows, "producer_seq")?)
    .bind(column::<Option<String>>(rows, "client_msg_id")?)
    .bind(column::<Option<i64>>(rows, "ref_seq")?)
    .execute(&mut **tx)
    .await
    .context("write entries")?;
    Ok(())
}
