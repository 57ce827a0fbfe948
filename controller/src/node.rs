//! The sans-I/O controller node: raft-rs's `RawNode` over the
//! in-memory `MemoryLog`, applying committed commands to a [`MetadataState`].
//!
//! Time, messages and proposals come in as calls (`tick`, `step`,
//! `propose`); work goes out as a [`ControllerReady`]. The node never
//! touches a clock, a file or a socket, and everything random in it comes
//! from the configured seed, so a test that drives nodes with the same
//! seed and the same delivery order gets the same history.
//!
//! Election jitter: raft-rs draws its randomized election timeout from an
//! unseeded thread RNG. The node pins that range to exactly
//! `election_tick` (`max_election_tick = election_tick + 1`) and adds its
//! own seeded jitter of 0..election_tick ticks by withholding ticks from a
//! follower or candidate that is about to time out, drawing a new jitter
//! whenever raft resets its election clock (a new term, a new role, a
//! message from the leader). The effective timeout is uniform over
//! `[election_tick, 2 × election_tick)` as in raft-rs, but reproducible.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use bytes::Bytes;
use corelog_wire::rng::SplitMix64;
use raft::eraftpb::{EntryType, Message, MessageType};
use raft::{RawNode, SnapshotStatus, StateRole};

use crate::command::{COMMAND_BYTES_MAX, Command};
use crate::durable::{self, RecoveredLog, Recovery, encode_log};
use crate::logger::raft_logger;
use crate::message;
use crate::ready::{
    Committed, ControllerError, ControllerReady, OutboundMessage, ProposalOutcome, ProposeError,
    Resolved, Role, StepError,
};
use crate::state::MetadataState;
use crate::storage::{MemoryLog, from_raft_entry, from_raft_snapshot};
use crate::types::{NodeId, ProposalId};

/// Messages buffered between `ready` and `advance` before `step` refuses.
const DEFERRED_MESSAGES_MAX: usize = 4096;
/// Transport reports buffered between `ready` and `advance`; beyond it
/// `report_unreachable` is dropped (it is only a hint) and a snapshot
/// report is kept by replacing the oldest unreachable one, if any.
const DEFERRED_REPORTS_MAX: usize = 1024;

/// A transport report that arrived while a Ready was in flight (the shell
/// sends messages between `ready` and `advance`, so a synchronous send
/// failure lands exactly there). Applied at `advance`: losing a snapshot
/// report would leave raft-rs pausing that follower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Report {
    Unreachable(NodeId),
    Snapshot { peer: NodeId, delivered: bool },
}

/// How a controller node runs. Every node of a group uses the same
/// `peers`, `election_tick` and `heartbeat_tick`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// This node; a member of `peers`.
    pub id: NodeId,
    /// Every voter of the group, this node included (1, 3 or 5 nodes).
    pub peers: Vec<NodeId>,
    /// Seeds the election jitter. Give each process a different one in
    /// production (e.g. from the node id and start time); tests derive it
    /// from their seed.
    pub seed: u64,
    /// Ticks without a leader before an election (plus jitter). With the
    /// broker's suggested 100 ms tick, 10 ticks = 1–2 s.
    pub election_tick: usize,
    /// Ticks between the leader's heartbeats; below `election_tick`.
    pub heartbeat_tick: usize,
    /// Applied entries between snapshots: bounds the log (and a restart's
    /// replay) to about this many entries.
    pub snapshot_interval_entries: u64,
    /// Bytes of entries per append message.
    pub max_size_per_msg: u64,
    /// Append messages in flight per follower.
    pub max_inflight_msgs: usize,
}

impl ControllerConfig {
    /// Defaults for `id` in a group of `peers`.
    #[must_use]
    pub fn new(id: NodeId, peers: Vec<NodeId>, seed: u64) -> ControllerConfig {
        ControllerConfig {
            id,
            peers,
            seed,
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_interval_entries: 1024,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
        }
    }
}

