//! Metadata commands: what the controller leader proposes through Raft and
//! every controller node applies, in log order, to its [`MetadataState`].
//!
//! A command carries every input its effect depends on (the placement, the
//! creation time), so that applying it is a pure function of the state and
//! the command: two nodes that apply the same log end in the same state.
//!
//! Encoding (inside a Raft entry's data):
//!
//! ```text
//! version u8 (1) · crc32c(body) u32 LE · body
//! body = tag u8 · fields (little-endian; strings and lists u32-length-prefixed)
//! ```
//!
//! Tags are never reused: a retired command keeps its number. A command
//! that gained a field takes a new tag for the form with it, and is
//! written under its old tag while the field is unset, so that nodes of
//! the release before read every command that does not use the field
//! (a rolling upgrade works until the first one that does). A node that
//! meets a version or tag it does not know stops applying (see
//! [`crate::node`]) instead of skipping, because skipping would let it
//! diverge from nodes that understood the command.
//!
//! [`MetadataState`]: crate::state::MetadataState

use std::collections::BTreeMap;

use corelog_wire::sasl::scram::StoredCredential;

use crate::acls::AclBinding;
use crate::codec::{DecodeError, Reader, Writer};
use crate::decommission::Decommission;
use crate::quotas::{
    QUOTA_ENTITY_BYTES_MAX, QuotaEntity, QuotaLimits, read_object_limits, read_quota,
    write_object_limits, write_quota,
};
use crate::state::IMPORTED_LEADER_EPOCH;
use crate::types::{LeaderEpoch, NodeId, Replica, ShardId, TopicId};
use crate::users::{USERNAME_BYTES_MAX, read_credentials, write_credentials};

/// Longest broker host name.
pub const HOST_BYTES_MAX: usize = 255;
/// Longest rack label.
pub const RACK_BYTES_MAX: usize = 255;
/// Longest topic name.
pub const TOPIC_NAME_BYTES_MAX: usize = corelog_wire::topic::TOPIC_NAME_BYTES_MAX;
/// Most partitions one topic may have.
pub const PARTITIONS_MAX: u32 = 10_000;
/// Most replicas of one partition: more would only slow every commit.
pub const REPLICAS_MAX: usize = 16;
/// Most config entries on one topic.
pub const CONFIG_ENTRIES_MAX: usize = 256;
/// Longest config key.
pub const CONFIG_KEY_BYTES_MAX: usize = 255;
/// Longest config value.
pub const CONFIG_VALUE_BYTES_MAX: usize = 4096;
/// Most producer ids one command may allocate; the broker asks for blocks
/// of about a thousand.
pub const PRODUCER_IDS_PER_COMMAND_MAX: u32 = 1 << 20;
/// Largest encoded command: a topic with [`PARTITIONS_MAX`] partitions of
/// [`REPLICAS_MAX`] replicas and full config fits.
pub const COMMAND_BYTES_MAX: usize = 4 << 20;
/// Most topics one [`Command::ImportTopics`] carries; the migration splits
/// a larger catalog so that each command stays under [`COMMAND_BYTES_MAX`].
pub const IMPORTED_TOPICS_MAX: usize = 1024;

/// Format version written by this build.
const COMMAND_VERSION: u8 = 1;
const HEADER_BYTES: usize = 1 + 4;

const TAG_REGISTER_BROKER: u8 = 1;
const TAG_FENCE_BROKER: u8 = 2;
const TAG_UNFENCE_BROKER: u8 = 3;
const TAG_CREATE_TOPIC: u8 = 4;
const TAG_DELETE_TOPIC: u8 = 5;
const TAG_SET_LEADER: u8 = 6;
const TAG_ALLOCATE_PRODUCER_IDS: u8 = 7;
const TAG_IMPORT_TOPICS: u8 = 8;
/// [`Command::ImportTopics`] with each partition's leader epoch, for a
/// catalog rebuilt from partition directories whose logs were written in
/// later epochs than [`crate::state::IMPORTED_LEADER_EPOCH`].
const TAG_IMPORT_TOPICS_AT_EPOCHS: u8 = 18;
const TAG_RESIGN_LEADER: u8 = 9;
const TAG_PUT_USER: u8 = 10;
const TAG_DELETE_USER: u8 = 11;
const TAG_PUT_ACL: u8 = 12;
const TAG_DELETE_ACL: u8 = 13;
const TAG_PUT_QUOTA: u8 = 14;
const TAG_DELETE_QUOTA: u8 = 15;
/// A [`Command::CreateTopic`] with an owner.
const TAG_CREATE_OWNED_TOPIC: u8 = 16;
/// A [`Command::PutQuota`] that sets topic, partition or group limits.
const TAG_PUT_QUOTA_WITH_OBJECT_LIMITS: u8 = 17;
const TAG_SET_BROKER_MAINTENANCE: u8 = 19;
const TAG_START_REASSIGNMENT: u8 = 20;
const TAG_CANCEL_REASSIGNMENT: u8 = 21;
const TAG_CHANGE_REPLICA_SET: u8 = 22;
const TAG_SET_BROKER_DECOMMISSION: u8 = 23;

