//! Quota enforcement on one broker (the limits live in cluster metadata,
//! [`corelog_controller::quotas`]).
//!
//! Each principal has a token bucket per kind (produce bytes, fetch bytes,
//! request time) on the broker, shared by all its connections on every
//! shard (see [`super::edge`]), refilled at the quota's rate and holding at
//! most one second of it. A request-time share is of each shard's time, so
//! its bucket refills at the share times the number of shards.
//!
//! A connection of a principal that owes (any of its buckets in debt) reads
//! no further request until the debt is paid ([`QuotaTracker::owed_until`]),
//! whichever connection or shard ran it up: the throttle is the
//! principal's, not the connection's. A produce's bytes are taken as its
//! frame is read, before the next frame is ([`QuotaTracker::record`]), a
//! fetch's bytes and a request's handling time once known. So whatever a
//! principal does (a new connection per request, requests pipelined on
//! one, many connections on many shards), what it is served converges to
//! its quota: nothing more is read from it until its debt is paid. The
//! response says `throttle_ms` (Produce, Fetch), Kafka style, so that a
//! well-behaved client backs off by itself; responses are never delayed
//! (a client's request timeout must not fire for a throttle).
//!
//! Pure: callers hand in the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use corelog_controller::quotas::{QuotaEntity, QuotaLimits, Quotas, principal_limits};

/// Most buckets a broker keeps; beyond, idle ones are forgotten first.
const BUCKETS_MAX: usize = 10_000;
/// Longest throttle a response reports (and its connection is not read
/// for): a client that comes back earlier still waits at admission until
/// its principal's debt is paid.
pub const THROTTLE_MAX: Duration = Duration::from_secs(30);

/// What a bucket meters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Produce request bytes.
    Produce,
    /// Fetch response bytes.
    Fetch,
    /// Time spent handling requests (nanoseconds).
    RequestTime,
}

impl Kind {
    /// Its label in `/metrics`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Produce => "produce",
            Kind::Fetch => "fetch",
            Kind::RequestTime => "request_time",
        }
    }

    /// Units per second the limits grant on a broker of `shards` shards.
    fn rate(self, limits: &QuotaLimits, shards: u32) -> Option<f64> {
        match self {
            Kind::Produce => limits.produce_bytes_per_second.map(|rate| rate as f64),
            Kind::Fetch => limits.fetch_bytes_per_second.map(|rate| rate as f64),
            Kind::RequestTime => limits
                .request_percent
                .map(|percent| f64::from(percent) / 100.0 * 1e9 * f64::from(shards.max(1))),
        }
    }
}

#[derive(Debug)]
struct Bucket {
    /// Units available; negative: in debt.
    tokens: f64,
    refilled: Instant,
}

/// The quota buckets of one broker.
#[derive(Debug)]
pub struct QuotaTracker {
    buckets: HashMap<(String, Kind), Bucket>,
    /// The broker's shards (a request-time share is of each one's time).
    shards: u32,
}

/// Whom a request is metered as: the principal's name (`""` for a
/// connection that did not log in) and the entity whose limits apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metered {
    /// The bucket owner.
    pub principal: String,
    /// `user:NAME` or `user:*`: the `/metrics` label.
    pub entity: QuotaEntity,
    /// The limits.
    pub limits: QuotaLimits,
}

impl Metered {
    /// How `principal` is metered under `quotas`; `None`: no limit applies.
    #[must_use]
    pub fn of(quotas: &Quotas, principal: Option<&str>) -> Option<Metered> {
        let limits = principal_limits(quotas, principal)?;
        let own = principal.map(|name| QuotaEntity::User(name.to_owned()));
        let entity = match own {
            Some(entity) if quotas.contains_key(&entity) => entity,
            _ => QuotaEntity::DefaultUser,
        };
        Some(Metered {
            principal: principal.unwrap_or_default().to_owned(),
            entity,
            limits,
        })
    }
}

impl QuotaTracker {
    /// Buckets for a broker of `shards` shards.
    #[must_use]
    pub fn new(shards: u16) -> QuotaTracker {
        QuotaTracker {
            buckets: HashMap::new(),
            shards: u32::from(shards.max(1)),
        }
    }

