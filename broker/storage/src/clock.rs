//! Wall-clock time as an input. Storage decisions that depend on time
//! (segment age, retention) read it through [`Clock`], so tests can move time
//! forward instead of sleeping.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use corelog_wire::types::TimestampMs;

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock {
    /// The current time.
    fn now(&self) -> TimestampMs;
}

/// The system's real-time clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> TimestampMs {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        TimestampMs(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock that moves only when told to: for tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: Cell<i64>,
}

impl ManualClock {
    /// A clock reading `now`.
    #[must_use]
    pub fn new(now: TimestampMs) -> Self {
        ManualClock {
            now_ms: Cell::new(now.0),
        }
    }

    /// Moves the clock forward by `delta_ms`.
    pub fn advance(&self, delta_ms: i64) {
        self.now_ms.set(self.now_ms.get() + delta_ms);
    }

    /// Sets the clock.
    pub fn set(&self, now: TimestampMs) {
        self.now_ms.set(now.0);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> TimestampMs {
        TimestampMs(self.now_ms.get())
    }
}
