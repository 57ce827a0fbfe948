//! The quota side of one request: whom it is metered as, and the longest
//! throttle it earned (see [`super::quota`] for the buckets and the rule).

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::quota::{Kind, Metered};
use crate::metadata::MetadataSnapshot;
use crate::runtime::shard::Shard;

/// One request's metering.
#[derive(Debug, Default)]
pub struct Throttle {
    /// `None`: no quota applies (this broker's own calls, a broker of the
    /// cluster, a principal without a quota and no default).
    metered: Option<Metered>,
    given: Cell<Duration>,
}

impl Throttle {
    /// Unmetered.
    #[must_use]
    pub fn none() -> Throttle {
        Throttle::default()
    }

    /// Metering for `principal` (`None`: not logged in) by the quotas of
    /// `metadata`.
    #[must_use]
    pub fn of(metadata: &MetadataSnapshot, principal: Option<&str>) -> Throttle {
        Throttle {
            metered: Metered::of(metadata.cluster.state.quotas(), principal),
            given: Cell::new(Duration::ZERO),
        }
    }

    /// Takes `used` units of `kind` from the principal's bucket on this
    /// shard; the throttle that earns (zero within the quota), also kept
    /// as the request's if it is the longest so far.
    pub fn take(&self, shard: &Shard, kind: Kind, used: f64) -> Duration {
        let Some(metered) = &self.metered else {
            return Duration::ZERO;
        };
        let throttle = shard.quotas.borrow_mut().record(
            metered,
            kind,
            used,
            u32::from(shard.config.shards),
            Instant::now(),
        );
        if !throttle.is_zero() {
            shard
                .metrics
                .throttled(metered.entity.to_string(), kind.name(), throttle);
            self.given.set(self.given.get().max(throttle));
        }
        throttle
    }

    /// The longest throttle this request earned.
    #[must_use]
    pub fn given(&self) -> Duration {
        self.given.get()
    }

    /// Whether any quota applies.
    #[must_use]
    pub fn is_metered(&self) -> bool {
        self.metered.is_some()
    }
}

/// Milliseconds for a response's `throttle_ms` field.
#[must_use]
pub fn millis(throttle: Duration) -> u32 {
    u32::try_from(throttle.as_millis()).unwrap_or(u32::MAX)
}
