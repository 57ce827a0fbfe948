//! Rate limits for log lines that a loop or a client can repeat: a failure
//! that every request meets (a damaged segment, descriptors running out)
//! is logged once per interval with the count of lines left out, so that a
//! busy client cannot fill the disk with the broker's log.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One call site's limit: at most one line per interval. Shared by every
/// shard (atomics), so a `static` per call site.
#[derive(Debug)]
pub struct LogLimit {
    interval_ms: u64,
    /// Milliseconds since the process's first limited line at which the
    /// next line may be written.
    next_ms: AtomicU64,
    /// Lines left out since the last one written.
    suppressed: AtomicU64,
}

impl LogLimit {
    /// A limit of one line per `interval`.
    #[must_use]
    pub const fn every(interval: Duration) -> LogLimit {
        LogLimit {
            interval_ms: interval.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether to write this line now: `Some(n)` with the lines left out
    /// before it, `None` to leave it out.
    pub fn admit(&self) -> Option<u64> {
        let now = elapsed_ms();
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now + self.interval_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn elapsed_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_left_out() {
        let limit = LogLimit::every(Duration::from_secs(3600));
        assert_eq!(limit.admit(), Some(0));
        for _ in 0..5 {
            assert_eq!(limit.admit(), None);
        }
        // Due again: the next line carries the five left out.
        limit.next_ms.store(0, Ordering::Relaxed);
        assert_eq!(limit.admit(), Some(5));
    }
}
