//! The simulated network: every message is delayed by a random time, may be
//! lost or duplicated, and is reordered by the differing delays; partitions
//! (symmetric and one-way) block links for a while and heal.
//!
//! A message is judged when it is delivered: a link blocked at that moment
//! drops it, as does a destination node that is down. What travels between
//! replicas and the controller are the inter-broker messages themselves
//! (`ReplicaStream` frames, `ReplicaQuery` and their answers, in their wire
//! structs), converted by the broker's own conversions on both ends: a lost,
//! duplicated or late message is a lost, duplicated or late stream frame.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use corelog_wire::message::partition_report::LedPartitionV1;
use corelog_wire::message::replica_query::{ReplicaQueryRequest, ReplicaQueryResponse};
use corelog_wire::message::replica_stream::{ReplicaStreamRequest, ReplicaStreamResponse};
use corelog_wire::rng::SplitMix64;
use corelog_wire::types::{LeaderEpoch, Offset};

/// Who can send and receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// A broker holding one replica, by node id.
    Node(u32),
    /// A controller process (a Raft voter), by its id.
    Controller(u32),
    /// A producer.
    Client(u32),
}

/// The partition's leadership as the controller publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The metadata version.
    pub version: u64,
    /// The leader, if one is elected.
    pub leader: Option<u32>,
    /// Its epoch.
    pub epoch: LeaderEpoch,
    /// The replica set, preferred first.
    pub replicas: Vec<u32>,
    /// Nodes catching up outside the set while a move adds them.
    pub learners: Vec<u32>,
    /// Bytes a second each learner copies at most; 0 for no limit.
    pub learner_throttle_bytes_per_s: u64,
}

/// Everything that travels.
#[derive(Clone, Debug)]
pub enum Message {
    /// Leader to follower: a replication stream frame (one or more
    /// pushes), with their batches as the raw section.
    Stream {
        /// The call, for the answer.
        call: u64,
        /// The request.
        request: ReplicaStreamRequest,
        /// The pushes' batches, as stored, in push order.
        raw: Bytes,
    },
    /// Controller to replica: an election query.
    Query {
        /// The call, for the answer.
        call: u64,
        /// The request.
        request: ReplicaQueryRequest,
    },
    /// The answer to a call.
    Answer {
        /// The call answered.
        call: u64,
        /// The answer.
        answer: Answer,
    },
    /// Controller to controller: a Raft message, for the recipient's
    /// `ControllerNode::step`.
    Raft {
        /// The call, for the answer.
        call: u64,
        /// The message's bytes, as the sender's node encoded them.
        bytes: Vec<u8>,
    },
    /// Controller to everyone: the partition's leadership.
    Metadata(Published),
    /// Node to controller: register this process.
    Register {
        /// The node.
        node: u32,
        /// Its process incarnation.
        incarnation: u64,
    },
    /// Controller to node: the registration applied.
    Registered {
        /// The incarnation registered.
        incarnation: u64,
    },
    /// Node to controller: alive, at this metadata version.
    Heartbeat {
        /// The node.
        node: u32,
        /// Its process incarnation.
        incarnation: u64,
        /// The metadata version it applied.
        metadata_version: u64,
    },
    /// Controller to node: the heartbeat's process is not the registered
    /// one; register again.
    RegisterAgain {
        /// The incarnation refused.
        incarnation: u64,
    },
    /// Node to controller: this process is shutting down (the broker's
    /// `LeaveCluster`): fence it and move its leadership now.
    Leave {
        /// The node.
        node: u32,
        /// Its process incarnation.
        incarnation: u64,
    },
    /// Node to controller: the partition it leads, with the replicas in
    /// sync (the broker's `PartitionReport`, sent with the heartbeat while
    /// it leads).
    Report {
        /// The node.
        node: u32,
        /// Its process incarnation.
        incarnation: u64,
        /// The partition.
        led: LedPartitionV1,
    },
    /// Node to controller: this node cannot take the leadership of `epoch`
    /// it was given (the broker's `ResignLeadership`).
    Resign {
        /// The node.
        node: u32,
        /// The epoch it resigns.
        epoch: LeaderEpoch,
    },
    /// Client to node.
    Append {
        /// The client.
        client: u32,
        /// The client's request number.
        request: u64,
        /// The batch.
        batch: Bytes,
    },
    /// Node to client: the batch is committed at `offset`.
    AppendOk {
        /// The request answered.
        request: u64,
        /// The batch's base offset.
        offset: Offset,
    },
    /// Node to client: not appended (not the leader, stepped down, timed
    /// out: its outcome is unknown).
    AppendFailed {
        /// The request answered.
        request: u64,
        /// Who the node believes leads.
        hint: Option<u32>,
    },
}