/// Election jitter: the workspace's seeded generator, so that the same
/// seed gives the same timeouts.
type Jitter = SplitMix64;

/// One controller node. See the module docs and [`ControllerReady`] for
/// how the shell drives it.
pub struct ControllerNode {
    config: ControllerConfig,
    raw: RawNode<MemoryLog>,
    state: MetadataState,
    /// The Ready handed out and not yet advanced.
    in_flight: Option<raft::Ready>,
    /// Arrived while a Ready was in flight; stepped at `advance`.
    deferred_messages: VecDeque<Message>,
    deferred_ticks: usize,
    deferred_reports: Vec<Report>,
    /// Produced by `advance`; handed out by the next `ready`.
    pending: ControllerReady,
    /// This node's proposals not yet resolved: index → term.
    proposals: BTreeMap<u64, u64>,
    /// The hard state last handed out for persistence.
    handed_hard_state: crate::durable::HardState,
    halted: Option<ControllerError>,
    jitter: Jitter,
    jitter_left: usize,
    observed_term_role: (u64, StateRole),
    observed_election_elapsed: usize,
}

impl fmt::Debug for ControllerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerNode")
            .field("id", &self.config.id)
            .field("role", &self.role())
            .field("term", &self.term())
            .field("leader", &self.leader_id())
            .field("metadata_version", &self.state.version())
            .field("halted", &self.halted)
            .finish_non_exhaustive()
    }
}

impl ControllerNode {
    /// A node restarting from `recovered` (empty for a new node).
    ///
    /// # Errors
    /// [`ControllerError`] when the configuration is unusable, or the
    /// recovered snapshot does not decode or names other voters.
    pub fn new(
        config: ControllerConfig,
        recovered: RecoveredLog,
    ) -> Result<ControllerNode, ControllerError> {
        let mut peers = config.peers.clone();
        peers.sort();
        peers.dedup();
        if peers.len() != config.peers.len()
            || peers.iter().any(|peer| peer.0 == 0)
            || !peers.contains(&config.id)
        {
            return Err(ControllerError::InvalidConfig(format!(
                "peers {:?} must be distinct, non-zero and include this node {}",
                config.peers, config.id
            )));
        }
        let state = match &recovered.snapshot {
            None => MetadataState::default(),
            Some(snapshot) => {
                let mut recorded = snapshot.voters.clone();
                recorded.sort();
                if recorded != peers {
                    return Err(ControllerError::PeersMismatch {
                        configured: peers,
                        recorded,
                    });
                }
                decode_snapshot_state(snapshot.index, &snapshot.state)?
            }
        };
        check_recovered(&recovered).map_err(ControllerError::InvalidConfig)?;
        let raft_config = raft::Config {
            id: config.id.0,
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            min_election_tick: config.election_tick,
            max_election_tick: config.election_tick + 1,
            applied: state.version(),
            max_size_per_msg: config.max_size_per_msg,
            max_inflight_msgs: config.max_inflight_msgs,
            check_quorum: true,
            pre_vote: true,
            ..raft::Config::default()
        };
        raft_config
            .validate()
            .map_err(|error| ControllerError::InvalidConfig(error.to_string()))?;
        let storage = MemoryLog::new(&peers, &recovered);
        let handed_hard_state = storage.hard_state();
        let raw = RawNode::new(&raft_config, storage, &raft_logger())
            .map_err(|error| ControllerError::Raft(error.to_string()))?;
        let mut jitter = Jitter::new(config.seed ^ config.id.0.wrapping_mul(0xA076_1D64_78BD_642F));
        let jitter_left = jitter.index(config.election_tick);
        let observed_term_role = (raw.raft.term, raw.raft.state);
        let observed_election_elapsed = raw.raft.election_elapsed;
        let mut node = ControllerNode {
            config,
            raw,
            state,
            in_flight: None,
            deferred_messages: VecDeque::new(),
            deferred_ticks: 0,
            deferred_reports: Vec::new(),
            pending: ControllerReady::default(),
            proposals: BTreeMap::new(),
            handed_hard_state,
            halted: None,
            jitter,
            jitter_left,
            observed_term_role,
            observed_election_elapsed,
        };
        if node.config.peers.len() == 1 {
            // The only voter: nobody else can win or needs to be heard, so
            // it elects itself now rather than after an election timeout
            // (1 to 2 s that a single node would spend unable to serve).
            node.raw
                .campaign()
                .map_err(|error| ControllerError::Raft(error.to_string()))?;
            node.observe_timers();
        }
        Ok(node)
    }

