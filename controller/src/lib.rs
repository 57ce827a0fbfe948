//! corelog's controller: the cluster metadata state machine, replica
//! placement, and a sans-I/O driver that replicates the metadata log with
//! Raft (DESIGN §7).
//!
//! # What is here
//!
//! - [`state`], [`command`], [`snapshot`]: the metadata (brokers, topics,
//!   partitions with replicas, owner shards, leader and leader epoch, the
//!   producer-id block end, the version = last applied Raft index), the
//!   commands that change it, and its sealed, CRC'd encoding. Pure and
//!   deterministic: same commands in the same order, same bytes.
//! - [`users`]: users and their SCRAM credentials (salted keys only),
//!   which brokers check logins against.
//! - [`acls`]: who may do what to which topic, group or the cluster, and
//!   the pure decision each broker makes per request.
//! - [`quotas`]: how many bytes, how much request time and how many
//!   connections a principal or an address may use.
//! - [`topic_config`]: the per-topic settings and their rules, which the
//!   state machine enforces (topic names follow `corelog_wire::topic`).
//! - [`placement`]: where a new topic's replicas and owner shards go. The
//!   leader runs it and proposes the result inside
//!   [`Command::CreateTopic`]; followers never re-run it.
//! - [`node`], [`ready`]: [`ControllerNode`], tikv's raft-rs `RawNode` over
//!   an in-memory copy of the Raft log, driven without a clock, file or
//!   socket; it hands out work as a [`ControllerReady`].
//! - [`durable`]: the one log file's format (entries, hard states and
//!   snapshots, each record with its own CRC32C) and its recovery.
//! - [`logger`]: the `slog` → `tracing` drain raft-rs logs through.
//!
//! The crate depends on no async runtime. The broker's shard 0 owns the
//! node and is its I/O shell: it owns the log file, the timer and the
//! connections to the other controller nodes.
//!
//! # Driving a node (the shell's contract)
//!
//! Start-up: read the whole log file (missing for a new node) and call
//! [`ControllerNode::from_log_file`]. For a new node, create the file whole
//! from [`durable::new_log_file`] (temporary file, fsync, rename); for a
//! first-format file, replace it with [`ControllerNode::compacted_log`];
//! otherwise cut it to [`durable::Recovery::valid_len`]. A
//! [`ControllerError`] here (a corrupt or truncated file, other voters
//! than configured) means: do not start the controller role; never delete
//! the file to "fix" it.
//!
//! Inputs, each followed by draining the Ready loop below:
//! - [`ControllerNode::tick`] every tick (about 100 ms; elections take
//!   `election_tick` to `2 × election_tick` ticks);
//! - [`ControllerNode::step`] with the bytes of each message from a peer. A
//!   [`StepError`] harms nothing: log it and drop the message. Cap frames
//!   at [`MESSAGE_BYTES_MAX`] before they reach `step`;
//! - [`ControllerNode::propose`] for each metadata change. Only the leader
//!   accepts; [`ProposeError::NotLeader`] names the leader as this node
//!   knows it (as does [`ControllerNode::leader_id`]), which is the hint for
//!   a `NOT_CONTROLLER` answer. Keep the returned [`ProposalId`] with the
//!   waiting request;
//! - [`ControllerNode::report_unreachable`] and
//!   [`ControllerNode::report_snapshot`] from the transport. Every message
//!   with `carries_snapshot` needs exactly one `report_snapshot`.
//!
//! The Ready loop; the order is what makes it safe:
//!
//! ```text
//! while let Some(ready) = node.ready()? {          // Err: stop the role
//!     let records = ready.log_records();
//!     if !records.is_empty() {
//!         file.append(&records); file.fsync()?;    // 1. persist ...
//!         slots += 1;                              //    ... and say so
//!         let slot = durable::synced_length_slot(slots, file.len());
//!         file.write_at(slot.position, &slot.bytes); file.fsync()?;
//!     }
//!     if ready.compacts_log() {                    // 2. optional rewrite
//!         write_atomically(node.compacted_log())?; //    tmp, fsync, rename, fsync dir
//!     }
//!     for message in &ready.messages {             // 3. ... then send
//!         transport.send(message.to, &message.bytes);
//!     }
//!     publish(&ready.committed, ready.metadata_version);  // 4. apply
//!     answer(&ready.resolved);
//!     node.advance();                              // 5. and again
//! }
//! ```
//!
//! 1. Persist before send: messages include votes and append
//!    acknowledgements, which promise that the records are on disk. Append
//!    the bytes of [`ControllerReady::log_records`] in one write and fsync
//!    before any message of that Ready leaves; then record the synced
//!    length in the header ([`durable::synced_length_slot`]) and fsync
//!    again, so that recovery can tell a torn append from lost acknowledged
//!    records. If a write or fsync fails,
//!    stop the controller role (exit the process with its reason code): the
//!    records must be presumed lost, and a retry could acknowledge what the
//!    disk does not hold.
//! 2. A snapshot makes most of the file dead weight; rewriting it from
//!    [`ControllerNode::compacted_log`] bounds it. Only do that while
//!    everything handed out is durable (after step 1, or after `advance`).
//! 3. Send in any order, best effort: Raft resends what is lost.
//! 4. [`ControllerReady::committed`] is what the node already applied to
//!    [`ControllerNode::state`], in log order; publish the new metadata to
//!    the shards. [`ControllerReady::resolved`] ends this node's proposals:
//!    `Applied`/`Refused` answer the request, `Lost` and `Unknown` mean
//!    "retry at the current leader" (every command is checked against the
//!    state, so a retry cannot apply twice harmfully).
//! 5. [`ControllerNode::advance`] tells the node the Ready was handled;
//!    call `ready` again until it returns `None`.
//!
//! Between `ready` and `advance`, `tick`, `step` and the reports are queued
//! and applied at `advance`; `propose` answers
//! [`ProposeError::ReadyInProgress`] (queue it and retry after `advance`).
//! A second `ready` before `advance` is an error.
//!
//! # Durable format and recovery
//!
//! One append-only file (see [`durable`] for the byte layout): a header,
//! then records of entries, hard states and snapshots, each sealed with a
//! CRC32C over its length and body. One Ready is one contiguous append, so
//! its entries, hard state and an installed snapshot become durable
//! together. [`durable::recover`] replays the records: a later entry at an
//! existing index truncates the log there (Raft's conflict rule), the last
//! hard state wins, an installed snapshot replaces the log, a locally taken
//! one drops only what it covers. A damaged last record beyond the synced
//! length the header records is a torn tail and cut off; within it, the
//! file lost records this node may have acknowledged and recovery refuses
//! ([`durable::DurableError::Truncated`]); a damaged record followed by a
//! valid one is reported as corruption with its byte position, never
//! skipped. The restarted node
//! replays committed entries into its state on its first Ready, so the
//! metadata after a restart is exactly what the file committed to.
//!
//! # Invariants
//!
//! - Election safety, log matching and state machine safety are raft-rs's;
//!   the cluster tests check them on every Ready (one leader per term, the
//!   same command at every index, byte-equal states at every version).
//! - The metadata version is the last applied Raft index; commands apply
//!   in index order. Applying keeps [`MetadataState::check_invariants`]
//!   (property-tested), and a snapshot that breaks them is refused as
//!   corrupt. A committed entry that does not decode halts the node
//!   ([`ControllerError::UndecodableCommand`]) instead of being skipped,
//!   which would let it diverge.
//! - Nothing decoded from the disk or the network is trusted: messages,
//!   records, commands and snapshots are CRC-checked and bounded before
//!   parsing, and bad input is a typed error, never a panic.
//! - Everything random derives from [`ControllerConfig::seed`]: the same
//!   seed and the same inputs give the same history.
//! - Membership is fixed at the configured peers (1, 3 or 5 voters); a
//!   membership change entry halts the node.
//!
//! # Why raft-rs
//!
//! DESIGN §7 asks for a proven Raft library driven sans-I/O. tikv's `raft`
//! (0.7) has run TiKV in production for years, has pre-vote and
//! check-quorum, and is already a pure state machine (`tick`, `step`,
//! `propose`, `ready`, `advance`) that leaves storage, transport and time to
//! the caller, which fits a glommio shard and a deterministic simulator
//! alike. Two costs, both contained here: its election timeout is drawn
//! from an unseeded RNG, so the node pins the range and adds its own seeded
//! jitter (see [`node`]); and it speaks protobuf 2 (built without protoc
//! via `protobuf-codec`), whose deep-recursion advisory the message
//! envelope's CRC and size bound keep away from damaged input.

pub mod acls;
pub mod codec;
pub mod command;
pub mod decommission;
pub mod durable;
pub mod limits;
pub mod logger;
mod message;
pub mod node;
pub mod placement;
pub mod quotas;
pub mod ready;
pub mod reassignment;
pub mod snapshot;
pub mod state;
mod storage;
pub mod topic_config;
pub mod types;
pub mod users;

#[cfg(test)]
mod testing;

pub use command::{Command, ImportedTopic, Outcome};
pub use message::MESSAGE_BYTES_MAX;
pub use node::{ControllerConfig, ControllerNode};
pub use placement::{BrokerRoom, PlacementError, PlacementLoad, place, place_within, shard_for};
pub use ready::{
    Committed, ControllerError, ControllerReady, OutboundMessage, ProposalOutcome, ProposeError,
    Resolved, Role, StepError,
};
pub use state::{
    BrokerRecord, CommandError, IMPORTED_LEADER_EPOCH, MetadataState, PartitionRecord, TopicRecord,
};
pub use topic_config::{CleanupPolicy, TopicConfig};
pub use types::{LeaderEpoch, NodeId, ProposalId, Replica, ShardId, TopicId};
