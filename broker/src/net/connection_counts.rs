//! Open client connections of the whole broker: in all (against
//! `max_connections`), per source address (against the address's quota,
//! else `max_connections_per_address`) and per principal (against its
//! quota). Counted broker-wide, not per shard: the kernel spreads a port's
//! connections over the shards unevenly (SO_REUSEPORT hashes), so a limit
//! split into per-shard shares refused some connections early and let
//! others through late.
//!
//! Pure: the caller holds it behind the broker's [`super::edge::Edge`].

use std::collections::HashMap;
use std::net::IpAddr;

/// Why a connection was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The broker holds `max_connections` already.
    Broker,
    /// This entity (`ip:ADDRESS` or `user:NAME`) is at its limit.
    Entity(String),
}

/// The broker's open client connections.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    total: u32,
    by_address: HashMap<IpAddr, u32>,
    by_principal: HashMap<String, u32>,
}

impl ConnectionCounts {
    /// Counts a new connection from `address` (`None`: its address is
    /// unknown), unless the broker holds `total_max` already or the
    /// address holds `address_max` (`None`: no limit).
    ///
    /// # Errors
    /// The limit that refuses it.
    pub fn open_from(
        &mut self,
        address: Option<IpAddr>,
        total_max: u32,
        address_max: Option<u32>,
    ) -> Result<(), Refusal> {
        if self.total >= total_max {
            return Err(Refusal::Broker);
        }
        if let Some(address) = address {
            let open = self.by_address.get(&address).copied().unwrap_or(0);
            if address_max.is_some_and(|max| open >= max) {
                return Err(Refusal::Entity(format!("ip:{address}")));
            }
            *self.by_address.entry(address).or_insert(0) += 1;
        }
        self.total += 1;
        Ok(())
    }

    /// Uncounts a connection counted by [`ConnectionCounts::open_from`].
    pub fn close_from(&mut self, address: Option<IpAddr>) {
        self.total = self.total.saturating_sub(1);
        if let Some(address) = address {
            decrement(&mut self.by_address, &address);
        }
    }

    /// Counts a connection that logged in as `principal`, unless the
    /// principal holds `max` (`None`: no limit).
    ///
    /// # Errors
    /// The entity at its limit (`user:NAME`).
    pub fn open_as(&mut self, principal: &str, max: Option<u32>) -> Result<(), Refusal> {
        let open = self.by_principal.get(principal).copied().unwrap_or(0);
        if max.is_some_and(|max| open >= max) {
            return Err(Refusal::Entity(format!("user:{principal}")));
        }
        *self.by_principal.entry(principal.to_owned()).or_insert(0) += 1;
        Ok(())
    }

    /// Uncounts a connection counted by [`ConnectionCounts::open_as`].
    pub fn close_as(&mut self, principal: &str) {
        decrement(&mut self.by_principal, principal);
    }

    /// Connections open on the broker.
    #[must_use]
    pub fn total(&self) -> u32 {
        self.total
    }
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

    #[test]
    fn connections_are_limited_in_all_per_address_and_per_principal() {
        let mut counts = ConnectionCounts::default();
        let here: IpAddr = "10.0.0.1".parse().unwrap();
        let there: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..3 {
            counts.open_from(Some(here), 10, Some(3)).unwrap();
        }
        assert_eq!(
            counts.open_from(Some(here), 10, Some(3)),
            Err(Refusal::Entity("ip:10.0.0.1".to_owned()))
        );
        counts.open_from(Some(there), 10, Some(3)).unwrap();
        counts.close_from(Some(here));
        counts.open_from(Some(here), 10, Some(3)).unwrap();
        assert_eq!(counts.total(), 4);
        assert_eq!(counts.open_from(None, 4, None), Err(Refusal::Broker));
        counts.open_from(None, 5, None).unwrap();
        counts.close_from(None);

        for _ in 0..2 {
            counts.open_as("alice", Some(2)).unwrap();
        }
        assert_eq!(
            counts.open_as("alice", Some(2)),
            Err(Refusal::Entity("user:alice".to_owned()))
        );
        counts.open_as("bob", Some(2)).unwrap();
        counts.close_as("alice");
        counts.open_as("alice", Some(2)).unwrap();
    }

    /// Two shards share one count: a limit of 3 is 3 over both, however
    /// the kernel spreads the connections (it used to be 2 per shard, so
    /// 4 in all, or a refusal at 2 on one shard with the other empty).
    #[test]
    fn a_limit_holds_over_every_shard() {
        let shared = std::sync::Mutex::new(ConnectionCounts::default());
        let here: IpAddr = "10.0.0.1".parse().unwrap();
        let opened: usize = std::thread::scope(|scope| {
            let shards: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        (0..3)
                            .filter(|_| {
                                shared
                                    .lock()
                                    .unwrap()
                                    .open_from(Some(here), 100, Some(3))
                                    .is_ok()
                            })
                            .count()
                    })
                })
                .collect();
            shards.into_iter().map(|shard| shard.join().unwrap()).sum()
        });
        assert_eq!(opened, 3);
    }
}
