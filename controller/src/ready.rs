//! What a [`crate::node::ControllerNode`] hands the broker's I/O shell, and
//! its errors.

use crate::codec::DecodeError;
use crate::command::{Command, Outcome};
use crate::durable::{self, HardState, LogEntry, LogRecord, SnapshotRecord};
use crate::state::CommandError;
use crate::types::{NodeId, ProposalId};

/// A node's Raft role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Follows a leader (or waits for one).
    #[default]
    Follower,
    /// Asking whether it could win an election (pre-vote), without raising
    /// the term.
    PreCandidate,
    /// Campaigning in a new term.
    Candidate,
    /// The controller leader: the only node that proposes.
    Leader,
}

/// A message for another controller node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundMessage {
    /// The recipient.
    pub to: NodeId,
    /// Opaque bytes for its [`crate::node::ControllerNode::step`].
    pub bytes: Vec<u8>,
    /// It carries a snapshot: once the transport knows whether it was
    /// delivered, tell the node with `report_snapshot(to, delivered)`.
    /// raft-rs sends that follower nothing else until it hears back (or
    /// the follower's acknowledgement arrives), so a lost report stalls it.
    pub carries_snapshot: bool,
}

/// A committed command, applied to the node's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Its Raft index, now the metadata version.
    pub index: u64,
    /// The term it was proposed in.
    pub term: u64,
    /// The command.
    pub command: Command,
    /// What applying it did.
    pub outcome: Result<Outcome, CommandError>,
}

/// How one of this node's proposals ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposalOutcome {
    /// Committed and applied.
    Applied(Outcome),
    /// Committed, and refused by the state machine.
    Refused(CommandError),
    /// Another entry committed at its index: it will never apply. Retry.
    Lost,
    /// The node lost leadership before the proposal committed, or
    /// installed a snapshot covering it: it may or may not apply. Read the
    /// metadata and retry at the new leader if needed.
    Unknown,
}

/// A proposal of this node that reached its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// What [`crate::node::ControllerNode::propose`] returned.
    pub id: ProposalId,
    /// How it ended.
    pub outcome: ProposalOutcome,
}

/// The work a node hands the I/O shell. Handle it in this order:
///
/// 1. append [`ControllerReady::log_records`] to the log file and, if it is
///    not empty, fsync it (persist before send: a vote or an append
///    acknowledgement must never be sent for state that a crash could lose).
///    If the fsync fails, stop the controller role: the records must be
///    presumed lost, and retrying would ack what the disk may not hold;
/// 2. if [`ControllerReady::compacts_log`], rewrite the file from
///    [`crate::node::ControllerNode::compacted_log`] (new file, fsync,
///    rename over the old one, fsync the directory) — now or at any later
///    point where everything handed out so far is durable;
/// 3. send [`ControllerReady::messages`] (in any order, best effort; report
///    unreachable peers and snapshot deliveries back to the node);
/// 4. act on [`ControllerReady::committed`] and [`ControllerReady::resolved`]
///    (publish the new metadata, answer waiting requests);
/// 5. call [`crate::node::ControllerNode::advance`], then
///    [`crate::node::ControllerNode::ready`] again until it returns `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerReady {
    /// A snapshot to persist: installed from the leader (it resets the log,
    /// written before the entries) or taken locally to bound the log
    /// (written after them). The log file can then be rewritten with
    /// [`crate::node::ControllerNode::compacted_log`].
    pub snapshot: Option<SnapshotRecord>,
    /// Entries to append.
    pub entries: Vec<LogEntry>,
    /// A hard state to persist.
    pub hard_state: Option<HardState>,
    /// False when only the commit index changed: the fsync may then be
    /// deferred to the next Ready's (Raft does not need the commit index to
    /// be durable). Always fsyncing non-empty `log_records` is simplest,
    /// and keeps a power loss from leaving more than one unsynced record.
    pub must_sync: bool,
    /// Messages to send after the records are durable.
    pub messages: Vec<OutboundMessage>,
    /// Commands applied since the last Ready, in log order.
    pub committed: Vec<Committed>,
    /// This node's proposals that ended.
    pub resolved: Vec<Resolved>,
    /// The leader as this node knows it.
    pub leader: Option<NodeId>,
    /// This node's role.
    pub role: Role,
    /// This node's term.
    pub term: u64,
    /// The metadata version after `committed`.
    pub metadata_version: u64,
}

impl ControllerReady {
    /// The records to append to the log file, in the order recovery needs:
    /// an installed snapshot, the entries, the hard state, a taken snapshot.
    #[must_use]
    pub fn log_records(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        let (installed, taken) = match &self.snapshot {
            Some(snapshot) if snapshot.resets_log => (Some(snapshot), None),
            other => (None, other.as_ref()),
        };
        if let Some(snapshot) = installed {
            durable::encode_record(&LogRecord::Snapshot(snapshot.clone()), &mut bytes);
        }
        for entry in &self.entries {
            durable::encode_record(&LogRecord::Entry(entry.clone()), &mut bytes);
        }
        if let Some(hard_state) = self.hard_state {
            durable::encode_record(&LogRecord::HardState(hard_state), &mut bytes);
        }
        if let Some(snapshot) = taken {
            durable::encode_record(&LogRecord::Snapshot(snapshot.clone()), &mut bytes);
        }
        bytes
    }

