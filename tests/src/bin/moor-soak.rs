//! `moor-soak`: the seeded chaos soak (see `moor_e2e::soak`).
//!
//! `moor-soak [--seed N] [--secs S] [--store sqlite|postgres] [--no-pg-restart] [--token-bridge] [--inject-bug swap-entries] [--print-schedule]`
//!
//! Runs real `moord` and `moor` processes from the target dir under faults drawn from the seed
//! (random and printed when not given), then checks every invariant. Prints the summary; exits 1
//! on a violation (the seed and the schedule up to it are printed), 2 on bad arguments.

use std::process::ExitCode;
use std::time::Duration;

use moor_e2e::soak::{self, Plan, SoakConfig, Store};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("moor-soak: {e}");
            eprintln!("usage: moor-soak [--seed N] [--secs S] [--store sqlite|postgres] [--no-pg-restart] [--token-bridge] [--inject-bug swap-entries] [--print-schedule]");
            return ExitCode::from(2);
        }
    };
    if args.iter().any(|a| a == "--print-schedule") {
        let plan = Plan {
            nodes: if cfg.store == Store::Postgres { 2 } else { 1 },
            bridges: if cfg.token_bridge { 5 } else { 4 },
            killable: vec![1, 2],
            postgres: cfg.store == Store::Postgres,
            pg_restart: cfg.store == Store::Postgres && cfg.pg_restart,
        };
        for step in soak::schedule(cfg.seed, cfg.duration, &plan) {
            println!("@{:>6} {:?}", step.at_ms, step.fault);
        }
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "moor-soak: seed {} for {:?} on {:?}",
        cfg.seed, cfg.duration, cfg.store
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(soak::run(cfg)) {
        Ok(report) => {
            println!("{}", report.summary());
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("moor-soak: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn parse(args: &[String]) -> Result<SoakConfig, String> {
    let value = |name: &str| -> Result<Option<&String>, String> {
        match args.iter().position(|a| a == name) {
            None => Ok(None),
            Some(i) => args
                .get(i + 1)
                .map(Some)
                .ok_or_else(|| format!("{name} needs a value")),
        }
    };
    let seed = match value("--seed")? {
        Some(s) => s.parse().map_err(|_| format!("bad --seed {s:?}"))?,
        None => rand::random(),
    };
    let secs: u64 = match value("--secs")? {
        Some(s) => s.parse().map_err(|_| format!("bad --secs {s:?}"))?,
        None => 120,
    };
    let store = match value("--store")? {
        Some(s) => s.parse()?,
        None => Store::Sqlite,
    };
    Ok(SoakConfig {
        seed,
        duration: Duration::from_secs(secs),
        store,
        pg_restart: !args.iter().any(|a| a == "--no-pg-restart"),
        inject_bug: value("--inject-bug")?.cloned(),
        token_bridge: args.iter().any(|a| a == "--token-bridge"),
    })
}
