//! Quota enforcement on one shard (the limits live in cluster metadata,
//! [`corelog_controller::quotas`]).
//!
//! Each principal has a token bucket per kind (produce bytes, fetch bytes,
//! request time) on each shard, refilled at the quota's rate divided by
//! the number of shards (a request-time share is of each shard's own time,
//! so it is not divided) and holding at most one second of it. A request
//! takes what it used; a bucket in debt throttles the connection, Kafka
//! style: the response says `throttle_ms` (Produce, Fetch) and the broker
//! reads nothing more from that connection for as long, so the principal's
//! rate converges to its quota while nothing is ever dropped.
//!
//! Connection counts are kept per principal and per source address on each
//! shard against the limit divided by the number of shards (rounded up).
//!
//! Pure: callers hand in the time.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use corelog_controller::quotas::{QuotaEntity, QuotaLimits, Quotas, principal_limits};

/// Most buckets a shard keeps; beyond, idle ones are forgotten first.
const BUCKETS_MAX: usize = 10_000;
/// Longest throttle given for one request, so that a misconfigured tiny
/// quota cannot park a connection for hours.
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

    /// Units per second the limits grant on one of `shards` shards.
    fn rate(self, limits: &QuotaLimits, shards: u32) -> Option<f64> {
        let shards = f64::from(shards.max(1));
        match self {
            Kind::Produce => limits
                .produce_bytes_per_second
                .map(|rate| rate as f64 / shards),
            Kind::Fetch => limits
                .fetch_bytes_per_second
                .map(|rate| rate as f64 / shards),
            Kind::RequestTime => limits
                .request_percent
                .map(|percent| f64::from(percent) / 100.0 * 1e9),
        }
    }
}

#[derive(Debug)]
struct Bucket {
    /// Units available; negative: in debt.
    tokens: f64,
    refilled: Instant,
}

/// The quota state of one shard.
#[derive(Debug, Default)]
pub struct QuotaTracker {
    buckets: HashMap<(String, Kind), Bucket>,
    by_principal: HashMap<String, u32>,
    by_address: HashMap<IpAddr, u32>,
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
    /// Takes `used` units of `kind` from the principal's bucket on this
    /// shard (one of `shards`) at `now`; how long to throttle its
    /// connection (zero when within its quota).
    pub fn record(
        &mut self,
        metered: &Metered,
        kind: Kind,
        used: f64,
        shards: u32,
        now: Instant,
    ) -> Duration {
        let Some(rate) = kind.rate(&metered.limits, shards) else {
            return Duration::ZERO;
        };
        if self.buckets.len() >= BUCKETS_MAX {
            self.forget_idle(now);
        }
        let bucket = self
            .buckets
            .entry((metered.principal.clone(), kind))
            .or_insert(Bucket {
                tokens: rate,
                refilled: now,
            });
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        // At most one second of quota saved up: a burst, not a hoard.
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.refilled = now;
        bucket.tokens -= used;
        if bucket.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-bucket.tokens / rate).min(THROTTLE_MAX)
    }

    /// Drops the buckets that are full again: their owners have been
    /// quiet for a second or more, and a new bucket starts full anyway.
    fn forget_idle(&mut self, now: Instant) {
        self.buckets.retain(|_, bucket| {
            now.saturating_duration_since(bucket.refilled) < Duration::from_secs(1)
        });
    }

    /// Counts a connection from `address`, unless the address is at its
    /// connection limit (split over `shards`).
    ///
    /// # Errors
    /// The entity at its limit (`ip:ADDRESS`).
    pub fn open_from(
        &mut self,
        quotas: &Quotas,
        address: IpAddr,
        shards: u32,
    ) -> Result<(), String> {
        let open = self.by_address.get(&address).copied().unwrap_or(0);
        if let Some(limit) = corelog_controller::quotas::address_connections(quotas, address)
            && open >= per_shard(limit, shards)
        {
            return Err(format!("ip:{address}"));
        }
        *self.by_address.entry(address).or_insert(0) += 1;
        Ok(())
    }

    /// Uncounts a connection counted by [`QuotaTracker::open_from`].
    pub fn close_from(&mut self, address: IpAddr) {
        decrement(&mut self.by_address, &address);
    }

    /// Counts a connection that logged in as `principal`, unless the
    /// principal is at its connection limit (split over `shards`).
    ///
    /// # Errors
    /// The entity at its limit (`user:NAME` or `user:*`).
    pub fn open_as(&mut self, quotas: &Quotas, principal: &str, shards: u32) -> Result<(), String> {
        let open = self.by_principal.get(principal).copied().unwrap_or(0);
        if let Some(limit) = principal_limits(quotas, Some(principal)).and_then(|l| l.connections)
            && open >= per_shard(limit, shards)
        {
            return Err(format!("user:{principal}"));
        }
        *self.by_principal.entry(principal.to_owned()).or_insert(0) += 1;
        Ok(())
    }

    /// Uncounts a connection counted by [`QuotaTracker::open_as`].
    pub fn close_as(&mut self, principal: &str) {
        decrement(&mut self.by_principal, principal);
    }
}