    /// When the principal of `metered` will owe nothing at the rate its
    /// buckets refill; `None` when it owes nothing at `now`.
    pub fn owed_until(&mut self, metered: &Metered, now: Instant) -> Option<Instant> {
        [Kind::Produce, Kind::Fetch, Kind::RequestTime]
            .into_iter()
            .filter_map(|kind| {
                let rate = kind.rate(&metered.limits, self.shards)?;
                let bucket = self.refilled(&metered.principal, kind, rate, now);
                (bucket.tokens < 0.0).then(|| now + Duration::from_secs_f64(-bucket.tokens / rate))
            })
            .max()
    }

    /// Takes `used` units of `kind` from the principal's bucket at `now`
    /// (what a request used, known once it was served); how long to
    /// throttle its connection (zero when within its quota).
    pub fn record(&mut self, metered: &Metered, kind: Kind, used: f64, now: Instant) -> Duration {
        let Some(rate) = kind.rate(&metered.limits, self.shards) else {
            return Duration::ZERO;
        };
        let bucket = self.refilled(&metered.principal, kind, rate, now);
        bucket.tokens -= used;
        throttle_of(bucket.tokens, rate)
    }

    /// The principal's bucket of `kind`, refilled up to `now`.
    fn refilled(&mut self, principal: &str, kind: Kind, rate: f64, now: Instant) -> &mut Bucket {
        if self.buckets.len() >= BUCKETS_MAX {
            self.forget_idle(now);
        }
        let bucket = self
            .buckets
            .entry((principal.to_owned(), kind))
            .or_insert(Bucket {
                tokens: rate,
                refilled: now,
            });
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        // At most one second of quota saved up: a burst, not a hoard.
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        // Shards read their clocks apart: a bucket's time never goes back.
        bucket.refilled = bucket.refilled.max(now);
        bucket
    }

    /// Drops the buckets that are full again: their owners have been
    /// quiet for a second or more, and a new bucket starts full anyway.
    /// A bucket in debt is never forgotten (that would forgive it).
    fn forget_idle(&mut self, now: Instant) {
        self.buckets.retain(|_, bucket| {
            bucket.tokens < 0.0
                || now.saturating_duration_since(bucket.refilled) < Duration::from_secs(1)
        });
    }
}

