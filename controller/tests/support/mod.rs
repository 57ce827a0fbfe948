//! A deterministic in-memory controller cluster: the test loop is the
//! network (seeded loss, delay and reordering), the disks (one log file per
//! node, appended with the node's records) and the clock (rounds of ticks).
//!
//! It checks Raft's safety properties as it goes and panics with the seed:
//! - at most one leader per term (election safety);
//! - every node that applies index i applied the same command there
//!   (state machine safety);
//! - every node whose metadata reaches version v has the same state there.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use corelog_controller::durable;
use corelog_controller::{
    Command, ControllerConfig, ControllerNode, MetadataState, NodeId, ProposalId, ProposalOutcome,
    ProposeError, Resolved, Role,
};
use corelog_wire::rng::SplitMix64;

/// The workspace's seeded generator (the one the node draws its jitter
/// from), with chances counted in per-mille as these tests do.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.0.below(bound)
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.0.below(1000) < per_mille
    }
}

#[derive(Clone, Debug)]
struct Envelope {
    from: NodeId,
    to: NodeId,
    bytes: Vec<u8>,
    carries_snapshot: bool,
}

/// Network faults, in per-mille per message.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub drop_per_mille: u64,
    pub delay_per_mille: u64,
    /// A copy is delivered now and another kept for a later round.
    pub duplicate_per_mille: u64,
}

#[derive(Debug)]
pub struct Cluster {
    pub seed: u64,
    rng: Rng,
    configs: BTreeMap<NodeId, ControllerConfig>,
    nodes: BTreeMap<NodeId, Option<ControllerNode>>,
    /// Each node's log file, as durable as the test says.
    pub disks: BTreeMap<NodeId, Vec<u8>>,
    network: Vec<Envelope>,
    /// Nodes whose messages (both ways) are dropped.
    pub isolated: BTreeSet<NodeId>,
    pub faults: Faults,
    pub round: u64,
    /// Events, for comparing two runs of one seed.
    pub trace: Vec<String>,
    /// Resolved proposals, by proposer.
    pub resolved: Vec<(NodeId, Resolved)>,
    /// Snapshots sent over the network.
    pub snapshots_sent: u64,
    /// Messages the sender's transport refused at once (peer down or cut
    /// off), reported back while the Ready was in flight.
    pub refused_at_send: u64,
    leaders_by_term: BTreeMap<u64, NodeId>,
    commands_by_index: BTreeMap<u64, (u64, Vec<u8>)>,
    states_by_version: BTreeMap<u64, u32>,
    roles: BTreeMap<NodeId, (Role, u64)>,
}

impl Cluster {
    pub fn new(seed: u64, size: u64, snapshot_interval_entries: u64) -> Cluster {
        let peers: Vec<NodeId> = (1..=size).map(NodeId).collect();
        let mut cluster = Cluster {
            seed,
            rng: Rng::new(seed),
            configs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            disks: BTreeMap::new(),
            network: Vec::new(),
            isolated: BTreeSet::new(),
            faults: Faults::default(),
            round: 0,
            trace: Vec::new(),
            resolved: Vec::new(),
            snapshots_sent: 0,
            refused_at_send: 0,
            leaders_by_term: BTreeMap::new(),
            commands_by_index: BTreeMap::new(),
            states_by_version: BTreeMap::new(),
            roles: BTreeMap::new(),
        };
        for id in &peers {
            let mut config = ControllerConfig::new(*id, peers.clone(), seed ^ id.0);
            config.snapshot_interval_entries = snapshot_interval_entries;
            cluster.configs.insert(*id, config.clone());
            cluster.disks.insert(*id, durable::new_log_file());
            let node = ControllerNode::new(config, durable::RecoveredLog::default())
                .unwrap_or_else(|error| panic!("{}: new node: {error}", cluster.replay()));
            cluster.nodes.insert(*id, Some(node));
        }
        cluster
    }