/// One change to cluster metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A broker (re)joins. A higher incarnation replaces the registration
    /// of an earlier process; the broker starts fenced (see
    /// [`crate::state::BrokerRecord::fenced`]).
    RegisterBroker {
        /// Its id.
        node: NodeId,
        /// Where clients and peers reach it.
        host: String,
        /// Its port.
        port: u16,
        /// Failure domain; placement spreads replicas over racks.
        rack: Option<String>,
        /// Executors on it; replicas are assigned to one of them.
        shard_count: u16,
        /// Grows with every start of the broker process.
        incarnation: u64,
    },
    /// The broker is presumed dead (session expired) or being drained: it
    /// gets no new replicas or leaderships.
    FenceBroker {
        /// Its id.
        node: NodeId,
    },
    /// Puts the broker in maintenance (its leaderships are elected on
    /// other replicas and it takes no new ones, but it still follows) or
    /// takes it out. At most one broker is in maintenance at a time: with
    /// two, a replica set of three could lose its majority when the first
    /// of them restarts.
    SetBrokerMaintenance {
        /// Its id.
        node: NodeId,
        /// In maintenance or not.
        enabled: bool,
    },
    /// Starts decommissioning the broker (see [`crate::decommission`]):
    /// it takes no new replica, and the controller leader moves the ones
    /// it holds to other brokers; or, with `None`, recommissions it and
    /// turns back the moves still running off it.
    SetBrokerDecommission {
        /// Its id.
        node: NodeId,
        /// How its replicas are moved; `None` to recommission.
        decommission: Option<Decommission>,
    },
    /// The broker's current incarnation caught up with metadata and may
    /// take replicas and leaderships again.
    UnfenceBroker {
        /// Its id.
        node: NodeId,
        /// Must be the registered incarnation: a heartbeat from an earlier
        /// process must not unfence a later one.
        incarnation: u64,
    },
    /// A new topic with its placement, computed by the leader with
    /// [`crate::placement::place`] before proposing.
    CreateTopic {
        /// Name; internal topics start with `__`.
        name: String,
        /// Whether it is an internal topic (`__groups`, `__audit`); only
        /// those may, and must, start with `__`.
        internal: bool,
        /// Settings as `key=value` entries, checked against
        /// [`crate::topic_config::TopicConfig`]'s rules.
        config: BTreeMap<String, String>,
        /// Replicas per partition, preferred leader first.
        assignments: Vec<Vec<Replica>>,
        /// Creation time stamped by the proposer (the state has no clock).
        created_at_ms: i64,
        /// The principal whose topic and partition limits it counts
        /// against (see [`crate::limits`]); `None` counts for nobody.
        owner: Option<String>,
    },
    /// Removes a topic. By id, so that a delete racing a re-creation under
    /// the same name never removes the new topic.
    DeleteTopic {
        /// The topic.
        topic_id: TopicId,
    },
    /// Publishes a partition's leader (or none) under a new epoch, after
    /// the election rule picked it.
    SetLeader {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The new leader, a replica; `None` leaves the partition leaderless.
        leader: Option<NodeId>,
        /// Must be greater than the current epoch.
        epoch: LeaderEpoch,
    },
    /// Starts moving a partition to `target` (see [`crate::reassignment`]):
    /// the replicas of `target` outside the set become learners.
    StartReassignment {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The set to reach, preferred leader first.
        target: Vec<Replica>,
        /// Bytes a second each learner copies at most; 0 for no limit.
        throttle_bytes_per_s: u64,
        /// When it starts (stamped by the proposer).
        started_at_ms: i64,
    },
    /// Turns a partition's move back toward the set it started from.
    CancelReassignment {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
    },
    /// One step of a move: the set with one learner added or one replica
    /// outside the goal removed, led by `leader` under a new epoch, after
    /// the election rule picked it over the new set.
    ChangeReplicaSet {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The new set.
        replicas: Vec<Replica>,
        /// The new leader, one of them; `None` leaves it leaderless.
        leader: Option<NodeId>,
        /// Must be greater than the current epoch.
        epoch: LeaderEpoch,
    },
    /// Reserves the next `count` producer ids.
    AllocateProducerIds {
        /// How many.
        count: u32,
    },
    /// A leader can no longer lead its epoch (its log was fenced and
    /// reopened after a full disk): the partition becomes leaderless, and
    /// the next election publishes a leader under a new epoch. Applies only
    /// while `leader` still leads `epoch` there: a late resignation changes
    /// nothing.
    ResignLeader {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The resigning leader.
        leader: NodeId,
        /// The epoch it led.
        epoch: LeaderEpoch,
    },
    /// Takes in the topics of a data directory written by a standalone
    /// broker (before single nodes became one-voter clusters), or of a
    /// single node whose catalog is rebuilt from its partition directories
    /// after its controller log was lost, under the ids they had, so that
    /// their directories, named by id, are found again. Each partition is
    /// led by its first replica at its [`ImportedTopic::leader_epochs`]
    /// entry: [`crate::state::IMPORTED_LEADER_EPOCH`] for a standalone
    /// broker's (above the epoch 0 it stamped on every batch), or above
    /// every epoch a rebuilt partition's log records. A topic already present
    /// with the same id, name and partition count is skipped, so a
    /// migration that crashed after its import committed can propose it
    /// again. A large catalog is imported in several commands.
    ImportTopics {
        /// The topics.
        topics: Vec<ImportedTopic>,
        /// The catalog's next topic id: ids below it may have been used.
        next_topic_id: u64,
        /// Producer ids below this may have been handed out.
        producer_id_block_end: i64,
    },
    /// Creates a user, or replaces its credentials (a new password).
    PutUser {
        /// Its name (see [`crate::users::check_user_name`]).
        name: String,
        /// Its salted keys, one per mechanism (see
        /// [`crate::users::check_credentials`]).
        credentials: Vec<StoredCredential>,
    },
    /// Removes a user: its open connections are closed.
    DeleteUser {
        /// Its name.
        name: String,
    },
    /// Adds an access rule (see [`crate::acls`]).
    PutAcl {
        /// The rule.
        binding: AclBinding,
    },
    /// Removes an access rule.
    DeleteAcl {
        /// The rule, exactly as it was added.
        binding: AclBinding,
    },
    /// Sets an entity's quota, replacing the one it had (see
    /// [`crate::quotas`]).
    PutQuota {
        /// Whom it limits.
        entity: QuotaEntity,
        /// The limits.
        limits: QuotaLimits,
    },
    /// Removes an entity's quota: the default applies to it again.
    DeleteQuota {
        /// Whom it limited.
        entity: QuotaEntity,
    },
}