/// The answer to a stream frame or a query.
#[derive(Clone, Debug)]
pub enum Answer {
    /// To a stream frame.
    Stream(ReplicaStreamResponse),
    /// To a query.
    Query(ReplicaQueryResponse),
    /// To a Raft message: whether the recipient's node took it.
    Raft {
        /// The node stepped it without error.
        accepted: bool,
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
    /// Endpoints that take in nothing until the given time: whatever is
    /// sent to them meanwhile arrives then, late but whole (an overloaded
    /// process that stops reading for a while).
    stalls: BTreeMap<Endpoint, u64>,
    /// Links cut by a fault schedule, until it heals them.
    cuts: BTreeSet<(Endpoint, Endpoint)>,
    faults: NetworkFaults,
    rng: SplitMix64,
    /// Messages dropped by loss or partitions (statistics).
    pub dropped: u64,
}

impl Network {
    /// An empty network with these fault rates.
    #[must_use]
    pub fn new(faults: NetworkFaults, rng: SplitMix64) -> Self {
        Self {
            in_flight: BTreeMap::new(),
            sequence: 0,
            partitions: Vec::new(),
            stalls: BTreeMap::new(),
            cuts: BTreeSet::new(),
            faults,
            rng,
            dropped: 0,
        }
    }

    /// Sends a message at `now_ms`.
    pub fn send(&mut self, now_ms: u64, from: Endpoint, to: Endpoint, message: Message) {
        if self.rng.chance_per_million(self.faults.loss_per_million) {
            self.dropped += 1;
            return;
        }
        let copies = if self
            .rng
            .chance_per_million(self.faults.duplicate_per_million)
        {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (low, high) = self.faults.delay_ms;
            let mut delay = self.rng.between(low, high);
            if self
                .rng
                .chance_per_million(self.faults.long_delay_per_million)
            {
                delay = delay.max(1) * 10;
            }
            let mut at = now_ms + delay;
            if let Some(&until) = self.stalls.get(&to) {
                at = at.max(until);
            }
            self.sequence += 1;
            let envelope = Envelope {
                from,
                to,
                message: message.clone(),
            };
            self.in_flight.insert((at, self.sequence), envelope);
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
        self.cuts.contains(&(from, to))
            || self
                .partitions
                .iter()
                .any(|partition| partition.blocked.contains(&(from, to)))
    }

    /// Cuts the link `from` -> `to` until [`Network::heal_cuts`]: what is
    /// in flight on it is lost.
    pub fn cut(&mut self, from: Endpoint, to: Endpoint) {
        self.cuts.insert((from, to));
    }

    /// Heals the links [`Network::cut`] cut.
    pub fn heal_cuts(&mut self) {
        self.cuts.clear();
    }

    /// Loses every message in flight from `from` (a crash that takes what
    /// its process had sent but the network not yet delivered).
    pub fn lose_in_flight_from(&mut self, from: Endpoint) {
        let before = self.in_flight.len();
        self.in_flight.retain(|_, envelope| envelope.from != from);
        self.dropped += (before - self.in_flight.len()) as u64;
    }

    /// Blocks the directed links `links` until `heal_at_ms`.
    pub fn partition(&mut self, links: BTreeSet<(Endpoint, Endpoint)>, heal_at_ms: u64) {
        self.partitions.push(Partition {
            blocked: links,
            heal_at_ms,
        });
    }

    /// Holds every message sent to `to` from now until `until_ms` (see
    /// `stalls`).
    pub fn stall(&mut self, to: Endpoint, until_ms: u64) {
        let until = self.stalls.entry(to).or_insert(until_ms);
        *until = (*until).max(until_ms);
    }

    /// Whether `to` takes in nothing at `now_ms`.
    #[must_use]
    pub fn is_stalled(&self, to: Endpoint, now_ms: u64) -> bool {
        self.stalls.get(&to).is_some_and(|until| *until > now_ms)
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
        self.stalls.clear();
        self.cuts.clear();
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
