//! Rate limits for log lines that a client can make the broker write in a
//! loop (failed accepts, failed logins, refused requests, storage failures
//! answered to every fetch): at most one line per interval for each kind,
//! and the next line says how many were held back, so that a flood costs a
//! few lines instead of gigabytes of log.
//!
//! Pure: callers hand in the time. A limit is per shard (a `thread_local`
//! of the call site), so a broker writes at most one such line per
//! interval and shard.

use std::time::{Duration, Instant};

/// One kind of log line's limit.
#[derive(Debug)]
pub struct LogLimit {
    interval: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl LogLimit {
    /// The interval of lines about the same client-driven event.
    pub const INTERVAL: Duration = Duration::from_secs(10);

    /// A limit of one line per `interval`.
    #[must_use]
    pub const fn new(interval: Duration) -> LogLimit {
        LogLimit {
            interval,
            last: None,
            held_back: 0,
        }
    }

    /// Whether a line may be written at `now`: `Some(held back)`, the
    /// number of lines held back since the last one written, or `None`
    /// (this one is held back and counted).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                self.held_back = self.held_back.saturating_add(1);
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

impl Default for LogLimit {
    fn default() -> LogLimit {
        LogLimit::new(LogLimit::INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_next_counts_those_held_back() {
        let mut limit = LogLimit::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(limit.admit(start), Some(0));
        for millis in 1..1000 {
            assert_eq!(limit.admit(start + Duration::from_millis(millis)), None);
        }
        assert_eq!(limit.admit(start + Duration::from_secs(10)), Some(999));
        assert_eq!(limit.admit(start + Duration::from_secs(11)), None);
        assert_eq!(limit.admit(start + Duration::from_secs(30)), Some(1));
    }
}