/// One topic of an [`Command::ImportTopics`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedTopic {
    /// Its id in the standalone catalog.
    pub id: TopicId,
    /// Its name.
    pub name: String,
    /// Whether it is internal (`__groups`, `__audit`).
    pub internal: bool,
    /// Its settings as `key=value` entries.
    pub config: BTreeMap<String, String>,
    /// Replicas per partition (one, on the importing broker).
    pub partitions: Vec<Vec<Replica>>,
    /// The leader epoch of each partition, as many as partitions, each at
    /// least [`crate::state::IMPORTED_LEADER_EPOCH`].
    pub leader_epochs: Vec<LeaderEpoch>,
    /// When it was created.
    pub created_at_ms: i64,
}

/// What an applied command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The broker is registered (fenced) with this incarnation.
    BrokerRegistered {
        /// Its id.
        node: NodeId,
        /// Its incarnation.
        incarnation: u64,
    },
    /// The broker is fenced; `changed` is false if it already was.
    BrokerFenced {
        /// Its id.
        node: NodeId,
        /// Whether this command fenced it.
        changed: bool,
    },
    /// The broker is unfenced; `changed` is false if it already was.
    BrokerUnfenced {
        /// Its id.
        node: NodeId,
        /// Whether this command unfenced it.
        changed: bool,
    },
    /// The broker's maintenance is as asked; `changed` is false if it
    /// already was.
    BrokerMaintenance {
        /// Its id.
        node: NodeId,
        /// Whether this command changed it.
        changed: bool,
    },
    /// The broker's decommission is as asked; `changed` is false if it
    /// already was.
    BrokerDecommission {
        /// Its id.
        node: NodeId,
        /// Whether this command changed it.
        changed: bool,
        /// Moves off it this command turned back (recommissioning).
        cancelled: u32,
    },
    /// The topic exists with this id.
    TopicCreated {
        /// The new, never reused id.
        topic_id: TopicId,
    },
    /// The topic is gone.
    TopicDeleted {
        /// Its id.
        topic_id: TopicId,
        /// Its name.
        name: String,
    },
    /// The partition has this leader and epoch.
    LeaderSet {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The leader.
        leader: Option<NodeId>,
        /// The epoch.
        epoch: LeaderEpoch,
    },
    /// Producer ids `start..end` belong to the proposer.
    ProducerIdsAllocated {
        /// First id.
        start: i64,
        /// One past the last id.
        end: i64,
    },
    /// The move started.
    ReassignmentStarted {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
    },
    /// The move returns to its original set; `changed` is false when it
    /// was cancelled before.
    ReassignmentCancelled {
        /// Whether this cancel turned it.
        changed: bool,
    },
    /// The set changed by one replica under a new leader epoch.
    ReplicaSetChanged {
        /// The leader.
        leader: Option<NodeId>,
        /// The epoch.
        epoch: LeaderEpoch,
        /// The set is the move's goal: the move is over.
        finished: bool,
    },
    /// The resignation applied; `changed` is false when the leader no
    /// longer led that epoch.
    LeaderResigned {
        /// Whether the partition became leaderless.
        changed: bool,
    },
    /// The import applied; `imported` topics were new (the others were
    /// there already).
    TopicsImported {
        /// Topics added.
        imported: u32,
    },
    /// The user has the new credentials.
    UserPut {
        /// Whether it is new (else its password changed).
        created: bool,
    },
    /// The user is gone.
    UserDeleted,
    /// The rule stands; `created` is false if it stood already.
    AclPut {
        /// Whether this command added it.
        created: bool,
    },
    /// The rule is gone.
    AclDeleted,
    /// The quota stands; `created` is false if it replaced one.
    QuotaPut {
        /// Whether the entity had no quota before.
        created: bool,
    },
    /// The quota is gone.
    QuotaDeleted,
}

