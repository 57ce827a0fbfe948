//! What every shard's client connections share: the broker's edge.
//!
//! Shards share nothing on the data path, but a limit that each shard
//! keeps for itself is not a limit: a tenant spreads its connections (the
//! kernel does it for it, SO_REUSEPORT hashes each connection to a shard)
//! and gets a share of every shard. So the connection counts, the quota
//! buckets and the failed-login ledger are one per broker, each behind its
//! own `std::sync::Mutex`, taken for a few hundred nanoseconds with no
//! `await` inside:
//!
//! - connection counts: once when a connection is accepted, once when it
//!   logs in, once when it closes;
//! - quota buckets: two or three times per request of a principal that
//!   has a quota (before its frame is read, and as what it used is
//!   known); a request of a principal without one never takes the lock;
//! - failed logins: once per `Authenticate` step.
//!
//! Chosen over shard 0 owning this state behind cross-shard messages: a
//! message per request and per accept would cost more than the lock, and
//! a shard 0 busy with its own partitions would delay every other shard's
//! admissions. Chosen over per-shard shares rebalanced now and then
//! (Redpanda's quota balancer): exact, and far simpler; the cost is a lock
//! that the two to a few dozen shard threads of one broker contend for
//! only on these paths. Across brokers nothing is shared: limits and
//! quotas are per broker, as Kafka's are.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use corelog_controller::quotas::{Quotas, address_connections, principal_limits};

use super::connection_counts::{ConnectionCounts, Refusal};
use super::login_ledger::{LoginLedger, LoginLimits};
use super::quota::QuotaTracker;

/// The broker-wide state of client connections.
#[derive(Debug)]
pub struct Edge {
    connections: Mutex<ConnectionCounts>,
    quotas: Mutex<QuotaTracker>,
    logins: Mutex<LoginLedger>,
    /// Key of unknown users' decoy SCRAM credentials (see
    /// [`super::session::Credentials::decoy_key`]).
    decoy_key: Vec<u8>,
}

/// The limits a new connection is admitted against.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Client connections on the broker.
    pub total_max: u32,
    /// Client connections from one source address without a quota of its
    /// own (`ip:ADDRESS` or `ip:*`); `None`: no limit.
    pub per_address_max: Option<u32>,
}

impl Edge {
    /// The edge of a broker of `shards` shards.
    #[must_use]
    pub fn new(shards: u16, logins: LoginLimits, decoy_key: Vec<u8>) -> Edge {
        Edge {
            connections: Mutex::new(ConnectionCounts::default()),
            quotas: Mutex::new(QuotaTracker::new(shards)),
            logins: Mutex::new(LoginLedger::new(logins)),
            decoy_key,
        }
    }

    /// Counts a new connection from `address` against `limits` and the
    /// address's quota in `quotas`; the count is given back when the
    /// returned slot is dropped.
    ///
    /// # Errors
    /// The limit that refuses it.
    pub fn admit_connection(
        self: &Arc<Self>,
        address: Option<IpAddr>,
        quotas: &Quotas,
        limits: ConnectionLimits,
    ) -> Result<ConnectionSlot, Refusal> {
        let address_max = address
            .and_then(|address| address_connections(quotas, address))
            .or(limits.per_address_max);
        lock(&self.connections).open_from(address, limits.total_max, address_max)?;
        Ok(ConnectionSlot {
            edge: self.clone(),
            address,
        })
    }

    /// Counts a connection that logged in as `principal` against its
    /// connection quota; given back when the returned slot is dropped.
    ///
    /// # Errors
    /// The entity at its limit.
    pub fn admit_principal(
        self: &Arc<Self>,
        principal: &str,
        quotas: &Quotas,
    ) -> Result<PrincipalSlot, Refusal> {
        let max = principal_limits(quotas, Some(principal)).and_then(|limits| limits.connections);
        lock(&self.connections).open_as(principal, max)?;
        Ok(PrincipalSlot {
            edge: self.clone(),
            principal: principal.to_owned(),
        })
    }

    /// The quota buckets, locked.
    pub fn quotas(&self) -> MutexGuard<'_, QuotaTracker> {
        lock(&self.quotas)
    }

    /// The failed-login ledger, locked.
    pub fn logins(&self) -> MutexGuard<'_, LoginLedger> {
        lock(&self.logins)
    }

    /// The key of unknown users' decoy credentials.
    #[must_use]
    pub fn decoy_key(&self) -> &[u8] {
        &self.decoy_key
    }
}

/// A lock that a panic elsewhere does not make unusable: the state behind
/// these locks is counts and times, consistent after every statement.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A connection's place in the broker's connection counts.
#[derive(Debug)]
pub struct ConnectionSlot {
    edge: Arc<Edge>,
    address: Option<IpAddr>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        lock(&self.edge.connections).close_from(self.address);
    }
}

/// A logged-in connection's place in its principal's connection count.
#[derive(Debug)]
pub struct PrincipalSlot {
    edge: Arc<Edge>,
    principal: String,
}

impl Drop for PrincipalSlot {
    fn drop(&mut self) {
        lock(&self.edge.connections).close_as(&self.principal);
    }
}