    /// A node restarting from the bytes of its log file (empty for a new
    /// node): [`durable::recover`] followed by [`ControllerNode::new`].
    ///
    /// Before appending the next Ready's records the shell must fix the
    /// file as [`Recovery::header`] says (see the crate docs): create it
    /// whole for a new node, rewrite a first-format file, otherwise cut it
    /// to [`Recovery::valid_len`] (dropping a torn tail). The returned
    /// [`Recovery`] also says whether a torn tail was cut, for the
    /// broker's log.
    ///
    /// # Errors
    /// [`ControllerError::Durable`] when the file is corrupt (restore the
    /// node from a healthy peer), or what [`ControllerNode::new`] refuses.
    pub fn from_log_file(
        config: ControllerConfig,
        file: &[u8],
    ) -> Result<(ControllerNode, Recovery), ControllerError> {
        let recovery = durable::recover(file).map_err(ControllerError::Durable)?;
        let node = ControllerNode::new(config, recovery.log.clone())?;
        Ok((node, recovery))
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The applied metadata.
    #[must_use]
    pub fn state(&self) -> &MetadataState {
        &self.state
    }

    /// Whether this node is the controller leader.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The leader as this node knows it.
    #[must_use]
    pub fn leader_id(&self) -> Option<NodeId> {
        match self.raw.raft.leader_id {
            0 => None,
            id => Some(NodeId(id)),
        }
    }

    /// This node's Raft role.
    #[must_use]
    pub fn role(&self) -> Role {
        match self.raw.raft.state {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        }
    }

    /// This node's Raft term.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The highest index this node knows committed.
    #[must_use]
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// Why the node stopped, if it did.
    #[must_use]
    pub fn halted(&self) -> Option<&ControllerError> {
        self.halted.as_ref()
    }

    /// One unit of time (the broker ticks every 100 ms or so). Deferred to
    /// `advance` while a Ready is in flight.
    pub fn tick(&mut self) {
        if self.halted.is_some() {
            return;
        }
        if self.in_flight.is_some() {
            self.deferred_ticks += 1;
            return;
        }
        let raft = &self.raw.raft;
        let about_to_time_out = raft.state != StateRole::Leader
            && raft.election_elapsed + 1 >= self.config.election_tick;
        if about_to_time_out && self.jitter_left > 0 {
            self.jitter_left -= 1;
            return;
        }
        self.raw.tick();
        self.observe_timers();
    }

    /// Hands a message from another controller node to Raft.
    ///
    /// # Errors
    /// [`StepError`] when the bytes are damaged, not meant for this node,
    /// carry a bad snapshot, or Raft refuses them. The node is unharmed:
    /// log and drop the message.
    pub fn step(&mut self, bytes: &[u8]) -> Result<(), StepError> {
        if self.halted.is_some() {
            return Err(StepError::Halted);
        }
        let message = message::decode(bytes).map_err(StepError::Undecodable)?;
        self.check_message(&message)?;
        if self.in_flight.is_some() {
            if self.deferred_messages.len() >= DEFERRED_MESSAGES_MAX {
                return Err(StepError::Busy);
            }
            self.deferred_messages.push_back(message);
            return Ok(());
        }
        self.step_checked(message)
    }

    fn check_message(&self, message: &Message) -> Result<(), StepError> {
        if message.to != self.config.id.0 {
            return Err(StepError::WrongRecipient {
                to: message.to,
                this: self.config.id,
            });
        }
        if !self.config.peers.contains(&NodeId(message.from)) || message.from == message.to {
            return Err(StepError::UnknownPeer(message.from));
        }
        let message_type = message.get_msg_type();
        if raft::raw_node::is_local_msg(message_type) || message_type == MessageType::MsgPropose {
            return Err(StepError::LocalMessage(format!("{message_type:?}")));
        }
        if message_type == MessageType::MsgSnapshot {
            let snapshot = message.get_snapshot();
            let index = snapshot.get_metadata().index;
            decode_snapshot_state(index, &snapshot.data)
                .map_err(|error| StepError::BadSnapshot(error.to_string()))?;
            let mut voters = snapshot.get_metadata().get_conf_state().voters.clone();
            voters.sort_unstable();
            let mut peers: Vec<u64> = self.config.peers.iter().map(|peer| peer.0).collect();
            peers.sort_unstable();
            if voters != peers {
                return Err(StepError::BadSnapshot(format!(
                    "voters {voters:?} are not this group's {peers:?}"
                )));
            }
        }
        Ok(())
    }

    fn step_checked(&mut self, message: Message) -> Result<(), StepError> {
        let result = self.raw.step(message);
        self.observe_timers();
        result.map_err(|error| match error {
            raft::Error::StepPeerNotFound => StepError::UnknownPeer(0),
            raft::Error::StepLocalMsg => StepError::LocalMessage("local".to_owned()),
            other => StepError::Raft(other.to_string()),
        })
    }

    /// Proposes a command. The leader appends it at once; the returned id
    /// shows up in [`ControllerReady::resolved`] when it committed (and
    /// applied) or was lost.
    ///
    /// # Errors
    /// [`ProposeError::NotLeader`] on followers (forward to the leader),
    /// [`ProposeError::ReadyInProgress`] between `ready` and `advance`,
    /// [`ProposeError::Dropped`] when Raft refuses it for now.
    pub fn propose(&mut self, command: &Command) -> Result<ProposalId, ProposeError> {
        if self.halted.is_some() {
            return Err(ProposeError::Halted);
        }
        if self.in_flight.is_some() {
            return Err(ProposeError::ReadyInProgress);
        }
        if !self.is_leader() {
            return Err(ProposeError::NotLeader {
                leader: self.leader_id(),
            });
        }
        let data = command.encode();
        if data.len() > COMMAND_BYTES_MAX {
            return Err(ProposeError::TooLarge(data.len()));
        }
        let before = self.raw.raft.raft_log.last_index();
        self.raw
            .propose(Vec::new(), data)
            .map_err(|_| ProposeError::Dropped)?;
        let index = self.raw.raft.raft_log.last_index();
        if index != before + 1 {
            return Err(ProposeError::Dropped);
        }
        let term = self.raw.raft.term;
        self.proposals.insert(index, term);
        Ok(ProposalId { term, index })
    }

    /// Tells Raft a peer could not be reached, so that it stops sending
    /// optimistically and probes instead. May be called at any time, also
    /// between `ready` and `advance` (then applied at `advance`).
    pub fn report_unreachable(&mut self, peer: NodeId) {
        self.report(Report::Unreachable(peer));
    }

    /// Tells Raft whether a message with `carries_snapshot` was delivered.
    /// Every such message needs one report: raft-rs sends that follower
    /// nothing else until it hears. May be called at any time, also between
    /// `ready` and `advance` (then applied at `advance`).
    pub fn report_snapshot(&mut self, peer: NodeId, delivered: bool) {
        self.report(Report::Snapshot { peer, delivered });
    }

    fn report(&mut self, report: Report) {
        let peer = report.peer();
        if self.halted.is_some() || peer == self.config.id || !self.config.peers.contains(&peer) {
            return;
        }
        if self.in_flight.is_none() {
            self.apply_report(report);
            return;
        }
        if self.deferred_reports.len() >= DEFERRED_REPORTS_MAX {
            let unreachable = self
                .deferred_reports
                .iter()
                .position(|queued| matches!(queued, Report::Unreachable(_)));
            match (report, unreachable) {
                (Report::Snapshot { .. }, Some(position)) => {
                    self.deferred_reports.remove(position);
                }
                _ => {
                    tracing::debug!(node = %self.config.id, ?report, "transport report dropped");
                    return;
                }
            }
        }
        self.deferred_reports.push(report);
    }

    fn apply_report(&mut self, report: Report) {
        match report {
            Report::Unreachable(peer) => self.raw.report_unreachable(peer.0),
            Report::Snapshot { peer, delivered } => {
                let status = if delivered {
                    SnapshotStatus::Finish
                } else {
                    SnapshotStatus::Failure
                };
                self.raw.report_snapshot(peer.0, status);
            }
        }
    }

    /// The work to do now, if any. See [`ControllerReady`] for the order;
    /// call [`ControllerNode::advance`] after it, then `ready` again until
    /// it returns `None`.
    ///
    /// # Errors
    /// [`ControllerError`] when the node cannot go on; every later call
    /// returns it again.
    pub fn ready(&mut self) -> Result<Option<ControllerReady>, ControllerError> {
        if let Some(error) = &self.halted {
            return Err(error.clone());
        }
        if self.in_flight.is_some() {
            return Err(ControllerError::ReadyInProgress);
        }
        let mut out = std::mem::take(&mut self.pending);
        if self.raw.has_ready() {
            let mut ready = self.raw.ready();
            if let Err(error) = self.take_raft_ready(&mut ready, &mut out) {
                self.halted = Some(error.clone());
                return Err(error);
            }
            self.in_flight = Some(ready);
        }
        if !self.is_leader() {
            // A deposed leader cannot learn its proposals' fate soon enough
            // to answer callers: an entry it appended may still commit under
            // a later leader, or never. Callers retry at the new leader and
            // find the effect applied or not (every command is checked
            // against the state, so a retry cannot apply twice harmfully).
            for (index, term) in std::mem::take(&mut self.proposals) {
                out.resolved.push(Resolved {
                    id: ProposalId { term, index },
                    outcome: ProposalOutcome::Unknown,
                });
            }
        }
        let hard_state = self.raw.store().hard_state();
        if hard_state != self.handed_hard_state {
            out.hard_state = Some(hard_state);
            self.handed_hard_state = hard_state;
        }
        if out.snapshot.is_none() {
            match self.maybe_take_snapshot() {
                Ok(snapshot) => out.snapshot = snapshot,
                Err(error) => {
                    self.halted = Some(error.clone());
                    return Err(error);
                }
            }
        }
        if !out.has_work() && self.in_flight.is_none() {
            return Ok(None);
        }
        out.leader = self.leader_id();
        out.role = self.role();
        out.term = self.term();
        out.metadata_version = self.state.version();
        Ok(Some(out))
    }

    fn take_raft_ready(
        &mut self,
        ready: &mut raft::Ready,
        out: &mut ControllerReady,
    ) -> Result<(), ControllerError> {
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            let index = snapshot.get_metadata().index;
            self.state = decode_snapshot_state(index, &snapshot.data)?;
            self.raw.mut_store().install_snapshot(&snapshot);
            let covered: Vec<u64> = self.proposals.range(..=index).map(|(i, _)| *i).collect();
            for proposal in covered {
                if let Some(term) = self.proposals.remove(&proposal) {
                    out.resolved.push(Resolved {
                        id: ProposalId {
                            term,
                            index: proposal,
                        },
                        outcome: ProposalOutcome::Unknown,
                    });
                }
            }
            out.snapshot = Some(from_raft_snapshot(&snapshot, true));
        }
        out.entries = ready.entries().iter().map(from_raft_entry).collect();
        self.raw
            .mut_store()
            .append(ready.entries())
            .map_err(ControllerError::Raft)?;
        if let Some(hard_state) = ready.hs() {
            self.raw.mut_store().set_hard_state(hard_state);
        }
        out.must_sync = ready.must_sync();
        let mut messages = ready.take_messages();
        messages.extend(ready.take_persisted_messages());
        out.messages.extend(encode_messages(messages));
        let committed = ready.take_committed_entries();
        self.apply_entries(committed, out)
    }

