//! A producer: appends to whoever it believes leads (from metadata and
//! not-leader hints), a few requests in flight, each a real record batch
//! whose values are unique; a request unanswered for a while is abandoned
//! (its outcome unknown, as for a real client that times out) and a new
//! one is sent later.

use std::collections::BTreeMap;

use bytes::Bytes;
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::rng::SplitMix64;
use corelog_wire::types::TimestampMs;

use crate::network::{Endpoint, Message};
use crate::world::World;

/// A request unanswered this long is abandoned, milliseconds, unless the
/// run's network is slower ([`Client::new`]).
pub const REQUEST_TIMEOUT_MS: u64 = 300;
/// Requests in flight at most.
const MAX_IN_FLIGHT: usize = 3;

/// One producer.
#[derive(Debug)]
pub struct Client {
    id: u32,
    replicas: Vec<u32>,
    leader: Option<u32>,
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
    request_timeout_ms: u64,
}

impl Client {
    /// A client of the partition replicated on `replicas`.
    #[must_use]
    pub fn new(
        id: u32,
        replicas: Vec<u32>,
        rate_per_million: u64,
        request_timeout_ms: u64,
    ) -> Self {
        Self {
            request_timeout_ms,
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
            Message::Metadata(published) if published.leader.is_some() => {
                self.leader = published.leader;
            }
            Message::AppendOk { request, .. } => {
                if let Some(sent_ms) = self.in_flight.remove(&request) {
                    self.acknowledged += 1;
                    if sent_ms >= self.mark_ms {
                        self.acknowledged_since_mark += 1;
                    }
                }
            }
            Message::AppendFailed { request, hint } => {
                self.in_flight.remove(&request);
                self.leader = hint;
            }
            _ => {}
        }
    }

    /// Timers: abandon old requests, maybe send a new one (records
    /// stamped with `timestamp`).
    pub fn tick(&mut self, world: &World, rng: &mut SplitMix64, timestamp: TimestampMs) {
        let now_ms = world.now_ms();
        self.in_flight
            .retain(|_, sent_ms| now_ms < *sent_ms + self.request_timeout_ms);
        if self.in_flight.len() >= MAX_IN_FLIGHT || !rng.chance_per_million(self.rate_per_million) {
            return;
        }
        let target = match self.leader {
            Some(leader) => leader,
            None => self.replicas[rng.index(self.replicas.len())],
        };
        let request = self.next_request;
        self.next_request += 1;
        let mut builder = BatchBuilder::new(Compression::None);
        for index in 0..rng.between(1, 3) {
            let record = NewRecord {
                value: Some(Bytes::from(format!(
                    "client {} request {request} record {index}",
                    self.id
                ))),
                timestamp,
                ..NewRecord::default()
            };
            if builder.push(&record).is_err() {
                return;
            }
        }
        let Ok(batch) = builder.build() else {
            return;
        };
        self.in_flight.insert(request, now_ms);
        world.send(
            Endpoint::Client(self.id),
            Endpoint::Node(target),
            Message::Append {
                client: self.id,
                request,
                batch,
            },
        );
    }
}
