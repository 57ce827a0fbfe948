//! The simulated network: every message is delayed by a random time, may be
//! lost or duplicated, and is reordered by the differing delays; partitions
//! (symmetric and one-way) block links for a while and heal.
//!
//! A message is judged when it is delivered: a link blocked at that moment
//! drops it, as does a destination node that is down.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use corelog_replication::{Push, PushAck, Query, QueryAnswer, ReplicaId, RoleView};
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::rng::Rng;

/// Who can send and receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// A broker holding one replica.
    Node(ReplicaId),
    /// The controller (modelled as one reliable process: the Raft group).
    Controller,
    /// A producer.
    Client(u32),
}

/// Everything that travels.
#[derive(Clone, Debug)]
pub enum Message {
    /// Leader to follower.
    Push(Push),
    /// Follower to leader.
    PushAck(PushAck),
    /// Controller to replica.
    Query(Query),
    /// Replica to controller.
    Answer(QueryAnswer),
    /// Controller to everyone: the partition's leader and epoch.
    Metadata {
        /// The leader, if one is elected.
        leader: Option<ReplicaId>,
        /// Its epoch.
        epoch: LeaderEpoch,
        /// The replica set, preferred first.
        replicas: Vec<ReplicaId>,
    },
    /// Node to controller: liveness and role.
    Heartbeat {
        /// The node.
        node: ReplicaId,
        /// Its role now.
        role: RoleView,
    },
    /// Client to node.
    Append {
        /// The client.
        client: u32,
        /// The client's request number.
        request: u64,
        /// Records in the batch.
        records: u64,
        /// The batch bytes (unique per request).
        payload: Bytes,
    },
    /// Node to client: the record is committed at `offset`.
    AppendOk {
        /// The request answered.
        request: u64,
        /// The batch's base offset.
        offset: Offset,
    },
    /// Node to client: not the leader (or stepped down before commit).
    NotLeader {
        /// The request answered.
        request: u64,
        /// Who the node believes leads.
        hint: Option<ReplicaId>,
    },
}

/// A message in flight.
#[derive(Clone, Debug)]
pub struct Envelope {
    /// Sender.
    pub from: Endpoint,
    /// Receiver.
    pub to: Endpoint,
    /// Contents.
    pub message: Message,
}

/// Fault rates of the network, drawn per seed.
#[derive(Clone, Copy, Debug)]
pub struct NetworkFaults {
    /// Per-message loss, per million.
    pub loss_per_million: u64,
    /// Per-message duplication, per million.
    pub duplicate_per_million: u64,
    /// Usual delay range, milliseconds.
    pub delay_ms: (u64, u64),
    /// Chance of a long delay (ten times the maximum), per million: strong
    /// reordering.
    pub long_delay_per_million: u64,
}

/// A set of blocked directed links, healing at `heal_at_ms`.
#[derive(Clone, Debug)]
struct Partition {
    blocked: BTreeSet<(Endpoint, Endpoint)>,
    heal_at_ms: u64,
}

/// The network: messages in flight ordered by delivery time (then send
/// order), and the active partitions.
#[derive(Debug)]
pub struct Network {
    in_flight: BTreeMap<(u64, u64), Envelope>,
    sequence: u64,
    partitions: Vec<Partition>,
    faults: NetworkFaults,
    rng: Rng,
    /// Messages dropped by loss or partitions (statistics).
    pub dropped: u64,
}

impl Network {
    /// An empty network with these fault rates.
    #[must_use]
    pub fn new(faults: NetworkFaults, rng: Rng) -> Self {
        Self {
            in_flight: BTreeMap::new(),
            sequence: 0,
            partitions: Vec::new(),
            faults,
            rng,
            dropped: 0,
        }
    }

    /// Sends a message at `now_ms`.
    pub fn send(&mut self, now_ms: u64, from: Endpoint, to: Endpoint, message: Message) {
        if self.rng.chance(self.faults.loss_per_million) {
            self.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate_per_million) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (low, high) = self.faults.delay_ms;
            let mut delay = self.rng.between(low, high);
            if self.rng.chance(self.faults.long_delay_per_million) {
                delay = delay.max(1) * 10;
            }
            self.sequence += 1;
            let envelope = Envelope {
                from,
                to,
                message: message.clone(),
            };
            self.in_flight
                .insert((now_ms + delay, self.sequence), envelope);
        }
    }

    /// When the next message is due.
    #[must_use]
    pub fn next_due(&self) -> Option<u64> {
        self.in_flight.keys().next().map(|(at, _)| *at)
    }

    /// The next message due at or before `now_ms` whose link is open; drops
    /// the blocked ones on the way.
    pub fn deliver(&mut self, now_ms: u64) -> Option<Envelope> {
        loop {
            let entry = self.in_flight.first_entry()?;
            if entry.key().0 > now_ms {
                return None;
            }
            let envelope = entry.remove();
            if self.blocked(envelope.from, envelope.to) {
                self.dropped += 1;
                continue;
            }
            return Some(envelope);
        }
    }

    fn blocked(&self, from: Endpoint, to: Endpoint) -> bool {
        self.partitions
            .iter()
            .any(|partition| partition.blocked.contains(&(from, to)))
    }

    /// Blocks the directed links `links` until `heal_at_ms`.
    pub fn partition(&mut self, links: BTreeSet<(Endpoint, Endpoint)>, heal_at_ms: u64) {
        self.partitions.push(Partition {
            blocked: links,
            heal_at_ms,
        });
    }

    /// Heals partitions whose time has come.
    pub fn heal_due(&mut self, now_ms: u64) {
        self.partitions
            .retain(|partition| partition.heal_at_ms > now_ms);
    }

    /// Heals every partition and stops loss and duplication: the end of a
    /// run, where liveness is checked.
    pub fn heal_all(&mut self) {
        self.partitions.clear();
        self.faults.loss_per_million = 0;
        self.faults.duplicate_per_million = 0;
        self.faults.long_delay_per_million = 0;
    }

    /// How many partitions are active.
    #[must_use]
    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }
}