impl Command {
    /// Encodes the command for a Raft entry.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Writer::default();
        self.encode_body(&mut body);
        let mut bytes = Vec::with_capacity(HEADER_BYTES + body.bytes.len());
        bytes.push(COMMAND_VERSION);
        bytes.extend_from_slice(&crc32c::crc32c(&body.bytes).to_le_bytes());
        bytes.extend_from_slice(&body.bytes);
        bytes
    }

    fn encode_body(&self, writer: &mut Writer) {
        match self {
            Command::RegisterBroker {
                node,
                host,
                port,
                rack,
                shard_count,
                incarnation,
            } => {
                writer.u8(TAG_REGISTER_BROKER);
                writer.u64(node.0);
                writer.str(host);
                writer.u16(*port);
                writer.opt_str(rack.as_deref());
                writer.u16(*shard_count);
                writer.u64(*incarnation);
            }
            Command::FenceBroker { node } => {
                writer.u8(TAG_FENCE_BROKER);
                writer.u64(node.0);
            }
            Command::SetBrokerMaintenance { node, enabled } => {
                writer.u8(TAG_SET_BROKER_MAINTENANCE);
                writer.u64(node.0);
                writer.bool(*enabled);
            }
            Command::SetBrokerDecommission { node, decommission } => {
                writer.u8(TAG_SET_BROKER_DECOMMISSION);
                writer.u64(node.0);
                writer.bool(decommission.is_some());
                if let Some(decommission) = decommission {
                    writer.u64(decommission.throttle_bytes_per_s);
                    writer.u16(decommission.max_moves);
                }
            }
            Command::UnfenceBroker { node, incarnation } => {
                writer.u8(TAG_UNFENCE_BROKER);
                writer.u64(node.0);
                writer.u64(*incarnation);
            }
            Command::CreateTopic {
                name,
                internal,
                config,
                assignments,
                created_at_ms,
                owner,
            } => {
                writer.u8(if owner.is_some() {
                    TAG_CREATE_OWNED_TOPIC
                } else {
                    TAG_CREATE_TOPIC
                });
                writer.str(name);
                writer.bool(*internal);
                write_config(writer, config);
                writer.len(assignments.len());
                for replicas in assignments {
                    write_replicas(writer, replicas);
                }
                writer.i64(*created_at_ms);
                if let Some(owner) = owner {
                    writer.str(owner);
                }
            }
            Command::DeleteTopic { topic_id } => {
                writer.u8(TAG_DELETE_TOPIC);
                writer.u64(topic_id.0);
            }
            Command::SetLeader {
                topic_id,
                partition,
                leader,
                epoch,
            } => {
                writer.u8(TAG_SET_LEADER);
                writer.u64(topic_id.0);
                writer.u32(*partition);
                writer.u64(leader.map_or(0, |leader| leader.0));
                writer.u32(epoch.0);
            }
            Command::StartReassignment {
                topic_id,
                partition,
                target,
                throttle_bytes_per_s,
                started_at_ms,
            } => {
                writer.u8(TAG_START_REASSIGNMENT);
                writer.u64(topic_id.0);
                writer.u32(*partition);
                write_replicas(writer, target);
                writer.u64(*throttle_bytes_per_s);
                writer.i64(*started_at_ms);
            }
            Command::CancelReassignment {
                topic_id,
                partition,
            } => {
                writer.u8(TAG_CANCEL_REASSIGNMENT);
                writer.u64(topic_id.0);
                writer.u32(*partition);
            }
            Command::ChangeReplicaSet {
                topic_id,
                partition,
                replicas,
                leader,
                epoch,
            } => {
                writer.u8(TAG_CHANGE_REPLICA_SET);
                writer.u64(topic_id.0);
                writer.u32(*partition);
                write_replicas(writer, replicas);
                writer.u64(leader.map_or(0, |leader| leader.0));
                writer.u32(epoch.0);
            }
            Command::AllocateProducerIds { count } => {
                writer.u8(TAG_ALLOCATE_PRODUCER_IDS);
                writer.u32(*count);
            }
            Command::ResignLeader {
                topic_id,
                partition,
                leader,
                epoch,
            } => {
                writer.u8(TAG_RESIGN_LEADER);
                writer.u64(topic_id.0);
                writer.u32(*partition);
                writer.u64(leader.0);
                writer.u32(epoch.0);
            }
            Command::ImportTopics {
                topics,
                next_topic_id,
                producer_id_block_end,
            } => {
                // The older tag while every epoch is the standalone import's,
                // so that a migration's log stays readable by the releases
                // before epochs were carried.
                let at_epochs = topics.iter().any(|topic| {
                    topic
                        .leader_epochs
                        .iter()
                        .any(|epoch| *epoch != IMPORTED_LEADER_EPOCH)
                });
                writer.u8(if at_epochs {
                    TAG_IMPORT_TOPICS_AT_EPOCHS
                } else {
                    TAG_IMPORT_TOPICS
                });
                writer.len(topics.len());
                for topic in topics {
                    writer.u64(topic.id.0);
                    writer.str(&topic.name);
                    writer.bool(topic.internal);
                    write_config(writer, &topic.config);
                    writer.len(topic.partitions.len());
                    for (index, replicas) in topic.partitions.iter().enumerate() {
                        write_replicas(writer, replicas);
                        if at_epochs {
                            let epoch = topic.leader_epochs.get(index).copied();
                            writer.u32(epoch.unwrap_or(IMPORTED_LEADER_EPOCH).0);
                        }
                    }
                    writer.i64(topic.created_at_ms);
                }
                writer.u64(*next_topic_id);
                writer.i64(*producer_id_block_end);
            }
            Command::PutUser { name, credentials } => {
                writer.u8(TAG_PUT_USER);
                writer.str(name);
                write_credentials(writer, credentials);
            }
            Command::DeleteUser { name } => {
                writer.u8(TAG_DELETE_USER);
                writer.str(name);
            }
            Command::PutAcl { binding } => {
                writer.u8(TAG_PUT_ACL);
                binding.write(writer);
            }
            Command::DeleteAcl { binding } => {
                writer.u8(TAG_DELETE_ACL);
                binding.write(writer);
            }
            Command::PutQuota { entity, limits } => {
                if limits.has_object_limits() {
                    writer.u8(TAG_PUT_QUOTA_WITH_OBJECT_LIMITS);
                    write_quota(writer, entity, limits);
                    write_object_limits(writer, limits);
                } else {
                    writer.u8(TAG_PUT_QUOTA);
                    write_quota(writer, entity, limits);
                }
            }
            Command::DeleteQuota { entity } => {
                writer.u8(TAG_DELETE_QUOTA);
                writer.str(&entity.to_string());
            }
        }
    }

    /// Decodes a command from a Raft entry's data.
    ///
    /// # Errors
    /// [`DecodeError`] for anything but a whole, undamaged command of a
    /// version and tag this build knows. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
        let what = "command";
        if bytes.len() > COMMAND_BYTES_MAX {
            return Err(DecodeError::Invalid {
                what,
                at: 0,
                reason: format!("{} bytes, over {COMMAND_BYTES_MAX}", bytes.len()),
            });
        }
        let mut reader = Reader::new(bytes, 0);
        let version = reader.u8(what)?;
        if version != COMMAND_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what,
                version,
                supported: COMMAND_VERSION,
            });
        }
        let stored = reader.u32(what)?;
        let body = &bytes[HEADER_BYTES..];
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(DecodeError::Checksum {
                what,
                stored,
                computed,
            });
        }
        let mut reader = Reader::new(body, HEADER_BYTES);
        let command = Self::decode_body(&mut reader)?;
        reader.finish()?;
        Ok(command)
    }

    fn decode_body(reader: &mut Reader<'_>) -> Result<Command, DecodeError> {
        let at = reader.position();
        let command = match reader.u8("command tag")? {
            tag @ (TAG_CREATE_TOPIC | TAG_CREATE_OWNED_TOPIC) => {
                read_create_topic(reader, tag == TAG_CREATE_OWNED_TOPIC)?
            }
            TAG_REGISTER_BROKER => Command::RegisterBroker {
                node: NodeId(reader.u64("node")?),
                host: reader.str("host", HOST_BYTES_MAX)?,
                port: reader.u16("port")?,
                rack: reader.opt_str("rack", RACK_BYTES_MAX)?,
                shard_count: reader.u16("shard count")?,
                incarnation: reader.u64("incarnation")?,
            },
            TAG_FENCE_BROKER => Command::FenceBroker {
                node: NodeId(reader.u64("node")?),
            },
            TAG_SET_BROKER_MAINTENANCE => Command::SetBrokerMaintenance {
                node: NodeId(reader.u64("node")?),
                enabled: reader.bool("maintenance")?,
            },
            TAG_SET_BROKER_DECOMMISSION => Command::SetBrokerDecommission {
                node: NodeId(reader.u64("node")?),
                decommission: if reader.bool("decommissioning")? {
                    Some(Decommission {
                        throttle_bytes_per_s: reader.u64("throttle")?,
                        max_moves: reader.u16("moves at once")?,
                    })
                } else {
                    None
                },
            },
            TAG_UNFENCE_BROKER => Command::UnfenceBroker {
                node: NodeId(reader.u64("node")?),
                incarnation: reader.u64("incarnation")?,
            },
            TAG_DELETE_TOPIC => Command::DeleteTopic {
                topic_id: TopicId(reader.u64("topic id")?),
            },
            TAG_SET_LEADER => Command::SetLeader {
                topic_id: TopicId(reader.u64("topic id")?),
                partition: reader.u32("partition")?,
                leader: match reader.u64("leader")? {
                    0 => None,
                    node => Some(NodeId(node)),
                },
                epoch: LeaderEpoch(reader.u32("leader epoch")?),
            },
            TAG_START_REASSIGNMENT => Command::StartReassignment {
                topic_id: TopicId(reader.u64("topic id")?),
                partition: reader.u32("partition")?,
                target: read_replicas(reader)?,
                throttle_bytes_per_s: reader.u64("throttle")?,
                started_at_ms: reader.i64("start time")?,
            },
            TAG_CANCEL_REASSIGNMENT => Command::CancelReassignment {
                topic_id: TopicId(reader.u64("topic id")?),
                partition: reader.u32("partition")?,
            },
            TAG_CHANGE_REPLICA_SET => Command::ChangeReplicaSet {
                topic_id: TopicId(reader.u64("topic id")?),
                partition: reader.u32("partition")?,
                replicas: read_replicas(reader)?,
                leader: match reader.u64("leader")? {
                    0 => None,
                    node => Some(NodeId(node)),
                },
                epoch: LeaderEpoch(reader.u32("leader epoch")?),
            },
            TAG_ALLOCATE_PRODUCER_IDS => Command::AllocateProducerIds {
                count: reader.u32("producer id count")?,
            },
            TAG_RESIGN_LEADER => Command::ResignLeader {
                topic_id: TopicId(reader.u64("topic id")?),
                partition: reader.u32("partition")?,
                leader: NodeId(reader.u64("leader")?),
                epoch: LeaderEpoch(reader.u32("leader epoch")?),
            },
            tag @ (TAG_IMPORT_TOPICS | TAG_IMPORT_TOPICS_AT_EPOCHS) => {
                let at_epochs = tag == TAG_IMPORT_TOPICS_AT_EPOCHS;
                // A topic takes at least 27 bytes: id, name, flag, counts, time.
                let count = reader.len("imported topics", IMPORTED_TOPICS_MAX, 27)?;
                let mut topics = Vec::with_capacity(count);
                for _ in 0..count {
                    let id = TopicId(reader.u64("topic id")?);
                    let name = reader.str("topic name", TOPIC_NAME_BYTES_MAX)?;
                    let internal = reader.bool("internal")?;
                    let config = read_config(reader)?;
                    let partition_count = reader.len("partitions", PARTITIONS_MAX as usize, 4)?;
                    let mut partitions = Vec::with_capacity(partition_count);
                    let mut leader_epochs = Vec::with_capacity(partition_count);
                    for _ in 0..partition_count {
                        partitions.push(read_replicas(reader)?);
                        leader_epochs.push(if at_epochs {
                            LeaderEpoch(reader.u32("leader epoch")?)
                        } else {
                            IMPORTED_LEADER_EPOCH
                        });
                    }
                    topics.push(ImportedTopic {
                        id,
                        name,
                        internal,
                        config,
                        partitions,
                        leader_epochs,
                        created_at_ms: reader.i64("created at")?,
                    });
                }
                Command::ImportTopics {
                    topics,
                    next_topic_id: reader.u64("next topic id")?,
                    producer_id_block_end: reader.i64("producer id block end")?,
                }
            }
            TAG_PUT_USER => Command::PutUser {
                name: reader.str("user name", USERNAME_BYTES_MAX)?,
                credentials: read_credentials(reader)?,
            },
            TAG_DELETE_USER => Command::DeleteUser {
                name: reader.str("user name", USERNAME_BYTES_MAX)?,
            },
            TAG_PUT_ACL => Command::PutAcl {
                binding: AclBinding::read(reader)?,
            },
            TAG_DELETE_ACL => Command::DeleteAcl {
                binding: AclBinding::read(reader)?,
            },
            TAG_PUT_QUOTA => {
                let (entity, limits) = read_quota(reader)?;
                Command::PutQuota { entity, limits }
            }
            TAG_PUT_QUOTA_WITH_OBJECT_LIMITS => {
                let at = reader.position();
                let (entity, mut limits) = read_quota(reader)?;
                read_object_limits(reader, &mut limits)?;
                if !limits.has_object_limits() {
                    // Such a quota is written under the older tag: one encoding per command.
                    return Err(reader.invalid_at(
                        "quota",
                        at,
                        "no topic, partition or group limit under their tag".to_owned(),
                    ));
                }
                Command::PutQuota { entity, limits }
            }
            TAG_DELETE_QUOTA => {
                let at = reader.position();
                let entity = reader.str("quota entity", QUOTA_ENTITY_BYTES_MAX)?;
                Command::DeleteQuota {
                    entity: QuotaEntity::parse(&entity)
                        .map_err(|reason| reader.invalid_at("quota entity", at, reason))?,
                }
            }
            tag => {
                return Err(reader.invalid_at("command tag", at, format!("unknown tag {tag}")));
            }
        };
        Ok(command)
    }
}

