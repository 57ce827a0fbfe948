//! A producer: appends to whoever it believes leads (from metadata and
//! not-leader hints), a few requests in flight, each with a unique payload;
//! a request unanswered for a while is abandoned (its outcome unknown, as
//! for a real client that times out) and a new one is sent later.

use std::collections::BTreeMap;

use bytes::Bytes;
use corelog_replication::ReplicaId;

use crate::network::{Endpoint, Message, Network};
use crate::rng::Rng;

/// A request unanswered this long is abandoned, milliseconds.
const REQUEST_TIMEOUT_MS: u64 = 300;
/// Requests in flight at most.
const MAX_IN_FLIGHT: usize = 3;

/// One producer.
#[derive(Debug)]
pub struct Client {
    id: u32,
    replicas: Vec<ReplicaId>,
    leader: Option<ReplicaId>,
    /// Request number to the time it was sent.
    in_flight: BTreeMap<u64, u64>,
    next_request: u64,
    /// Send chance per tick, per million.
    rate_per_million: u64,
    /// Requests sent at or after this time that succeeded (liveness).
    pub acknowledged_since_mark: u64,
    mark_ms: u64,
    /// Requests acknowledged (statistics).
    pub acknowledged: u64,
}

impl Client {
    /// A client of the partition replicated on `replicas`.
    #[must_use]
    pub fn new(id: u32, replicas: Vec<ReplicaId>, rate_per_million: u64) -> Self {
        Self {
            id,
            replicas,
            leader: None,
            in_flight: BTreeMap::new(),
            next_request: 0,
            rate_per_million,
            acknowledged_since_mark: 0,
            mark_ms: u64::MAX,
            acknowledged: 0,
        }
    }

    /// Counts, from now on, only successes of requests sent from `now_ms`.
    pub fn mark(&mut self, now_ms: u64) {
        self.mark_ms = now_ms;
        self.acknowledged_since_mark = 0;
    }

    /// A message arrives.
    pub fn receive(&mut self, message: Message) {
        match message {
            Message::Metadata { leader, .. } if leader.is_some() => self.leader = leader,
            Message::AppendOk { request, .. } => {
                if let Some(sent_ms) = self.in_flight.remove(&request) {
                    self.acknowledged += 1;
                    if sent_ms >= self.mark_ms {
                        self.acknowledged_since_mark += 1;
                    }
                }
            }
            Message::NotLeader { request, hint } => {
                self.in_flight.remove(&request);
                self.leader = hint;
            }
            _ => {}
        }
    }

    /// Timers: abandon old requests, maybe send a new one.
    pub fn tick(&mut self, now_ms: u64, network: &mut Network, rng: &mut Rng) {
        self.in_flight
            .retain(|_, sent_ms| now_ms < *sent_ms + REQUEST_TIMEOUT_MS);
        if self.in_flight.len() >= MAX_IN_FLIGHT || !rng.chance(self.rate_per_million) {
            return;
        }
        let target = match self.leader {
            Some(leader) => leader,
            None => self.replicas[rng.below(self.replicas.len() as u64) as usize],
        };
        let request = self.next_request;
        self.next_request += 1;
        let records = rng.between(1, 3);
        let payload = Bytes::from(format!("client {} request {request} x{records}", self.id));
        self.in_flight.insert(request, now_ms);
        network.send(
            now_ms,
            Endpoint::Client(self.id),
            Endpoint::Node(target),
            Message::Append {
                client: self.id,
                request,
                records,
                payload,
            },
        );
    }
}
