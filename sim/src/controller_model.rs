//! The controller, as the replicas see it: one reliable process (the Raft
//! group is modelled as never losing its state) that talks to them only
//! through the simulated network.
//!
//! It runs the election of the spec with `election::decide` in the loop:
//! it notices the leader is gone when no heartbeat reporting it leading the
//! current epoch arrived within the session timeout; it picks an epoch
//! above every epoch it has used; queries every replica (resending to those
//! that have not answered); decides once a majority answered, or gives up
//! after a round timeout and tries again later with a new epoch; and
//! publishes the result, rebroadcasting metadata periodically because
//! delivery is lossy. Now and then it moves leadership to the preferred
//! replica through the same path.

use std::collections::BTreeMap;

use corelog_replication::election::{self, Decision};
use corelog_replication::{PartitionKey, Query, QueryAnswer, ReplicaId, RoleView};
use corelog_wire::types::LeaderEpoch;

use crate::network::{Endpoint, Message, Network};
use crate::rng::Rng;
use crate::trace::Trace;

/// A leader silent (or not leading) this long is replaced, milliseconds.
const SESSION_TIMEOUT_MS: u64 = 150;
/// An election round without a majority of answers is abandoned after
/// this long, milliseconds.
const ROUND_TIMEOUT_MS: u64 = 120;
/// Queries are resent to silent replicas this often, milliseconds.
const QUERY_RESEND_MS: u64 = 40;
/// Metadata is rebroadcast this often, milliseconds.
const BROADCAST_MS: u64 = 50;
/// Chance per tick of moving leadership to the preferred replica, per
/// million.
const PREFERRED_PER_MILLION: u64 = 3_000;

/// One election round.
#[derive(Debug)]
struct Round {
    epoch: LeaderEpoch,
    started_ms: u64,
    last_query_ms: u64,
    answers: Vec<QueryAnswer>,
}

/// The controller model.
#[derive(Debug)]
pub struct Controller {
    partition: PartitionKey,
    replicas: Vec<ReplicaId>,
    clients: Vec<u32>,
    max_epoch: LeaderEpoch,
    /// The published leader and epoch.
    current: Option<(ReplicaId, LeaderEpoch)>,
    published_ms: u64,
    /// Last heartbeat per replica: when, and the role it reported.
    seen: BTreeMap<ReplicaId, (u64, RoleView)>,
    round: Option<Round>,
    next_round_ms: u64,
    last_broadcast_ms: u64,
    /// Rounds started (statistics).
    pub rounds: u64,
}

impl Controller {
    /// A controller for one partition over `replicas` (preferred first),
    /// publishing to `clients` too.
    #[must_use]
    pub fn new(partition: PartitionKey, replicas: Vec<ReplicaId>, clients: Vec<u32>) -> Self {
        Self {
            partition,
            replicas,
            clients,
            max_epoch: LeaderEpoch(0),
            current: None,
            published_ms: 0,
            seen: BTreeMap::new(),
            round: None,
            next_round_ms: 0,
            last_broadcast_ms: 0,
            rounds: 0,
        }
    }

    /// The published leader and epoch.
    #[must_use]
    pub fn current(&self) -> Option<(ReplicaId, LeaderEpoch)> {
        self.current
    }

    /// A message arrives.
    pub fn receive(
        &mut self,
        message: Message,
        now_ms: u64,
        network: &mut Network,
        trace: &mut Trace,
    ) {
        match message {
            Message::Heartbeat { node, role } => {
                self.seen.insert(node, (now_ms, role));
            }
            Message::Answer(answer) => self.on_answer(answer, now_ms, network, trace),
            _ => {}
        }
    }

    fn on_answer(
        &mut self,
        answer: QueryAnswer,
        now_ms: u64,
        network: &mut Network,
        trace: &mut Trace,
    ) {
        let Some(round) = self.round.as_mut() else {
            return;
        };
        if answer.epoch != round.epoch {
            return;
        }
        round.answers.push(answer);
        let epoch = round.epoch;
        match election::decide(epoch, &self.replicas, &round.answers) {
            Decision::Elect { leader, epoch } => {
                trace.log(now_ms, || {
                    format!("controller: elects {leader} for epoch {epoch}")
                });
                self.round = None;
                self.current = Some((leader, epoch));
                self.published_ms = now_ms;
                self.broadcast(now_ms, network);
            }
            Decision::NoQuorum { .. } => {}
            Decision::Superseded { fenced_epoch } => {
                trace.log(now_ms, || {
                    format!("controller: epoch {epoch} superseded by {fenced_epoch}")
                });
                self.max_epoch = self.max_epoch.max(fenced_epoch);
                self.round = None;
                self.next_round_ms = now_ms;
            }
        }
    }

