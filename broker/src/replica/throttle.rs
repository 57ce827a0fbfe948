//! The byte rate a leader copies to one learner at most (a reassignment's
//! `--throttle`), so that a new replica catching up does not take the disk
//! and network from the partition's producers.
//!
//! Pure: time comes in as milliseconds. A push carries at least one whole
//! batch, so it may overdraw; the debt is paid back before the next push
//! carries any, which keeps the average at the rate.

/// A token bucket in bytes, allowed to go into debt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRate {
    bytes_per_s: u64,
    /// Bytes that may be sent now; negative after an overdraft.
    balance: i64,
    last_ms: u64,
}

impl ByteRate {
    /// A limit of `bytes_per_s` (above 0), starting with a full burst at
    /// `now_ms`.
    #[must_use]
    pub fn new(bytes_per_s: u64, now_ms: u64) -> ByteRate {
        assert!(bytes_per_s > 0, "a byte rate of 0 limits nothing");
        let mut rate = ByteRate {
            bytes_per_s,
            balance: 0,
            last_ms: now_ms,
        };
        rate.balance = rate.burst();
        rate
    }

    /// The limit.
    #[must_use]
    pub fn bytes_per_s(&self) -> u64 {
        self.bytes_per_s
    }

    /// Bytes a push may carry at `now_ms`: 0 while the last overdraft is
    /// not paid back.
    pub fn allowance(&mut self, now_ms: u64) -> u64 {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        let earned = u128::from(self.bytes_per_s) * u128::from(elapsed) / 1000;
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        self.balance = self.balance.saturating_add(earned).min(self.burst());
        u64::try_from(self.balance).unwrap_or(0)
    }

    /// A push carried `bytes`.
    pub fn charge(&mut self, bytes: u64) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.balance = self.balance.saturating_sub(bytes);
    }

    /// At most a tenth of a second's worth saved up.
    fn burst(&self) -> i64 {
        i64::try_from((self.bytes_per_s / 10).max(1)).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_stays_at_the_rate_whatever_the_batch_sizes() {
        // 1 MB/s, pushes polled every 5 ms, each carrying a 300 KB batch
        // whenever any allowance is left (a batch may overdraw).
        let mut rate = ByteRate::new(1_000_000, 0);
        let mut sent = 0u64;
        for step in 0..2_000u64 {
            let now = step * 5;
            if rate.allowance(now) > 0 {
                rate.charge(300_000);
                sent += 300_000;
            }
        }
        // 10 s at 1 MB/s, within a batch and the first burst.
        assert!(
            (10_000_000..=10_000_000 + 300_000 + 100_000).contains(&sent),
            "{sent}"
        );
    }

    #[test]
    fn idle_time_saves_up_only_a_tenth_of_a_second() {
        let mut rate = ByteRate::new(1_000_000, 0);
        assert_eq!(rate.allowance(0), 100_000);
        rate.charge(100_000);
        assert_eq!(
            rate.allowance(60_000),
            100_000,
            "a minute idle is no licence"
        );
        rate.charge(250_000);
        assert_eq!(
            rate.allowance(60_100),
            0,
            "the overdraft is paid back first"
        );
        assert_eq!(rate.allowance(60_250), 100_000);
        // A clock that goes back earns nothing.
        rate.charge(100_000);
        assert_eq!(rate.allowance(60_000), 0);
    }
}
