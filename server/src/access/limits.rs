//! Rate limits kept across requests: token buckets per verified principal (or client address),
//! for wrong setup codes, and the login throttle (`access::throttle`). Plain data; the HTTP
//! layer decides which key a request is counted under.
//!
//! Calls only `config` and `access::throttle`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::throttle::LoginThrottle;
use crate::config::ServerConfig;

/// Most buckets kept; beyond it, full (idle) buckets are dropped first.
const MAX_BUCKETS: usize = 100_000;

/// Token buckets by key (credential hash or client address).
#[derive(Debug, Clone)]
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    buckets: Arc<Mutex<HashMap<String, (f64, Instant)>>>,
}

impl RateLimiter {
    /// `per_sec` requests a second on average, bursts of up to `burst`.
    pub fn new(per_sec: f64, burst: f64) -> Self {
        Self {
            per_sec: per_sec.max(0.001),
            burst: burst.max(1.0),
            buckets: Arc::default(),
        }
    }

    /// Takes one request from `key`'s bucket; `Err(seconds to wait)` when it is empty.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(key) {
            let (per_sec, burst) = (self.per_sec, self.burst);
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() * per_sec < burst
            });
        }
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_sec).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / self.per_sec).ceil().max(1.0) as u64)
        }
    }

    /// Forgets `key` (a successful login clears its failures).
    pub fn clear(&self, key: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Whether `key` has a request left, without taking one.
    pub fn peek(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        match buckets.get(key) {
            Some((tokens, at)) => {
                let t =
                    (tokens + now.duration_since(*at).as_secs_f64() * self.per_sec).min(self.burst);
                if t >= 1.0 {
                    Ok(())
                } else {
                    Err(((1.0 - t) / self.per_sec).ceil().max(1.0) as u64)
                }
            }
            None => Ok(()),
        }
    }
}

/// Limits kept across requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Requests per verified principal (or per client address without one).
    pub requests: RateLimiter,
    /// Password guesses per client address and per user name.
    pub logins: LoginThrottle,
    /// Wrong first-start setup codes per client address.
    pub setup: RateLimiter,
}

impl Limits {
    /// Limits from the configuration.
    pub fn new(cfg: &ServerConfig) -> Self {
        Self {
            requests: RateLimiter::new(cfg.rate_limit_per_sec, cfg.rate_limit_burst),
            logins: LoginThrottle::default(),
            // Five tries, then one every 12 s.
            setup: RateLimiter::new(1.0 / 12.0, 5.0),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::new(&ServerConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_bucket_empties_and_says_how_long_to_wait() {
        let r = RateLimiter::new(0.5, 2.0);
        assert!(r.check("a").is_ok());
        assert!(r.check("a").is_ok());
        assert_eq!(r.check("a"), Err(2));
        assert!(r.check("b").is_ok());
        r.clear("a");
        assert!(r.check("a").is_ok());
    }

    #[test]
    fn elapsed_time_refills() {
        let r = RateLimiter::new(1000.0, 1.0);
        assert!(r.check("a").is_ok());
        let t0 = Instant::now();
        // At 1000/s a token is back within a few ms; the bound only stops a broken refill from
        // spinning forever.
        while r.check("a").is_err() {
            assert!(t0.elapsed() < Duration::from_secs(60), "no token came back");
            std::thread::yield_now();
        }
    }
}