    /// Timers: round timeout and query resends, failure detection, the
    /// preferred-leader move, metadata rebroadcast.
    pub fn tick(&mut self, now_ms: u64, network: &mut Network, rng: &mut Rng, trace: &mut Trace) {
        if let Some(round) = &mut self.round {
            if now_ms >= round.started_ms + ROUND_TIMEOUT_MS {
                let epoch = round.epoch;
                trace.log(now_ms, || format!("controller: round {epoch} timed out"));
                self.round = None;
                self.next_round_ms = now_ms + rng.between(10, 60);
            } else if now_ms >= round.last_query_ms + QUERY_RESEND_MS {
                round.last_query_ms = now_ms;
                let query = Query {
                    partition: self.partition,
                    new_epoch: round.epoch,
                };
                let answered: Vec<ReplicaId> = round.answers.iter().map(|a| a.from).collect();
                for replica in &self.replicas {
                    if !answered.contains(replica) {
                        network.send(
                            now_ms,
                            Endpoint::Controller,
                            Endpoint::Node(*replica),
                            Message::Query(query),
                        );
                    }
                }
            }
        } else if now_ms >= self.next_round_ms {
            if !self.leader_healthy(now_ms) {
                self.start_round(now_ms, network, trace);
            } else if rng.chance(PREFERRED_PER_MILLION) && self.preferred_available(now_ms) {
                trace.log(now_ms, || {
                    "controller: moves leadership to the preferred replica".to_string()
                });
                self.start_round(now_ms, network, trace);
            }
        }
        if now_ms >= self.last_broadcast_ms + BROADCAST_MS {
            self.broadcast(now_ms, network);
        }
    }

    /// Whether the published leader reported leading its epoch within the
    /// session timeout (a new leader gets one session timeout of grace).
    fn leader_healthy(&self, now_ms: u64) -> bool {
        let Some((leader, epoch)) = self.current else {
            return false;
        };
        if now_ms < self.published_ms + SESSION_TIMEOUT_MS {
            return true;
        }
        self.seen.get(&leader).is_some_and(|(at, role)| {
            now_ms < at + SESSION_TIMEOUT_MS
                && matches!(role, RoleView::Leader { epoch: led, .. } if *led == epoch)
        })
    }

    fn preferred_available(&self, now_ms: u64) -> bool {
        let preferred = self.replicas[0];
        self.current.is_some_and(|(leader, _)| leader != preferred)
            && self
                .seen
                .get(&preferred)
                .is_some_and(|(at, _)| now_ms < at + SESSION_TIMEOUT_MS)
    }

    fn start_round(&mut self, now_ms: u64, network: &mut Network, trace: &mut Trace) {
        self.max_epoch = LeaderEpoch(self.max_epoch.0 + 1);
        let epoch = self.max_epoch;
        self.rounds += 1;
        trace.log(now_ms, || {
            format!("controller: election round for epoch {epoch}")
        });
        self.round = Some(Round {
            epoch,
            started_ms: now_ms,
            last_query_ms: now_ms,
            answers: Vec::new(),
        });
        let query = Query {
            partition: self.partition,
            new_epoch: epoch,
        };
        for replica in &self.replicas {
            network.send(
                now_ms,
                Endpoint::Controller,
                Endpoint::Node(*replica),
                Message::Query(query),
            );
        }
    }

    fn broadcast(&mut self, now_ms: u64, network: &mut Network) {
        self.last_broadcast_ms = now_ms;
        let (leader, epoch) = match self.current {
            Some((leader, epoch)) => (Some(leader), epoch),
            None => (None, LeaderEpoch(0)),
        };
        let message = Message::Metadata {
            leader,
            epoch,
            replicas: self.replicas.clone(),
        };
        let nodes = self.replicas.iter().map(|replica| Endpoint::Node(*replica));
        let clients = self.clients.iter().map(|client| Endpoint::Client(*client));
        for to in nodes.chain(clients).collect::<Vec<_>>() {
            network.send(now_ms, Endpoint::Controller, to, message.clone());
        }
    }
}