    /// True when this Ready carries a snapshot (taken to bound the log, or
    /// installed from the leader): the log file now holds records that no
    /// longer matter, and once this Ready's records are durable the shell
    /// should rewrite it from
    /// [`crate::node::ControllerNode::compacted_log`]. Skipping a rewrite
    /// is safe (recovery replays the longer file to the same result) but
    /// lets the file grow.
    #[must_use]
    pub fn compacts_log(&self) -> bool {
        self.snapshot.is_some()
    }

    pub(crate) fn has_work(&self) -> bool {
        self.snapshot.is_some()
            || !self.entries.is_empty()
            || self.hard_state.is_some()
            || !self.messages.is_empty()
            || !self.committed.is_empty()
            || !self.resolved.is_empty()
    }
}

/// The node cannot go on: the shell must stop the controller role (exit
/// the process with a reason code, DESIGN: no half-alive shard).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    /// The configuration is not usable.
    #[error("invalid controller configuration: {0}")]
    InvalidConfig(String),
    /// The recovered snapshot names other voters than configured;
    /// membership changes are not supported yet.
    #[error("the controller log names voters {recorded:?}, the configuration {configured:?}")]
    PeersMismatch {
        /// From the configuration.
        configured: Vec<NodeId>,
        /// From the recovered snapshot.
        recorded: Vec<NodeId>,
    },
    /// A recovered or installed snapshot does not decode.
    #[error("controller snapshot at index {index} is unusable: {error}")]
    BadSnapshot {
        /// Its index.
        index: u64,
        /// Why.
        error: DecodeError,
    },
    /// A committed entry holds a command this build cannot decode (written
    /// by a newer version, or damaged in memory). Applying nothing further
    /// keeps this node from diverging from the others.
    #[error("committed entry {index} does not decode: {error}")]
    UndecodableCommand {
        /// Its index.
        index: u64,
        /// Why.
        error: DecodeError,
    },
    /// A committed membership change: this crate never proposes one.
    #[error("committed entry {index} is a membership change, which is not supported")]
    UnsupportedEntry {
        /// Its index.
        index: u64,
    },
    /// The log file does not recover (see [`durable::DurableError`]).
    #[error("controller log file unusable: {0}")]
    Durable(durable::DurableError),
    /// Raft or the storage refused an operation that cannot fail when the
    /// node is driven correctly.
    #[error("raft failure: {0}")]
    Raft(String),
    /// `ready` was called again before `advance`.
    #[error("ready called before the previous ready was advanced")]
    ReadyInProgress,
}

/// Why an incoming message was not stepped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Damaged, oversized or of an unknown version.
    #[error("undecodable raft message: {0}")]
    Undecodable(DecodeError),
    /// Addressed to another node.
    #[error("raft message for node {to} delivered to node {this}")]
    WrongRecipient {
        /// Its recipient.
        to: u64,
        /// This node.
        this: NodeId,
    },
    /// From a node outside the controller group.
    #[error("raft message from unknown node {0}")]
    UnknownPeer(u64),
    /// A message type that only the node itself may create (or a forwarded
    /// proposal: proposals enter only through `propose`).
    #[error("raft message of local type {0}")]
    LocalMessage(String),
    /// A snapshot whose metadata state does not decode or does not match.
    #[error("bad snapshot in raft message: {0}")]
    BadSnapshot(String),
    /// Too many messages arrived between `ready` and `advance`.
    #[error("too many messages queued while a ready is in progress")]
    Busy,
    /// The node stopped (see [`ControllerError`]).
    #[error("the controller node has stopped")]
    Halted,
    /// Raft refused the message.
    #[error("raft refused the message: {0}")]
    Raft(String),
}

/// Why a proposal was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Only the leader proposes; forward to `leader` if known.
    #[error("not the controller leader (leader: {leader:?})")]
    NotLeader {
        /// The leader as this node knows it.
        leader: Option<NodeId>,
    },
    /// Call again after `advance`.
    #[error("a ready is in progress")]
    ReadyInProgress,
    /// The encoded command is over the bound.
    #[error("command of {0} bytes is too large")]
    TooLarge(usize),
    /// Raft dropped it (a leadership transfer is under way, or too much is
    /// uncommitted). Retry later.
    #[error("proposal dropped by raft")]
    Dropped,
    /// The node stopped (see [`ControllerError`]).
    #[error("the controller node has stopped")]
    Halted,
}
