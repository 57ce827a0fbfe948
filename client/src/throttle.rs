//! Quota throttles the brokers ask for: a response with `throttle_ms`
//! means "send me nothing more for that long" (the broker stops reading
//! the connection meanwhile anyway). The client waits it out per broker
//! shard and counts it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// What throttling cost a client so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThrottleStats {
    /// Responses that asked for a throttle.
    pub throttled_responses: u64,
    /// Their throttles, summed.
    pub throttle_time: Duration,
}

/// The throttles in force, by broker and shard.
#[derive(Debug, Default)]
pub(crate) struct Throttles {
    until: Mutex<HashMap<(u32, u16), Instant>>,
    responses: AtomicU64,
    millis: AtomicU64,
}

impl Throttles {
    /// Notes a response of `leader`'s `shard` that asked for `throttle_ms`.
    pub(crate) fn note(&self, leader: u32, shard: u16, throttle_ms: u32) {
        if throttle_ms == 0 {
            return;
        }
        self.responses.fetch_add(1, Ordering::Relaxed);
        self.millis
            .fetch_add(u64::from(throttle_ms), Ordering::Relaxed);
        let until = Instant::now() + Duration::from_millis(u64::from(throttle_ms));
        let mut throttles = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = throttles.entry((leader, shard)).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// Until when `leader`'s `shard` asked not to be sent to; `None` when
    /// it did not, or that time has passed.
    pub(crate) fn until(&self, leader: u32, shard: u16) -> Option<Instant> {
        let mut throttles = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match throttles.get(&(leader, shard)) {
            Some(until) if *until > Instant::now() => Some(*until),
            Some(_) => {
                throttles.remove(&(leader, shard));
                None
            }
            None => None,
        }
    }

    /// The counts so far.
    pub(crate) fn stats(&self) -> ThrottleStats {
        ThrottleStats {
            throttled_responses: self.responses.load(Ordering::Relaxed),
            throttle_time: Duration::from_millis(self.millis.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_throttle_holds_until_it_passes_and_is_counted() {
        let throttles = Throttles::default();
        throttles.note(1, 0, 0);
        assert_eq!(throttles.until(1, 0), None);
        throttles.note(1, 0, 250);
        throttles.note(1, 0, 100);
        let until = throttles.until(1, 0).unwrap();
        assert!(until >= Instant::now() + Duration::from_millis(250));
        assert_eq!(throttles.until(1, 1), None, "another shard is not held");
        tokio::time::advance(Duration::from_millis(251)).await;
        assert_eq!(throttles.until(1, 0), None);
        assert_eq!(
            throttles.stats(),
            ThrottleStats {
                throttled_responses: 2,
                throttle_time: Duration::from_millis(350),
            }
        );
    }
}
