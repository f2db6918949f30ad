//! The seeded chaos soak: a fixed seed and a random (printed) one, on SQLite and on Postgres,
//! which must end with zero invariant violations; and a deliberately injected bug in `moord`
//! (`MOOR_INJECT_BUG=swap-entries`, debug builds) that the checker must catch, seed printed.
//!
//! Each run injects faults for two minutes (`MOOR_SOAK_SECS` sets another length). Reproduce a
//! failure with `scripts/soak --seed N` (`--store postgres` for the Postgres runs).

use std::time::Duration;

use moor_e2e::pg::skip;
use moor_e2e::soak::{self, SoakConfig, Store};

/// The fixed seed of the suite's soaks.
const FIXED_SEED: u64 = 20_261_201;

/// How long each run injects faults: two minutes unless `MOOR_SOAK_SECS` says otherwise.
fn soak_duration() -> Duration {
    let s = std::env::var("MOOR_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(s)
}

async fn soak_passes(seed: u64, duration: Duration, store: Store, pg_restart: bool) {
    eprintln!("moor-soak seed {seed} ({duration:?} on {store:?})");
    let cfg = SoakConfig {
        seed,
        duration,
        store,
        pg_restart,
        inject_bug: None,
        token_bridge: false,
    };
    let report = match soak::run(cfg).await {
        Ok(r) => r,
        Err(e) if store == Store::Postgres && std::env::var("MOOR_TEST_PG_URL").is_err() => {
            return skip(&format!("{e:#}"));
        }
        Err(e) => panic!("soak could not run: {e:#}"),
    };
    let summary = report.summary();
    eprintln!("{summary}");
    assert!(report.passed(), "{summary}");
    assert!(
        report.faults.values().filter(|n| **n > 0).count() >= 10,
        "too few fault types were injected: {summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_sqlite_fixed_seed() {
    soak_passes(FIXED_SEED, soak_duration(), Store::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_sqlite_random_seed() {
    soak_passes(rand::random(), soak_duration(), Store::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_postgres_fixed_seed() {
    soak_passes(FIXED_SEED, soak_duration(), Store::Postgres, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_postgres_random_seed() {
    soak_passes(rand::random(), soak_duration(), Store::Postgres, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_an_injected_reorder_and_prints_the_seed() {
    let seed = 4242;
    let cfg = SoakConfig {
        seed,
        duration: Duration::from_secs(15),
        store: Store::Sqlite,
        pg_restart: false,
        inject_bug: Some("swap-entries".into()),
        token_bridge: false,
    };
    let report = soak::run(cfg).await.expect("soak runs");
    let summary = report.summary();
    eprintln!("{summary}");
    assert!(
        !report.passed(),
        "the swapped entries went unnoticed: {summary}"
    );
    assert!(
        report
            .verdict
            .violations
            .iter()
            .any(|v| v.invariant.starts_with("producer")),
        "the swap is a producer-order violation: {summary}"
    );
    assert!(
        summary.contains(&format!("FAIL (seed {seed})")),
        "{summary}"
    );
    assert!(
        summary.contains("schedule up to the first violation"),
        "{summary}"
    );
}