    /// Applies committed entries in order; stops at the first that cannot
    /// be applied.
    fn apply_entries(
        &mut self,
        entries: Vec<raft::eraftpb::Entry>,
        out: &mut ControllerReady,
    ) -> Result<(), ControllerError> {
        for entry in entries {
            let index = entry.index;
            if index <= self.state.version() {
                continue;
            }
            if entry.get_entry_type() != EntryType::EntryNormal {
                return Err(ControllerError::UnsupportedEntry { index });
            }
            let proposed_term = self.proposals.remove(&index);
            let resolve = |outcome| {
                proposed_term.map(|term| Resolved {
                    id: ProposalId { term, index },
                    outcome,
                })
            };
            if entry.data.is_empty() {
                // A new leader's empty entry.
                self.state.note_applied(index);
                out.resolved.extend(resolve(ProposalOutcome::Lost));
                continue;
            }
            let command = Command::decode(&entry.data)
                .map_err(|error| ControllerError::UndecodableCommand { index, error })?;
            let outcome = self.state.apply(index, &command);
            let ours = proposed_term == Some(entry.term);
            out.resolved.extend(resolve(match (&outcome, ours) {
                (_, false) => ProposalOutcome::Lost,
                (Ok(outcome), true) => ProposalOutcome::Applied(outcome.clone()),
                (Err(error), true) => ProposalOutcome::Refused(error.clone()),
            }));
            out.committed.push(Committed {
                index,
                term: entry.term,
                command,
                outcome,
            });
        }
        Ok(())
    }