/// Reads a [`Command::CreateTopic`] after its tag; `owned`: the form with
/// an owner.
fn read_create_topic(reader: &mut Reader<'_>, owned: bool) -> Result<Command, DecodeError> {
    let name = reader.str("topic name", TOPIC_NAME_BYTES_MAX)?;
    let internal = reader.bool("internal")?;
    let config = read_config(reader)?;
    let count = reader.len("partitions", PARTITIONS_MAX as usize, 4)?;
    let mut assignments = Vec::with_capacity(count);
    for _ in 0..count {
        assignments.push(read_replicas(reader)?);
    }
    let created_at_ms = reader.i64("created at")?;
    let owner = if owned {
        Some(reader.str("topic owner", USERNAME_BYTES_MAX)?)
    } else {
        None
    };
    Ok(Command::CreateTopic {
        name,
        internal,
        config,
        assignments,
        created_at_ms,
        owner,
    })
}

/// Writes config entries (sorted, as the map keeps them).
pub(crate) fn write_config(writer: &mut Writer, config: &BTreeMap<String, String>) {
    writer.len(config.len());
    for (key, value) in config {
        writer.str(key);
        writer.str(value);
    }
}

/// Reads config entries; keys must be strictly increasing, which makes the
/// encoding of a map unique.
pub(crate) fn read_config(
    reader: &mut Reader<'_>,
) -> Result<BTreeMap<String, String>, DecodeError> {
    let count = reader.len("config entries", CONFIG_ENTRIES_MAX, 8)?;
    let mut config = BTreeMap::new();
    let mut previous: Option<String> = None;
    for _ in 0..count {
        let at = reader.position();
        let key = reader.str("config key", CONFIG_KEY_BYTES_MAX)?;
        let value = reader.str("config value", CONFIG_VALUE_BYTES_MAX)?;
        if previous.as_ref().is_some_and(|previous| *previous >= key) {
            return Err(reader.invalid_at("config key", at, "keys out of order".to_owned()));
        }
        previous = Some(key.clone());
        config.insert(key, value);
    }
    Ok(config)
}

