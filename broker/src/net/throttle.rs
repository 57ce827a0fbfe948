//! The quota side of one request: whom it is metered as, the hold before
//! a connection reads it (while its principal owes), and the longest
//! throttle it earned (see [`super::quota`] for the buckets and the rule).

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::edge::Edge;
use super::quota::{Kind, Metered};
use crate::metadata::MetadataSnapshot;
use crate::metrics::ShardMetrics;

/// One request's metering.
#[derive(Debug, Default)]
pub struct Throttle {
    /// `None`: no quota applies (this broker's own calls, a broker of the
    /// cluster, a principal without a quota and no default). Else whom the
    /// request is metered as, and the buckets it is metered in.
    metered: Option<(Metered, Arc<Edge>)>,
    given: Cell<Duration>,
}

impl Throttle {
    /// Unmetered.
    #[must_use]
    pub fn none() -> Throttle {
        Throttle::default()
    }

    /// Metering for `principal` (`None`: not logged in) by the quotas of
    /// `metadata`, in the buckets of `edge`.
    #[must_use]
    pub fn of(metadata: &MetadataSnapshot, principal: Option<&str>, edge: &Arc<Edge>) -> Throttle {
        Throttle {
            metered: Metered::of(metadata.cluster.state.quotas(), principal)
                .map(|metered| (metered, edge.clone())),
            given: Cell::new(Duration::ZERO),
        }
    }

    /// Waits until the principal owes nothing (run up on any of its
    /// connections, on any shard): a connection reads no request of a
    /// principal in debt.
    pub async fn hold(&self) {
        let Some((metered, edge)) = &self.metered else {
            return;
        };
        loop {
            // Bound first: the lock must not be held across the sleep.
            let owed = edge.quotas().owed_until(metered, Instant::now());
            let Some(paid) = owed else {
                return;
            };
            glommio::timer::sleep(paid.saturating_duration_since(Instant::now())).await;
        }
    }

    /// Takes `used` units of `kind` from the principal's bucket (what the
    /// request used, known once it was served); the throttle that earns
    /// (zero within the quota), also kept as the request's if it is the
    /// longest so far.
    pub fn take(&self, metrics: &ShardMetrics, kind: Kind, used: f64) -> Duration {
        let Some((metered, edge)) = &self.metered else {
            return Duration::ZERO;
        };
        let throttle = edge.quotas().record(metered, kind, used, Instant::now());
        self.earned(metrics, metered, kind, throttle)
    }

    fn earned(
        &self,
        metrics: &ShardMetrics,
        metered: &Metered,
        kind: Kind,
        throttle: Duration,
    ) -> Duration {
        if !throttle.is_zero() {
            metrics.throttled(metered.entity.to_string(), kind.name(), throttle);
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