    fn maybe_take_snapshot(
        &mut self,
    ) -> Result<Option<crate::durable::SnapshotRecord>, ControllerError> {
        let applied = self.state.version();
        let since = applied.saturating_sub(self.raw.store().snapshot_index());
        if since < self.config.snapshot_interval_entries.max(1) {
            return Ok(None);
        }
        let state = Bytes::from(self.state.encode());
        self.raw
            .mut_store()
            .compact(applied, state)
            .map(Some)
            .map_err(ControllerError::Raft)
    }

    /// Tells the node the last Ready was handled (records durable, messages
    /// sent). Then call `ready` again.
    pub fn advance(&mut self) {
        let Some(ready) = self.in_flight.take() else {
            return;
        };
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit);
        }
        self.pending
            .messages
            .extend(encode_messages(light.take_messages()));
        let committed = light.take_committed_entries();
        let mut pending = std::mem::take(&mut self.pending);
        let applied = self.apply_entries(committed, &mut pending);
        self.pending = pending;
        if let Err(error) = applied {
            self.halted = Some(error);
            return;
        }
        self.raw.advance_apply();
        self.observe_timers();
        while let Some(message) = self.deferred_messages.pop_front() {
            // A deferred message that Raft refuses is dropped, as it would
            // have been had it arrived a moment later.
            if let Err(error) = self.step_checked(message) {
                tracing::debug!(node = %self.config.id, %error, "deferred raft message refused");
            }
        }
        for report in std::mem::take(&mut self.deferred_reports) {
            self.apply_report(report);
        }
        for _ in 0..std::mem::take(&mut self.deferred_ticks) {
            self.tick();
        }
    }

    /// The whole log file as it should be after a snapshot (the storage
    /// as raft-rs sees it, including the last Ready's records): write it to
    /// a new file, fsync, rename over the old one, fsync the directory.
    /// Call it only when the last Ready's records are durable (right after
    /// appending them, or after `advance`); see
    /// [`ControllerReady::compacts_log`] for when.
    #[must_use]
    pub fn compacted_log(&self) -> Vec<u8> {
        encode_log(&self.raw.store().recovered())
    }

    /// The latest snapshot's index (0 for none): the log holds only what
    /// follows it.
    #[must_use]
    pub fn snapshot_index(&self) -> u64 {
        self.raw.store().snapshot_index()
    }

    /// The latest snapshot's state bytes, for a broker that wants to copy
    /// metadata without replaying the log.
    #[must_use]
    pub fn latest_snapshot_state(&self) -> Bytes {
        self.raw.store().latest_snapshot().data.clone()
    }

    /// Raft's view of each follower's replication (leader only), for
    /// diagnostics.
    #[must_use]
    pub fn describe_progress(&self) -> String {
        self.raw
            .raft
            .prs()
            .iter()
            .map(|(id, progress)| format!("{id}: {progress:?}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Draws new jitter when raft reset its election clock.
    fn observe_timers(&mut self) {
        let raft = &self.raw.raft;
        let term_role = (raft.term, raft.state);
        if term_role != self.observed_term_role
            || raft.election_elapsed < self.observed_election_elapsed
        {
            self.jitter_left = self.jitter.index(self.config.election_tick);
        }
        self.observed_term_role = term_role;
        self.observed_election_elapsed = raft.election_elapsed;
    }
}

impl Report {
    fn peer(self) -> NodeId {
        match self {
            Report::Unreachable(peer) | Report::Snapshot { peer, .. } => peer,
        }
    }
}

fn encode_messages(messages: Vec<Message>) -> Vec<OutboundMessage> {
    messages
        .into_iter()
        .filter_map(|message| {
            let bytes = message::encode(&message);
            if bytes.is_none() {
                tracing::error!(
                    to = message.to,
                    "raft message does not encode; raft will resend"
                );
            }
            Some(OutboundMessage {
                to: NodeId(message.to),
                carries_snapshot: message.get_msg_type() == MessageType::MsgSnapshot,
                bytes: bytes?,
            })
        })
        .collect()
}

/// What raft-rs would otherwise panic on: a log that is not consecutive
/// after its snapshot, or a commit index outside it.
fn check_recovered(recovered: &RecoveredLog) -> Result<(), String> {
    let (base, base_term) = recovered
        .snapshot
        .as_ref()
        .map_or((0, 0), |snapshot| (snapshot.index, snapshot.term));
    let mut expected = base + 1;
    let mut previous_term = base_term;
    for entry in &recovered.entries {
        if entry.index != expected || entry.term < previous_term {
            return Err(format!(
                "recovered entry {} (term {}) does not follow index {} (term {previous_term})",
                entry.index,
                entry.term,
                expected - 1
            ));
        }
        expected += 1;
        previous_term = entry.term;
    }
    let commit = recovered.hard_state.commit;
    if commit < base || commit >= expected {
        return Err(format!(
            "recovered commit index {commit} is outside the log {base}..={}",
            expected - 1
        ));
    }
    Ok(())
}

fn decode_snapshot_state(index: u64, bytes: &[u8]) -> Result<MetadataState, ControllerError> {
    let state = MetadataState::decode(bytes)
        .map_err(|error| ControllerError::BadSnapshot { index, error })?;
    if state.version() != index {
        return Err(ControllerError::BadSnapshot {
            index,
            error: crate::codec::DecodeError::Invalid {
                what: "snapshot",
                at: 0,
                reason: format!("state version {} is not the index", state.version()),
            },
        });
    }
    Ok(state)
}
