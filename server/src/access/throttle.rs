//! The login throttle: password guesses are counted *before* the password is checked, per user
//! name and per client address, so concurrent guesses cannot slip past it. A name admits one
//! guess at a time, an address a few (people behind one NAT log in at once); the first failure is free (a typo), and after `n ≥ 2` consecutive failures
//! it waits `min(base·2ⁿ⁻², max)` before the next. A stranger guessing a name therefore only ever delays its owner by at most the
//! (short) cap on names: there is no hard lock to trip.
//!
//! Plain data on the tokio clock (tests run it on paused time); calls nothing in the crate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Most keys remembered; beyond it, keys with nothing pending are forgotten first.
const MAX_KEYS: usize = 100_000;

/// How a throttled key backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the second failure in a row (doubling with each further one).
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
    /// Guesses admitted at once.
    pub at_once: u32,
}

impl Backoff {
    fn after(&self, failures: u32) -> Duration {
        if failures <= 1 {
            return Duration::ZERO;
        }
        let factor = 1u32 << (failures - 2).min(20);
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// The wait on names: short, since anyone can make a name wait.
pub const NAME_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(10),
    at_once: 1,
};
/// The wait on client addresses: an address only ever delays itself.
pub const ADDRESS_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(60),
    at_once: 4,
};

#[derive(Debug, Clone, Copy)]
struct KeyState {
    failures: u32,
    /// No guess is admitted before this.
    not_before: Instant,
    /// Guesses holding a slot of this key (their passwords are being checked).
    busy: u32,
}

/// Keys (a kind and a value) and their state.
#[derive(Debug, Clone, Default)]
pub struct LoginThrottle {
    keys: Arc<Mutex<HashMap<String, KeyState>>>,
}

/// One admitted guess, holding the slot of each of its keys until it is settled. Dropped
/// unsettled (the request went away mid-check), it counts as a failure.
#[derive(Debug)]
pub struct Attempt {
    throttle: LoginThrottle,
    keys: Vec<(String, Backoff)>,
    settled: bool,
}

impl LoginThrottle {
    /// Admits a guess under every one of `keys` at once, or none: `Err(seconds to wait)` while
    /// any of them has all its slots taken or is still backing off.
    pub fn begin(&self, keys: &[(String, Backoff)]) -> Result<Attempt, u64> {
        let now = Instant::now();
        let mut map = self.lock();
        let mut wait = Duration::ZERO;
        for (key, backoff) in keys {
            if let Some(s) = map.get(key) {
                let left = s.not_before.saturating_duration_since(now);
                // Guesses in flight: the next one may come once one is settled, soon.
                let left = if s.busy >= backoff.at_once {
                    left.max(Duration::from_secs(1))
                } else {
                    left
                };
                wait = wait.max(left);
            }
        }
        if !wait.is_zero() {
            return Err(wait.as_secs_f64().ceil().max(1.0) as u64);
        }
        if map.len() + keys.len() > MAX_KEYS {
            map.retain(|_, s| s.busy > 0 || s.not_before > now);
        }
        for (key, _) in keys {
            let s = map.entry(key.clone()).or_insert(KeyState {
                failures: 0,
                not_before: now,
                busy: 0,
            });
            s.busy += 1;
        }
        Ok(Attempt {
            throttle: self.clone(),
            keys: keys.to_vec(),
            settled: false,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyState>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Attempt {
    /// The guess was right: its keys start afresh.
    pub fn succeeded(mut self) {
        self.settled = true;
        let now = Instant::now();
        let mut map = self.throttle.lock();
        for (key, _) in &self.keys {
            if let Some(s) = map.get_mut(key) {
                s.busy = s.busy.saturating_sub(1);
                s.failures = 0;
                s.not_before = now;
                if s.busy == 0 {
                    map.remove(key);
                }
            }
        }
    }

    /// The guess was wrong: each key backs off further.
    pub fn failed(mut self) {
        self.settled = true;
        self.fail();
    }

    fn fail(&self) {
        let now = Instant::now();
        let mut map = self.throttle.lock();
        for (key, backoff) in &self.keys {
            if let Some(s) = map.get_mut(key) {
                s.failures = s.failures.saturating_add(1);
                s.not_before = now + backoff.after(s.failures);
                s.busy = s.busy.saturating_sub(1);
            }
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.settled {
            self.fail();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<(String, Backoff)> {
        vec![
            ("name:ann".to_owned(), NAME_BACKOFF),
            ("addr:10.0.0.1".to_owned(), ADDRESS_BACKOFF),
        ]
    }

    #[test]
    fn waits_double_from_the_base_up_to_the_cap() {
        let b = NAME_BACKOFF;
        let waits: Vec<u64> = (0..8).map(|n| b.after(n).as_millis() as u64).collect();
        assert_eq!(waits, [0, 0, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(b.after(u32::MAX), b.max);
    }

    #[tokio::test(start_paused = true)]
    async fn one_guess_at_a_time_per_key_counted_before_it_is_checked() {
        // arrange
        let t = LoginThrottle::default();
        // act
        let first = t.begin(&keys()).unwrap();
        let concurrent: Vec<_> = (0..63).map(|_| t.begin(&keys())).collect();
        // assert
        assert!(concurrent.iter().all(|r| r.is_err()));
        first.failed();
        t.begin(&keys()).unwrap().failed();
        assert!(
            t.begin(&keys()).is_err(),
            "backing off after a second failure"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_never_lock_for_longer_than_the_cap() {
        // arrange
        let t = LoginThrottle::default();
        let name_only = vec![("name:ann".to_owned(), NAME_BACKOFF)];
        // act: a stranger guesses as fast as allowed, many times
        for n in 1..=12u32 {
            t.begin(&name_only).unwrap().failed();
            let wait = NAME_BACKOFF.after(n);
            if !wait.is_zero() {
                tokio::time::advance(wait - Duration::from_millis(1)).await;
                assert!(t.begin(&name_only).is_err(), "admitted early after {n}");
                tokio::time::advance(Duration::from_millis(1)).await;
            }
        }
        // assert: the owner gets a guess within the cap, and a right one clears the key
        t.begin(&name_only).unwrap().succeeded();
        t.begin(&name_only).unwrap().succeeded();
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_guess_counts_as_a_failure() {
        let t = LoginThrottle::default();
        drop(t.begin(&keys()).unwrap());
        drop(t.begin(&keys()).unwrap());
        assert!(t.begin(&keys()).is_err());
        tokio::time::advance(NAME_BACKOFF.base).await;
        assert!(t.begin(&keys()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_admits_a_few_guesses_at_other_names_at_once_then_none() {
        let t = LoginThrottle::default();
        let guess = |name: &str| {
            t.begin(&[
                (format!("name:{name}"), NAME_BACKOFF),
                ("addr:10.0.0.1".to_owned(), ADDRESS_BACKOFF),
            ])
        };
        let held: Vec<_> = ["ann", "bob", "cy", "di"]
            .into_iter()
            .map(|n| guess(n).unwrap())
            .collect();
        assert!(guess("ed").is_err());
        // ...and a refused guess took no slot of ed's.
        assert!(t.begin(&[("name:ed".to_owned(), NAME_BACKOFF)]).is_ok());
        drop(held);
    }
}