    pub fn replay(&self) -> String {
        format!(
            "seed {} (replay: CONTROLLER_SEED={} cargo test -p corelog-controller --test faults)",
            self.seed, self.seed
        )
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    pub fn node(&self, id: NodeId) -> Option<&ControllerNode> {
        self.nodes.get(&id).and_then(Option::as_ref)
    }

    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut ControllerNode> {
        self.nodes.get_mut(&id).and_then(Option::as_mut)
    }

    pub fn is_up(&self, id: NodeId) -> bool {
        self.node(id).is_some()
    }

    /// The live leader with the highest term.
    pub fn leader(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter_map(|(id, node)| node.as_ref().map(|node| (*id, node)))
            .filter(|(id, node)| node.is_leader() && !self.isolated.contains(id))
            .max_by_key(|(_, node)| node.term())
            .map(|(id, _)| id)
    }

    /// One round: every live node ticks, handles its readies, and the
    /// network delivers what is in flight.
    pub fn round(&mut self) {
        self.round += 1;
        for id in self.ids() {
            if let Some(node) = self.nodes.get_mut(&id).and_then(Option::as_mut) {
                node.tick();
            }
            self.drain(id);
        }
        self.deliver();
    }

    pub fn run(&mut self, rounds: u64) {
        for _ in 0..rounds {
            self.round();
        }
    }

    /// Runs until `done` holds, at most `rounds` rounds.
    pub fn run_until(&mut self, rounds: u64, what: &str, done: impl Fn(&Cluster) -> bool) {
        for _ in 0..rounds {
            if done(self) {
                return;
            }
            self.round();
        }
        assert!(
            done(self),
            "{}: not reached in {rounds} rounds: {what}\n{}",
            self.replay(),
            self.describe()
        );
    }

    pub fn wait_for_leader(&mut self) -> NodeId {
        self.run_until(500, "a leader is elected", |cluster| {
            cluster.leader().is_some()
        });
        self.leader().expect("a leader")
    }

    /// Proposes through the leader.
    pub fn propose(&mut self, command: &Command) -> Result<(NodeId, ProposalId), ProposeError> {
        let leader = self
            .leader()
            .ok_or(ProposeError::NotLeader { leader: None })?;
        let node = self
            .nodes
            .get_mut(&leader)
            .and_then(Option::as_mut)
            .expect("live leader");
        let id = node.propose(command)?;
        self.drain(leader);
        Ok((leader, id))
    }

    /// Proposes and runs until the proposal resolved; returns its outcome.
    pub fn commit(&mut self, command: &Command) -> ProposalOutcome {
        let (proposer, id) = loop {
            match self.propose(command) {
                Ok(proposal) => break proposal,
                Err(_) => {
                    self.round();
                    assert!(
                        self.round < 1_000_000,
                        "{}: no leader to propose to",
                        self.replay()
                    );
                }
            }
        };
        self.run_until(500, "the proposal resolves", |cluster| {
            cluster.outcome_of(proposer, id).is_some() || !cluster.is_up(proposer)
        });
        self.outcome_of(proposer, id)
            .unwrap_or(ProposalOutcome::Unknown)
    }

    pub fn outcome_of(&self, proposer: NodeId, id: ProposalId) -> Option<ProposalOutcome> {
        self.resolved
            .iter()
            .find(|(node, resolved)| *node == proposer && resolved.id == id)
            .map(|(_, resolved)| resolved.outcome.clone())
    }

    /// Stops a node; its disk keeps what it appended.
    pub fn kill(&mut self, id: NodeId) {
        self.trace.push(format!("{} kill {id}", self.round));
        self.nodes.insert(id, None);
    }

    /// Appends half of a record to a stopped node's log, as a crash in the
    /// middle of an append would leave it.
    pub fn tear_tail(&mut self, id: NodeId) {
        assert!(!self.is_up(id));
        let mut record = Vec::new();
        durable::encode_record(
            &durable::LogRecord::HardState(durable::HardState {
                term: u64::MAX,
                vote: 0,
                commit: 0,
            }),
            &mut record,
        );
        let disk = self.disks.get_mut(&id).expect("disk");
        disk.extend_from_slice(&record[..record.len() / 2]);
    }

    /// Restarts a node from its log file: the bytes are all it gets.
    pub fn restart(&mut self, id: NodeId) -> durable::Recovery {
        assert!(!self.is_up(id));
        let mut config = self.configs[&id].clone();
        config.seed ^= self.round;
        let disk = self.disks.get_mut(&id).expect("disk");
        let (node, recovery) = ControllerNode::from_log_file(config, disk)
            .unwrap_or_else(|error| panic!("seed {}: node {id} restart: {error}", self.seed));
        match recovery.header {
            None => *disk = durable::new_log_file(),
            Some(durable::Header::V1) => *disk = node.compacted_log(),
            Some(durable::Header::Current { .. }) => disk.truncate(recovery.valid_len as usize),
        }
        self.trace.push(format!("{} restart {id}", self.round));
        self.nodes.insert(id, Some(node));
        recovery
    }

    /// Handles every Ready of node `id`.
    fn drain(&mut self, id: NodeId) {
        loop {
            let unreachable: BTreeSet<NodeId> = self
                .nodes
                .iter()
                .filter(|(peer, node)| node.is_none() || self.isolated.contains(peer))
                .map(|(peer, _)| *peer)
                .collect();
            let Some(node) = self.nodes.get_mut(&id).and_then(Option::as_mut) else {
                return;
            };
            let ready = match node.ready() {
                Ok(Some(ready)) => ready,
                Ok(None) => return,
                Err(error) => panic!("seed {}: node {id} halted: {error}", self.seed),
            };
            // Persist before send.
            let compacts = ready.compacts_log();
            let disk = self.disks.get_mut(&id).expect("disk");
            let records = ready.log_records();
            if !records.is_empty() {
                disk.extend_from_slice(&records);
                mark_synced(disk);
            }
            if compacts {
                *disk = node.compacted_log();
            }
            for message in &ready.messages {
                // A transport that knows the peer is gone refuses at once,
                // between `ready` and `advance`: the node defers the report.
                if unreachable.contains(&message.to) || self.isolated.contains(&id) {
                    self.refused_at_send += 1;
                    node.report_unreachable(message.to);
                    if message.carries_snapshot {
                        node.report_snapshot(message.to, false);
                    }
                    continue;
                }
                self.network.push(Envelope {
                    from: id,
                    to: message.to,
                    bytes: message.bytes.clone(),
                    carries_snapshot: message.carries_snapshot,
                });
            }
            for committed in &ready.committed {
                let entry = (committed.term, committed.command.encode());
                match self.commands_by_index.get(&committed.index) {
                    None => {
                        self.commands_by_index.insert(committed.index, entry);
                    }
                    Some(existing) => assert_eq!(
                        *existing, entry,
                        "seed {}: node {id} applied another command at index {}",
                        self.seed, committed.index
                    ),
                }
                self.trace
                    .push(format!("{} {id} applied {}", self.round, committed.index));
            }
            for resolved in &ready.resolved {
                if matches!(
                    resolved.outcome,
                    ProposalOutcome::Applied(_) | ProposalOutcome::Refused(_)
                ) {
                    // An answered proposal is the command committed there.
                    let (term, _) = self.commands_by_index[&resolved.id.index];
                    assert_eq!(
                        term, resolved.id.term,
                        "seed {}: node {id} answered a proposal another entry took",
                        self.seed
                    );
                }
                self.resolved.push((id, resolved.clone()));
            }
            if ready.role == Role::Leader {
                let leader = *self.leaders_by_term.entry(ready.term).or_insert(id);
                assert_eq!(
                    leader, id,
                    "seed {}: two leaders in term {}",
                    self.seed, ready.term
                );
            }
            if self.roles.get(&id) != Some(&(ready.role, ready.term)) {
                self.roles.insert(id, (ready.role, ready.term));
                self.trace.push(format!(
                    "{} {id} {:?} term {}",
                    self.round, ready.role, ready.term
                ));
            }
            node.advance();
            let state = node.state();
            let crc = crc32c::crc32c(&state.encode());
            let recorded = *self.states_by_version.entry(state.version()).or_insert(crc);
            assert_eq!(
                recorded,
                crc,
                "seed {}: node {id} state differs at version {}",
                self.seed,
                state.version()
            );
        }
    }

    fn deliver(&mut self) {
        let mut in_flight = std::mem::take(&mut self.network);
        // Fisher–Yates with the cluster's generator: reordering.
        for index in (1..in_flight.len()).rev() {
            let other = self.rng.below(index as u64 + 1) as usize;
            in_flight.swap(index, other);
        }
        for envelope in in_flight {
            if self.rng.chance(self.faults.delay_per_mille) {
                self.network.push(envelope);
                continue;
            }
            let cut =
                self.isolated.contains(&envelope.from) || self.isolated.contains(&envelope.to);
            if self.rng.chance(self.faults.duplicate_per_mille) {
                self.network.push(envelope.clone());
            }
            if cut || self.rng.chance(self.faults.drop_per_mille) || !self.is_up(envelope.to) {
                if envelope.carries_snapshot
                    && let Some(sender) =
                        self.nodes.get_mut(&envelope.from).and_then(Option::as_mut)
                {
                    sender.report_snapshot(envelope.to, false);
                }
                continue;
            }
            let to = envelope.to;
            let node = self
                .nodes
                .get_mut(&to)
                .and_then(Option::as_mut)
                .expect("up");
            let stepped = node.step(&envelope.bytes);
            if let Err(error) = &stepped {
                self.trace
                    .push(format!("{} {to} refused a message: {error}", self.round));
            }
            self.drain(to);
            // The transport reports every snapshot's fate: raft-rs keeps
            // the follower paused until it hears one way or the other.
            if envelope.carries_snapshot {
                self.snapshots_sent += 1;
                if let Some(sender) = self.nodes.get_mut(&envelope.from).and_then(Option::as_mut) {
                    sender.report_snapshot(to, stepped.is_ok());
                }
            }
        }
    }

    /// One line per node, for failure messages.
    pub fn describe(&self) -> String {
        self.nodes
            .iter()
            .map(|(id, node)| match node {
                None => format!("node {id}: down"),
                Some(node) => format!(
                    "node {id}: {:?} term {} leader {:?} commit {} version {} snapshot {} [{}]",
                    node.role(),
                    node.term(),
                    node.leader_id(),
                    node.commit_index(),
                    node.state().version(),
                    node.snapshot_index(),
                    if node.is_leader() {
                        node.describe_progress()
                    } else {
                        String::new()
                    }
                ),
            })
            .chain(
                self.trace
                    .iter()
                    .filter(|line| line.contains("refused"))
                    .rev()
                    .take(5)
                    .cloned(),
            )
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Asserts every live node applied the same state.
    pub fn assert_converged(&self) {
        let states: Vec<(NodeId, Vec<u8>)> = self
            .nodes
            .iter()
            .filter_map(|(id, node)| node.as_ref().map(|node| (*id, node.state().encode())))
            .collect();
        for (id, state) in &states[1..] {
            assert_eq!(
                *state, states[0].1,
                "seed {}: node {id} and node {} differ",
                self.seed, states[0].0
            );
        }
    }

    /// Runs until every live node applied up to the leader's commit index.
    pub fn settle(&mut self) {
        self.run_until(2_000, "every node applies the leader's commit", |cluster| {
            let Some(leader) = cluster.leader() else {
                return false;
            };
            let commit = cluster.node(leader).expect("leader").commit_index();
            cluster
                .nodes
                .values()
                .flatten()
                .all(|node| node.state().version() >= commit && node.commit_index() >= commit)
        });
    }

    /// The highest index any node ever applied, crashed nodes included.
    pub fn highest_applied(&self) -> u64 {
        self.commands_by_index
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
    }

    /// Committed commands are never lost: every live node's state is what
    /// applying, in index order, every command any node ever applied gives
    /// (indexes without one are a new leader's empty entries), and no node
    /// is behind the highest index ever applied.
    pub fn assert_nothing_committed_was_lost(&self) {
        let mut expected = MetadataState::default();
        for (index, (_, bytes)) in &self.commands_by_index {
            let command = Command::decode(bytes).expect("applied commands decode");
            let _ = expected.apply(*index, &command);
        }
        for (id, node) in &self.nodes {
            let Some(node) = node else { continue };
            let state = node.state();
            assert!(
                state.version() >= self.highest_applied(),
                "{}: node {id} is at version {} but index {} was applied",
                self.replay(),
                state.version(),
                self.highest_applied()
            );
            let mut replayed = expected.clone();
            if state.version() > replayed.version() {
                replayed.note_applied(state.version());
            }
            assert_eq!(
                replayed.encode(),
                state.encode(),
                "{}: node {id}'s state is not the replay of the committed commands",
                self.replay()
            );
        }
    }
}

/// Records in the header that all of `disk` is durable, as the broker does
/// after each fsync of an append.
pub fn mark_synced(disk: &mut [u8]) {
    let sequence = durable::synced_length(disk).map_or(0, |synced| synced.sequence + 1);
    let slot = durable::synced_length_slot(sequence, disk.len() as u64);
    let at = slot.position as usize;
    disk[at..at + durable::SLOT_BYTES].copy_from_slice(&slot.bytes);
}
