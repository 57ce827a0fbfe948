//! What an accept loop does when `accept` fails. The usual cause is
//! `EMFILE`/`ENFILE` (no descriptor left): the pending connection stays in
//! the backlog, so an immediate retry fails again at once, and a loop that
//! retries and warns each time spins a core and fills the disk with log
//! (measured on the metrics port: 42 million lines, 5.25 GB in 60 s). So
//! each failure in a row doubles the pause before the next accept, from
//! [`AcceptBackoff::PAUSE_MIN`] to [`AcceptBackoff::PAUSE_MAX`], and the
//! warning is rate-limited ([`LogLimit`]). A successful accept starts over.
//!
//! Pure: callers hand in the time and do the sleeping and logging.

use std::time::{Duration, Instant};

use crate::log_limit::LogLimit;

/// One accept loop's failures in a row.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    failures: u32,
    log: LogLimit,
}

/// What to do after a failed accept.
#[derive(Debug, PartialEq, Eq)]
pub struct AfterFailure {
    /// How long to pause before the next accept.
    pub pause: Duration,
    /// Whether to log this failure, with how many were held back since
    /// the last one logged.
    pub log: Option<u64>,
}

impl AcceptBackoff {
    /// The pause after a first failure.
    pub const PAUSE_MIN: Duration = Duration::from_millis(10);
    /// The longest pause: a freed descriptor is used within a second.
    pub const PAUSE_MAX: Duration = Duration::from_secs(1);

    /// Notes a failed accept at `now`.
    pub fn failed(&mut self, now: Instant) -> AfterFailure {
        let doublings = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        AfterFailure {
            pause: Self::PAUSE_MIN
                .saturating_mul(1 << doublings)
                .min(Self::PAUSE_MAX),
            log: self.log.admit(now),
        }
    }

    /// Notes a successful accept: the next failure pauses briefly again.
    pub fn accepted(&mut self) {
        self.failures = 0;
    }
}

/// Whether an accept error means the process or the system is out of
/// descriptors (a resource to wait for, not a broken listener): the
/// storage engine's rule, one for the whole broker.
pub use corelog_storage::is_out_of_descriptors;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_pause_longer_up_to_a_second_and_log_once_per_interval() {
        let mut backoff = AcceptBackoff::default();
        let now = Instant::now();
        let first = backoff.failed(now);
        assert_eq!(first.pause, AcceptBackoff::PAUSE_MIN);
        assert_eq!(first.log, Some(0));
        let pauses: Vec<Duration> = (1..12).map(|_| backoff.failed(now).pause).collect();
        assert_eq!(pauses[0], AcceptBackoff::PAUSE_MIN * 2);
        assert!(
            pauses.windows(2).all(|pair| pair[0] <= pair[1]),
            "{pauses:?}"
        );
        assert_eq!(pauses[10], AcceptBackoff::PAUSE_MAX);
        // Eleven failures within the interval: none logged.
        assert_eq!(backoff.failed(now).log, None);
        let later = now + LogLimit::INTERVAL;
        assert_eq!(backoff.failed(later).log, Some(12));
        backoff.accepted();
        assert_eq!(backoff.failed(later).pause, AcceptBackoff::PAUSE_MIN);
    }

    #[test]
    fn emfile_and_enfile_are_running_out_of_descriptors() {
        assert!(is_out_of_descriptors(&std::io::Error::from_raw_os_error(
            24
        )));
        assert!(is_out_of_descriptors(&std::io::Error::from_raw_os_error(
            23
        )));
        assert!(!is_out_of_descriptors(&std::io::Error::from_raw_os_error(
            104
        )));
    }
}