fn per_shard(limit: u32, shards: u32) -> u32 {
    limit.div_ceil(shards.max(1))
}

fn decrement<K, Q>(counts: &mut HashMap<K, u32>, key: &Q)
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(count) = counts.get_mut(key) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(key);
        }
    }
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
        let mut tracker = QuotaTracker::default();
        let start = Instant::now();
        let quota = metered(1_000);
        // One second of quota is there at once.
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 1_000.0, 1, start),
            Duration::ZERO
        );
        // 500 bytes over: half a second.
        let throttle = tracker.record(&quota, Kind::Produce, 500.0, 1, start);
        assert_eq!(throttle, Duration::from_millis(500));
        // Waiting it out pays the debt; the next 100 bytes are within.
        let later = start + Duration::from_millis(600);
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 100.0, 1, later),
            Duration::ZERO
        );
        // No quota for fetches: never throttled.
        assert_eq!(
            tracker.record(&quota, Kind::Fetch, 1e12, 1, later),
            Duration::ZERO
        );
    }

    #[test]
    fn producing_ten_times_the_quota_converges_to_the_quota() {
        let mut tracker = QuotaTracker::default();
        let quota = metered(100_000);
        let mut now = Instant::now();
        let start = now;
        let mut sent = 0.0;
        // A client that sends 100 KB requests as fast as it is allowed to.
        while now.saturating_duration_since(start) < Duration::from_secs(60) {
            sent += 100_000.0;
            let throttle = tracker.record(&quota, Kind::Produce, 100_000.0, 1, now);
            now += throttle.max(Duration::from_millis(100));
        }
        let rate = sent / now.saturating_duration_since(start).as_secs_f64();
        assert!((95_000.0..=105_000.0).contains(&rate), "{rate}");
    }

    #[test]
    fn a_request_time_share_is_of_each_shards_own_time() {
        let mut tracker = QuotaTracker::default();
        let now = Instant::now();
        let quota = Metered {
            limits: QuotaLimits {
                request_percent: Some(10),
                ..QuotaLimits::default()
            },
            ..metered(1)
        };
        // 10% of a second is 100 ms of handling a second, on every shard.
        let busy = |ms: u64| Duration::from_millis(ms).as_nanos() as f64;
        assert_eq!(
            tracker.record(&quota, Kind::RequestTime, busy(100), 4, now),
            Duration::ZERO
        );
        assert_eq!(
            tracker.record(&quota, Kind::RequestTime, busy(50), 4, now),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn rates_are_split_over_the_shards() {
        let mut tracker = QuotaTracker::default();
        let now = Instant::now();
        let quota = metered(4_000);
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 1_000.0, 4, now),
            Duration::ZERO
        );
        assert_eq!(
            tracker.record(&quota, Kind::Produce, 1_000.0, 4, now),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn connections_are_limited_per_principal_and_per_address() {
        let mut quotas = Quotas::new();
        quotas.insert(
            QuotaEntity::User("alice".to_owned()),
            QuotaLimits {
                connections: Some(2),
                ..QuotaLimits::default()
            },
        );
        quotas.insert(
            QuotaEntity::DefaultIp,
            QuotaLimits {
                connections: Some(3),
                ..QuotaLimits::default()
            },
        );
        let mut tracker = QuotaTracker::default();
        let here: IpAddr = "10.0.0.1".parse().unwrap();
        let there: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..2 {
            tracker.open_as(&quotas, "alice", 1).unwrap();
        }
        assert_eq!(
            tracker.open_as(&quotas, "alice", 1),
            Err("user:alice".to_owned())
        );
        tracker.open_as(&quotas, "bob", 1).unwrap();
        tracker.close_as("alice");
        tracker.open_as(&quotas, "alice", 1).unwrap();
        for _ in 0..3 {
            tracker.open_from(&quotas, here, 1).unwrap();
        }
        assert_eq!(
            tracker.open_from(&quotas, here, 1),
            Err("ip:10.0.0.1".to_owned())
        );
        tracker.open_from(&quotas, there, 1).unwrap();
        tracker.close_from(here);
        tracker.open_from(&quotas, here, 1).unwrap();
        // Two shards: each holds half (rounded up) of a limit.
        let mut other_shard = QuotaTracker::default();
        for _ in 0..2 {
            other_shard.open_from(&quotas, here, 2).unwrap();
        }
        assert!(other_shard.open_from(&quotas, here, 2).is_err());
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
