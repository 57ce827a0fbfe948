//! The port on which each shard accepts connections alone, shared by the
//! broker's shards so that any of them can answer `DescribeShards`.
//!
//! Each shard records its own port once it has bound it; until then (and
//! for a broker without per-shard listeners) its entry is 0, which tells a
//! client to use the shared port.

use std::sync::atomic::{AtomicU16, Ordering};

use corelog_wire::message::describe_shards::ShardEndpoint;

use crate::metadata::ShardId;

/// Every shard's own port, by shard index.
#[derive(Debug)]
pub struct ShardPortTable {
    ports: Vec<AtomicU16>,
}

impl ShardPortTable {
    /// A table for `shards` shards, none listening alone yet.
    #[must_use]
    pub fn new(shards: u16) -> ShardPortTable {
        ShardPortTable {
            ports: (0..shards).map(|_| AtomicU16::new(0)).collect(),
        }
    }

    /// Records the port shard `shard` accepts on alone.
    pub fn record(&self, shard: ShardId, port: u16) {
        if let Some(entry) = self.ports.get(shard.index()) {
            entry.store(port, Ordering::Release);
        }
    }

    /// Each shard's own port, by shard index (0: none yet).
    #[must_use]
    pub fn ports(&self) -> Vec<u16> {
        self.ports
            .iter()
            .map(|port| port.load(Ordering::Acquire))
            .collect()
    }

    /// One endpoint per shard, or none when no shard listens alone.
    #[must_use]
    pub fn endpoints(&self) -> Vec<ShardEndpoint> {
        let ports = self.ports();
        if ports.iter().all(|&port| port == 0) {
            return Vec::new();
        }
        (0u16..)
            .zip(ports)
            .map(|(shard, port)| ShardEndpoint { shard, port })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_lists_every_shard_once_one_listens_alone() {
        let table = ShardPortTable::new(3);
        assert!(table.endpoints().is_empty(), "no shard listens alone yet");
        table.record(ShardId(2), 7112);
        table.record(ShardId(7), 9999);
        assert_eq!(
            table.endpoints(),
            [
                ShardEndpoint { shard: 0, port: 0 },
                ShardEndpoint { shard: 1, port: 0 },
                ShardEndpoint {
                    shard: 2,
                    port: 7112
                },
            ]
        );
    }
}