/// The throttle a bucket holding `tokens` earns at `rate`: the time until
/// its debt is paid, reported up to [`THROTTLE_MAX`].
fn throttle_of(tokens: f64, rate: f64) -> Duration {
    if tokens >= 0.0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(-tokens / rate).min(THROTTLE_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(produce: u64) -> Metered {
        Metered {
            principal: "tenant-a".to_owned(),
            entity: QuotaEntity::User("tenant-a".to_owned()),
            limits: QuotaLimits {
                produce_bytes_per_second: Some(produce),
                ..QuotaLimits::default()
            },
        }
    }

    #[test]
    fn a_principal_over_its_rate_is_throttled_until_its_debt_is_paid() {
        let mut tracker = QuotaTracker::new(1);
        let start = Instant::now();
        let quota = metered(1_000);
        // One second of quota is there at once.
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 1_000.0, start),
            Duration::ZERO
        );
        // 500 bytes over: half a second.
        let throttle = tracker.record(&quota, Kind::Produce, 500.0, start);
        assert_eq!(throttle, Duration::from_millis(500));
        // Waiting it out pays the debt; the next 100 bytes are within.
        let later = start + Duration::from_millis(600);
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 100.0, later),
            Duration::ZERO
        );
        // No quota for fetches: never throttled.
        assert_eq!(
            tracker.record(&quota, Kind::Fetch, 1e12, later),
            Duration::ZERO
        );
    }

    /// A principal owes until its debt is paid, whatever kind ran it up,
    /// and whichever connection asks.
    #[test]
    fn a_principal_owes_until_its_debt_is_paid() {
        let mut tracker = QuotaTracker::new(1);
        let start = Instant::now();
        let quota = metered(1_000);
        assert_eq!(tracker.owed_until(&quota, start), None);
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 1_500.0, start),
            Duration::from_millis(500)
        );
        let paid = start + Duration::from_millis(500);
        assert_eq!(tracker.owed_until(&quota, start), Some(paid));
        assert_eq!(
            tracker.owed_until(&quota, start + Duration::from_millis(200)),
            Some(paid)
        );
        assert_eq!(tracker.owed_until(&quota, paid), None);
    }

    /// A client that reads nothing while it owes, and sends 100 KB
    /// requests as fast as it may otherwise (on new connections or
    /// pipelined: it never waits for its throttle_ms, only for what it
    /// owes), gets its quota.
    #[test]
    fn producing_ten_times_the_quota_converges_to_the_quota() {
        let mut tracker = QuotaTracker::new(1);
        let quota = metered(100_000);
        let mut now = Instant::now();
        let start = now;
        let mut sent = 0.0;
        while now.saturating_duration_since(start) < Duration::from_secs(60) {
            match tracker.owed_until(&quota, now) {
                None => {
                    sent += 100_000.0;
                    let _throttle = tracker.record(&quota, Kind::Produce, 100_000.0, now);
                    now += Duration::from_millis(10);
                }
                Some(paid) => now = paid,
            }
        }
        let rate = sent / now.saturating_duration_since(start).as_secs_f64();
        assert!((95_000.0..=105_000.0).contains(&rate), "{rate}");
    }

    /// Two shards reading one principal's produces side by side share its
    /// quota: together they get it, not twice it.
    #[test]
    fn shards_share_one_bucket_per_principal() {
        let shared = std::sync::Mutex::new(QuotaTracker::new(2));
        let quota = metered(100_000);
        let start = Instant::now();
        let sent: f64 = std::thread::scope(|scope| {
            let shards: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut now = start;
                        let mut sent = 0.0;
                        while now < start + Duration::from_secs(30) {
                            let mut tracker = shared.lock().unwrap();
                            match tracker.owed_until(&quota, now) {
                                None => {
                                    let _throttle =
                                        tracker.record(&quota, Kind::Produce, 10_000.0, now);
                                    sent += 10_000.0;
                                }
                                Some(paid) => now = paid,
                            }
                        }
                        sent
                    })
                })
                .collect();
            shards.into_iter().map(|shard| shard.join().unwrap()).sum()
        });
        // 30 s of quota, the first second's burst and a request of debt per shard.
        assert!(sent <= 3_100_000.0 + 20_000.0, "{sent}");
        assert!(sent >= 2_900_000.0, "{sent}");
    }

    #[test]
    fn a_request_time_share_is_of_each_shards_time() {
        let mut tracker = QuotaTracker::new(4);
        let now = Instant::now();
        let quota = Metered {
            limits: QuotaLimits {
                request_percent: Some(10),
                ..QuotaLimits::default()
            },
            ..metered(1)
        };
        // 10% of each of 4 shards' second: 400 ms of handling a second.
        let busy = |ms: u64| Duration::from_millis(ms).as_nanos() as f64;
        assert_eq!(
            tracker.record(&quota, Kind::RequestTime, busy(400), now),
            Duration::ZERO
        );
        assert_eq!(
            tracker.record(&quota, Kind::RequestTime, busy(200), now),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn the_metrics_label_is_the_entity_whose_limits_apply() {
        let mut quotas = Quotas::new();
        let limits = QuotaLimits {
            fetch_bytes_per_second: Some(1),
            ..QuotaLimits::default()
        };
        assert_eq!(Metered::of(&quotas, Some("alice")), None);
        quotas.insert(QuotaEntity::DefaultUser, limits);
        assert_eq!(
            Metered::of(&quotas, Some("alice")).unwrap().entity,
            QuotaEntity::DefaultUser
        );
        quotas.insert(QuotaEntity::User("alice".to_owned()), limits);
        assert_eq!(
            Metered::of(&quotas, Some("alice")).unwrap().entity,
            QuotaEntity::User("alice".to_owned())
        );
    }
}