pub(crate) fn write_replicas(writer: &mut Writer, replicas: &[Replica]) {
    writer.len(replicas.len());
    for replica in replicas {
        writer.u64(replica.node.0);
        writer.u16(replica.shard.0);
    }
}

pub(crate) fn read_replicas(reader: &mut Reader<'_>) -> Result<Vec<Replica>, DecodeError> {
    let count = reader.len("replicas", REPLICAS_MAX, 10)?;
    let mut replicas = Vec::with_capacity(count);
    for _ in 0..count {
        replicas.push(Replica {
            node: NodeId(reader.u64("replica node")?),
            shard: ShardId(reader.u16("replica shard")?),
        });
    }
    Ok(replicas)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::arb_command;

    #[test]
    fn every_command_round_trips() {
        let commands = [
            Command::RegisterBroker {
                node: NodeId(1),
                host: "broker-1.local".to_owned(),
                port: 7100,
                rack: Some("eu-west-1a".to_owned()),
                shard_count: 4,
                incarnation: 7,
            },
            Command::FenceBroker { node: NodeId(2) },
            Command::SetBrokerMaintenance {
                node: NodeId(2),
                enabled: true,
            },
            Command::SetBrokerDecommission {
                node: NodeId(2),
                decommission: Some(Decommission {
                    throttle_bytes_per_s: 50 << 20,
                    max_moves: 4,
                }),
            },
            Command::SetBrokerDecommission {
                node: NodeId(2),
                decommission: None,
            },
            Command::UnfenceBroker {
                node: NodeId(2),
                incarnation: 3,
            },
            Command::CreateTopic {
                name: "orders".to_owned(),
                internal: false,
                config: BTreeMap::from([("retention.ms".to_owned(), "60000".to_owned())]),
                assignments: vec![vec![
                    Replica {
                        node: NodeId(1),
                        shard: ShardId(0),
                    },
                    Replica {
                        node: NodeId(2),
                        shard: ShardId(1),
                    },
                ]],
                created_at_ms: 1_700_000_000_000,
                owner: None,
            },
            Command::CreateTopic {
                name: "tenant.orders".to_owned(),
                internal: false,
                config: BTreeMap::new(),
                assignments: vec![vec![Replica {
                    node: NodeId(1),
                    shard: ShardId(0),
                }]],
                created_at_ms: 1_700_000_000_000,
                owner: Some("alice".to_owned()),
            },
            Command::PutQuota {
                entity: QuotaEntity::User("alice".to_owned()),
                limits: QuotaLimits {
                    topics: Some(5),
                    groups: Some(0),
                    ..QuotaLimits::default()
                },
            },
            Command::DeleteTopic {
                topic_id: TopicId(9),
            },
            Command::SetLeader {
                topic_id: TopicId(9),
                partition: 3,
                leader: None,
                epoch: LeaderEpoch(4),
            },
            Command::StartReassignment {
                topic_id: TopicId(9),
                partition: 3,
                target: vec![
                    Replica {
                        node: NodeId(4),
                        shard: ShardId(1),
                    },
                    Replica {
                        node: NodeId(2),
                        shard: ShardId(0),
                    },
                ],
                throttle_bytes_per_s: 50 << 20,
                started_at_ms: 1_700_000_000_000,
            },
            Command::CancelReassignment {
                topic_id: TopicId(9),
                partition: 3,
            },
            Command::ChangeReplicaSet {
                topic_id: TopicId(9),
                partition: 3,
                replicas: vec![Replica {
                    node: NodeId(4),
                    shard: ShardId(1),
                }],
                leader: Some(NodeId(4)),
                epoch: LeaderEpoch(5),
            },
            Command::AllocateProducerIds { count: 1024 },
            Command::ResignLeader {
                topic_id: TopicId(9),
                partition: 3,
                leader: NodeId(2),
                epoch: LeaderEpoch(4),
            },
            Command::ImportTopics {
                topics: vec![ImportedTopic {
                    id: TopicId(4),
                    name: "ledger".to_owned(),
                    internal: false,
                    config: BTreeMap::from([("segment.bytes".to_owned(), "1048576".to_owned())]),
                    partitions: vec![vec![Replica {
                        node: NodeId(1),
                        shard: ShardId(1),
                    }]],
                    leader_epochs: vec![IMPORTED_LEADER_EPOCH],
                    created_at_ms: 1_796_159_008_892,
                }],
                next_topic_id: 5,
                producer_id_block_end: 2048,
            },
            Command::ImportTopics {
                topics: vec![ImportedTopic {
                    id: TopicId(7),
                    name: "rebuilt".to_owned(),
                    internal: false,
                    config: BTreeMap::new(),
                    partitions: vec![
                        vec![Replica {
                            node: NodeId(1),
                            shard: ShardId(0),
                        }];
                        2
                    ],
                    leader_epochs: vec![LeaderEpoch(12), IMPORTED_LEADER_EPOCH],
                    created_at_ms: 1_796_159_008_892,
                }],
                next_topic_id: 8,
                producer_id_block_end: 1 << 40,
            },
        ];
        for command in commands {
            assert_eq!(Command::decode(&command.encode()), Ok(command));
        }
    }

    /// Nodes of the release before owners and object limits read every
    /// command that does not use them: such commands keep their old tags.
    #[test]
    fn commands_without_the_new_fields_keep_their_old_tags() {
        let topic = |owner: Option<&str>| Command::CreateTopic {
            name: "t".to_owned(),
            internal: false,
            config: BTreeMap::new(),
            assignments: vec![vec![Replica {
                node: NodeId(1),
                shard: ShardId(0),
            }]],
            created_at_ms: 0,
            owner: owner.map(str::to_owned),
        };
        let tag = |command: &Command| command.encode()[HEADER_BYTES];
        assert_eq!(tag(&topic(None)), TAG_CREATE_TOPIC);
        assert_eq!(tag(&topic(Some("alice"))), TAG_CREATE_OWNED_TOPIC);
        let quota = |limits| Command::PutQuota {
            entity: QuotaEntity::DefaultUser,
            limits,
        };
        let rate = QuotaLimits {
            produce_bytes_per_second: Some(1),
            ..QuotaLimits::default()
        };
        let groups = QuotaLimits {
            groups: Some(1),
            ..rate
        };
        assert_eq!(tag(&quota(rate)), TAG_PUT_QUOTA);
        assert_eq!(tag(&quota(groups)), TAG_PUT_QUOTA_WITH_OBJECT_LIMITS);
    }

    #[test]
    fn unknown_versions_and_tags_are_refused() {
        let mut bytes = Command::FenceBroker { node: NodeId(1) }.encode();
        bytes[0] = 2;
        assert!(matches!(
            Command::decode(&bytes),
            Err(DecodeError::UnsupportedVersion { version: 2, .. })
        ));
        let body = [99u8];
        let mut bytes = vec![COMMAND_VERSION];
        bytes.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        assert!(matches!(
            Command::decode(&bytes),
            Err(DecodeError::Invalid {
                what: "command tag",
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn commands_round_trip(command in arb_command()) {
            prop_assert_eq!(Command::decode(&command.encode()), Ok(command));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Command::decode(&bytes);
        }

        #[test]
        fn any_flipped_bit_is_detected(command in arb_command(), seed in any::<u64>()) {
            let mut bytes = command.encode();
            let bit = (seed % (bytes.len() as u64 * 8)) as usize;
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Command::decode(&bytes).is_err());
        }
    }
}
