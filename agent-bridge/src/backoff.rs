//! Capped, jittered exponential backoff for reconnecting to `moord`.
//!
//! Pure: the random source is injected and time enters only as "how long the last connection
//! lived", so every property is unit-testable without sleeping.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

/// Backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Ceiling of the first delay.
    pub initial: Duration,
    /// The ceiling doubles per failed attempt up to this.
    pub max: Duration,
    /// A connection that lived at least this long resets the backoff.
    pub stable_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            stable_after: Duration::from_secs(10),
        }
    }
}

/// Reconnect delays: attempt `n` waits a random time in `[c/2, c]` where
/// `c = min(max, initial * 2^(n-1))`. The random half keeps many bridges that lost the same
/// server from reconnecting in lockstep; the fixed half keeps one bridge from hammering it.
#[derive(Debug)]
pub struct Backoff<R = StdRng> {
    config: BackoffConfig,
    attempt: u32,
    rng: R,
}

impl Backoff<StdRng> {
    /// Backoff seeded from the OS.
    pub fn new(config: BackoffConfig) -> Self {
        Self::with_rng(config, StdRng::from_entropy())
    }
}

impl<R: RngCore> Backoff<R> {
    /// Backoff with an injected random source (tests).
    pub fn with_rng(config: BackoffConfig, rng: R) -> Self {
        Self {
            config,
            attempt: 0,
            rng,
        }
    }

    /// Failed attempts since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Forget past failures: the next delay starts from `initial` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Account for a connection that was up for `lived` (`None`: it never got welcomed).
    /// A stable connection resets the backoff, so an outage after a long healthy link retries
    /// quickly, while a server that accepts and drops at once keeps the delays growing.
    pub fn connection_ended(&mut self, lived: Option<Duration>) {
        if lived.is_some_and(|lived| lived >= self.config.stable_after) {
            self.reset();
        }
    }

    /// The ceiling for the next attempt, before jitter.
    pub fn ceiling(&self) -> Duration {
        let initial = self.config.initial.max(Duration::from_millis(1));
        let max = self.config.max.max(initial);
        // 2^20 × initial is past any sane max; capping the exponent avoids overflow.
        let factor = 1u32 << self.attempt.min(20);
        initial.saturating_mul(factor).min(max)
    }

    /// The delay before the next attempt; counts the attempt.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let ceiling_ns = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        let floor_ns = ceiling_ns / 2;
        Duration::from_nanos(self.rng.gen_range(floor_ns..=ceiling_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(initial_ms: u64, max_ms: u64) -> BackoffConfig {
        BackoffConfig {
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
            stable_after: Duration::from_secs(10),
        }
    }

    #[test]
    fn delays_double_up_to_the_cap_and_stay_within_jitter_bounds() {
        for seed in 0..50 {
            let mut backoff = Backoff::with_rng(config(100, 1000), StdRng::seed_from_u64(seed));
            let ceilings = [100, 200, 400, 800, 1000, 1000, 1000];
            for ceiling in ceilings {
                let ceiling = Duration::from_millis(ceiling);
                let delay = backoff.next_delay();
                assert!(
                    delay >= ceiling / 2 && delay <= ceiling,
                    "{delay:?} vs {ceiling:?}"
                );
            }
        }
    }

    #[test]
    fn jitter_actually_varies() {
        let mut backoff = Backoff::with_rng(config(1000, 1000), StdRng::seed_from_u64(7));
        let delays: std::collections::HashSet<_> = (0..20).map(|_| backoff.next_delay()).collect();
        assert!(delays.len() > 10, "{delays:?}");
    }

    #[test]
    fn reset_starts_again_from_initial() {
        let mut backoff = Backoff::with_rng(config(100, 10_000), StdRng::seed_from_u64(1));
        for _ in 0..5 {
            backoff.next_delay();
        }
        assert_eq!(backoff.ceiling(), Duration::from_millis(3200));
        backoff.reset();
        assert_eq!(backoff.attempt(), 0);
        assert!(backoff.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn only_a_stable_connection_resets() {
        let mut backoff = Backoff::with_rng(config(100, 10_000), StdRng::seed_from_u64(2));
        for _ in 0..3 {
            backoff.next_delay();
        }
        backoff.connection_ended(None);
        backoff.connection_ended(Some(Duration::from_secs(9)));
        assert_eq!(backoff.attempt(), 3);
        backoff.connection_ended(Some(Duration::from_secs(10)));
        assert_eq!(backoff.attempt(), 0);
    }

    #[test]
    fn many_attempts_do_not_overflow() {
        let mut backoff = Backoff::with_rng(config(1, u64::MAX / 4), StdRng::seed_from_u64(3));
        for _ in 0..200 {
            backoff.next_delay();
        }
        assert!(backoff.ceiling() >= Duration::from_secs(1));
    }

    #[test]
    fn zero_and_inverted_bounds_are_tolerated() {
        let mut backoff = Backoff::with_rng(config(0, 0), StdRng::seed_from_u64(4));
        assert!(backoff.next_delay() <= Duration::from_millis(1));
        let backoff = Backoff::with_rng(config(500, 100), StdRng::seed_from_u64(5));
        assert_eq!(backoff.ceiling(), Duration::from_millis(500));
    }
}
