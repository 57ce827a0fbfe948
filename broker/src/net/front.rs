//! A shard's client side: the shard it serves, and the state only the
//! network layer keeps — the broker's connection counts, quota buckets and
//! login ledger ([`Edge`], shared by every shard), the port each shard
//! accepts on alone, this shard's produce admission and its open
//! connections. The runtime knows
//! none of it: arrows run from `net` down to `runtime`, never up.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use super::admission::ProduceAdmission;
use super::edge::Edge;
use super::shard_ports::ShardPortTable;
use crate::runtime::shard::Shard;

/// One shard's client side, shared by its listeners and connections.
#[derive(Debug)]
pub struct Front {
    /// The shard the connections are served by.
    pub shard: Rc<Shard>,
    /// What every shard's client connections share.
    pub edge: Arc<Edge>,
    /// The port each shard of the broker accepts on alone.
    pub shard_ports: Arc<ShardPortTable>,
    /// The produce bytes this shard's connections have in flight.
    pub admission: Rc<ProduceAdmission>,
    /// Connections this shard serves.
    connections: Cell<u32>,
}

impl Front {
    /// The client side of `shard`.
    #[must_use]
    pub fn new(shard: Rc<Shard>, edge: Arc<Edge>, shard_ports: Arc<ShardPortTable>) -> Rc<Front> {
        let admission = ProduceAdmission::new(
            shard.config.produce_bytes_in_flight_max,
            shard.metrics.produce_bytes_in_flight.clone(),
        );
        Rc::new(Front {
            shard,
            edge,
            shard_ports,
            admission,
            connections: Cell::new(0),
        })
    }

    /// Counts a connection served here until [`Front::connection_closed`].
    pub fn connection_opened(&self) {
        self.set_connections(self.connections.get() + 1);
    }

    /// Uncounts a connection counted by [`Front::connection_opened`].
    pub fn connection_closed(&self) {
        self.set_connections(self.connections.get().saturating_sub(1));
    }

    fn set_connections(&self, open: u32) {
        self.connections.set(open);
        self.shard.metrics.connections.set(i64::from(open));
    }
}
