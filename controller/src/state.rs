//! The cluster metadata state machine: brokers, topics, partitions and the
//! producer-id block, changed only by [`MetadataState::apply`].
//!
//! Pure and deterministic: no clock, no randomness, ordered maps only. Every
//! controller node applies the same commands in the same order and must end
//! in the same state, which the cluster tests check byte for byte through
//! [`MetadataState::encode`].
//!
//! It is the one metadata authority of every corelog node, a single node
//! included (a one-voter cluster): topic ids are never reused, internal
//! topics (`__groups`, `__audit`) are created through the same command
//! with `internal: true`, producer ids are handed out in blocks whose end
//! is part of the state, and topic settings are kept as `key=value`
//! entries. Topic names and settings are validated here and nowhere else
//! ([`MetadataState::check`] runs the same rules before a proposal).

use std::collections::{BTreeMap, BTreeSet};

use corelog_wire::sasl::scram::StoredCredential;
use corelog_wire::topic::{InvalidTopicName, check_topic_name};

use crate::acls::{ACLS_MAX, Acls};
use crate::command::{
    CONFIG_ENTRIES_MAX, CONFIG_KEY_BYTES_MAX, CONFIG_VALUE_BYTES_MAX, Command, HOST_BYTES_MAX,
    ImportedTopic, Outcome, PARTITIONS_MAX, PRODUCER_IDS_PER_COMMAND_MAX, RACK_BYTES_MAX,
    REPLICAS_MAX,
};
use crate::decommission::{self, Decommission};
use crate::limits::{self, LimitExceeded, ObjectLimits, Usage};
use crate::quotas::{QUOTAS_MAX, Quotas};
use crate::reassignment::{self, ChangeError, Reassignment};
use crate::topic_config::TopicConfig;
use crate::types::{LeaderEpoch, NodeId, Replica, ShardId, TopicId};
use crate::users::{USERS_MAX, UserRecord, check_credentials, check_user_name};

/// The leader epoch of an imported topic's partitions: a standalone
/// broker stamped every batch with epoch 0, so its replicas lead the first
/// epoch above it.
pub const IMPORTED_LEADER_EPOCH: LeaderEpoch = LeaderEpoch(1);

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRecord {
    /// Its id.
    pub id: NodeId,
    /// Where it is reached.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Failure domain.
    pub rack: Option<String>,
    /// Executors on it.
    pub shard_count: u16,
    /// The process generation that registered last.
    pub incarnation: u64,
    /// A fenced broker gets no new replicas or leaderships. Brokers
    /// register fenced: a new process has not yet caught up with metadata
    /// and its replicas' state is unknown, so the controller unfences it
    /// (`UnfenceBroker`) once it heartbeats with a current metadata version.
    pub fenced: bool,
    /// In maintenance (`SetBrokerMaintenance`): it leads nothing (its
    /// leaderships are elected elsewhere) but still follows. Kept across
    /// the broker's restarts until disabled.
    pub maintenance: bool,
    /// Being decommissioned (`SetBrokerDecommission`): it takes no new
    /// replica and its replicas are moved to other brokers. Kept across its
    /// restarts until recommissioned.
    pub decommission: Option<Decommission>,
}

impl BrokerRecord {
    /// Whether placement may give it a new replica: unfenced, not being
    /// decommissioned, and with a shard.
    #[must_use]
    pub fn takes_replicas(&self) -> bool {
        !self.fenced && self.decommission.is_none() && self.shard_count > 0
    }
}

/// One partition: its replica set, leader and leader epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRecord {
    /// Replicas, preferred leader first; distinct brokers.
    pub replicas: Vec<Replica>,
    /// The leader, one of the replicas; `None` while leaderless.
    pub leader: Option<NodeId>,
    /// Grows with every leader change (C11).
    pub leader_epoch: LeaderEpoch,
    /// A move of the replica set in progress.
    pub reassignment: Option<Reassignment>,
}

impl PartitionRecord {
    /// The replica on `node`, if it holds one.
    #[must_use]
    pub fn replica_on(&self, node: NodeId) -> Option<Replica> {
        self.replicas
            .iter()
            .copied()
            .find(|replica| replica.node == node)
    }
}

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRecord {
    /// Never reused.
    pub id: TopicId,
    /// Unique among live topics.
    pub name: String,
    /// An internal topic (`__groups`, `__audit`).
    pub internal: bool,
    /// Settings as `key=value` entries.
    pub config: BTreeMap<String, String>,
    /// Partitions by index.
    pub partitions: Vec<PartitionRecord>,
    /// When it was created (stamped by the proposer).
    pub created_at_ms: i64,
    /// The principal whose limits it counts against (see
    /// [`crate::limits`]); `None` for nobody.
    pub owner: Option<String>,
}

impl TopicRecord {
    /// Partition count.
    #[must_use]
    pub fn partition_count(&self) -> u32 {
        u32::try_from(self.partitions.len()).unwrap_or(u32::MAX)
    }

    /// The settings as `(key, value)` pairs, the shape
    /// `TopicConfig::with_entries` takes.
    pub fn config_entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.config
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }
}

/// Why a command was refused. A refused command changes nothing but the
/// metadata version (it still consumed a log index).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A registration field is unusable.
    #[error("invalid registration of broker {node}: {reason}")]
    InvalidBroker {
        /// The broker.
        node: NodeId,
        /// What is wrong.
        reason: String,
    },
    /// The registration comes from an earlier (or conflicting) process.
    #[error(
        "broker {node} registration with incarnation {given} is stale: incarnation {registered} is registered"
    )]
    StaleIncarnation {
        /// The broker.
        node: NodeId,
        /// Registered now.
        registered: u64,
        /// In the command.
        given: u64,
    },
    /// A re-registration would leave replicas on shards that no longer exist.
    #[error("broker {node} cannot shrink to {shard_count} shard(s): shard {in_use} holds replicas")]
    ShardsInUse {
        /// The broker.
        node: NodeId,
        /// Asked for.
        shard_count: u16,
        /// Highest shard with a replica.
        in_use: ShardId,
    },
    /// No such broker.
    #[error("broker {0} is not registered")]
    UnknownBroker(NodeId),
    /// Another broker is in maintenance already.
    #[error(
        "broker {in_maintenance} is in maintenance already; disable it first (one broker at a time, so that every replica set keeps its majority while it restarts)"
    )]
    MaintenanceBusy {
        /// The broker asked for.
        node: NodeId,
        /// The broker in maintenance.
        in_maintenance: NodeId,
    },
    /// The broker cannot be decommissioned as asked.
    #[error("broker {node} cannot be decommissioned: {reason}")]
    InvalidDecommission {
        /// The broker.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// The broker is being decommissioned and takes no new replica.
    #[error("broker {0} is being decommissioned and takes no new replica; recommission it first")]
    BrokerDecommissioning(NodeId),
    /// The broker is fenced and can take no replica or leadership.
    #[error("broker {0} is fenced")]
    BrokerFenced(NodeId),
    /// The partition is being moved already.
    #[error(
        "topic {topic_id} partition {partition} is being reassigned already; wait for it or cancel it"
    )]
    ReassignmentInProgress {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
    },
    /// The target is the replica set the partition has.
    #[error("topic {topic_id} partition {partition} has these replicas already")]
    NothingToMove {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
    },
    /// A change of a moving partition's replica set breaks a rule of the
    /// move (or no move is in progress).
    #[error("topic {topic_id} partition {partition}: {reason}")]
    BadReplicaChange {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The rule.
        reason: ChangeError,
    },
    /// The topic name is not usable.
    #[error("{0}")]
    InvalidTopicName(#[from] InvalidTopicName),
    /// The topic is internal (`__groups`, `__audit`): the broker manages it.
    #[error("topic {0:?} is internal: the broker manages it")]
    InternalTopic(String),
    /// An imported topic conflicts with one the metadata already holds.
    #[error("cannot import topic {name:?} (id {topic_id}): {reason}")]
    ImportConflict {
        /// The topic.
        name: String,
        /// Its id in the import.
        topic_id: TopicId,
        /// What it conflicts with.
        reason: String,
    },
    /// A topic with the name exists.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// No topic with the id.
    #[error("topic {0} does not exist")]
    UnknownTopic(TopicId),
    /// Partition count out of range.
    #[error("partition count {0} must be between 1 and {PARTITIONS_MAX}")]
    InvalidPartitions(usize),
    /// A partition's replica list is unusable.
    #[error("invalid assignment of partition {partition}: {reason}")]
    InvalidAssignment {
        /// The partition.
        partition: u32,
        /// What is wrong.
        reason: String,
    },
    /// The topic's settings are unusable.
    #[error("invalid topic config: {reason}")]
    InvalidConfig {
        /// What is wrong, naming the key.
        reason: String,
    },
    /// The topic has no such partition.
    #[error("topic {topic_id} has no partition {partition}")]
    UnknownPartition {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
    },
    /// The epoch is not greater than the partition's current one.
    #[error(
        "stale leader epoch {given} for topic {topic_id} partition {partition}: current {current}"
    )]
    StaleEpoch {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The partition's epoch.
        current: LeaderEpoch,
        /// In the command.
        given: LeaderEpoch,
    },
    /// The proposed leader holds no replica of the partition.
    #[error("broker {node} is not a replica of topic {topic_id} partition {partition}")]
    NotAReplica {
        /// The topic.
        topic_id: TopicId,
        /// The partition.
        partition: u32,
        /// The broker.
        node: NodeId,
    },
    /// Producer id count out of range.
    #[error("producer id count {0} must be between 1 and {PRODUCER_IDS_PER_COMMAND_MAX}")]
    InvalidProducerIdCount(u32),
    /// The producer id space is used up.
    #[error("producer ids are exhausted")]
    ProducerIdsExhausted,
    /// The user name or credentials are unusable.
    #[error("invalid user: {0}")]
    InvalidUser(String),
    /// No user has the name.
    #[error("user {0:?} does not exist")]
    UnknownUser(String),
    /// The cluster holds [`USERS_MAX`] users already.
    #[error("the cluster holds {USERS_MAX} users already; delete some first")]
    TooManyUsers,
    /// The access rule is malformed.
    #[error("invalid ACL: {0}")]
    InvalidAcl(String),
    /// No such access rule stands.
    #[error("no such ACL: {0}")]
    UnknownAcl(String),
    /// The cluster holds [`ACLS_MAX`] access rules already.
    #[error("the cluster holds {ACLS_MAX} ACLs already; remove some first")]
    TooManyAcls,
    /// The quota is malformed.
    #[error("invalid quota: {0}")]
    InvalidQuota(String),
    /// A topic's owner is not a principal that can own it.
    #[error("invalid topic owner: {0}")]
    InvalidTopicOwner(String),
    /// The entity has no quota.
    #[error("{0} has no quota")]
    UnknownQuota(String),
    /// The cluster holds [`QUOTAS_MAX`] quotas already.
    #[error("the cluster holds {QUOTAS_MAX} quotas already; remove some first")]
    TooManyQuotas,
    /// The creation would take the principal over one of its limits.
    #[error(transparent)]
    LimitExceeded(#[from] LimitExceeded),
}

/// What a [`Command::CreateTopic`] says about the topic besides its
/// placement.
struct NewTopicRecord<'a> {
    name: &'a str,
    internal: bool,
    config: &'a BTreeMap<String, String>,
    owner: Option<&'a str>,
}

/// Checks a user's name and credentials.
fn check_user(name: &str, credentials: &[StoredCredential]) -> Result<(), CommandError> {
    check_user_name(name).map_err(CommandError::InvalidUser)?;
    check_credentials(credentials).map_err(CommandError::InvalidUser)
}

/// The whole cluster metadata. See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataState {
    pub(crate) version: u64,
    pub(crate) brokers: BTreeMap<NodeId, BrokerRecord>,
    pub(crate) topics: BTreeMap<TopicId, TopicRecord>,
    /// Index of `topics` by name; rebuilt on decode, never encoded.
    pub(crate) names: BTreeMap<String, TopicId>,
    pub(crate) next_topic_id: u64,
    pub(crate) producer_id_block_end: i64,
    pub(crate) users: BTreeMap<String, UserRecord>,
    pub(crate) acls: Acls,
    pub(crate) quotas: Quotas,
}

impl MetadataState {
    /// The metadata version: the Raft index of the last applied entry.
    /// Brokers long-poll on it and apply snapshots in its order.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Registered brokers by id.
    #[must_use]
    pub fn brokers(&self) -> &BTreeMap<NodeId, BrokerRecord> {
        &self.brokers
    }

    /// Users by name.
    #[must_use]
    pub fn users(&self) -> &BTreeMap<String, UserRecord> {
        &self.users
    }

    /// The access rules.
    #[must_use]
    pub fn acls(&self) -> &Acls {
        &self.acls
    }

    /// Quotas by entity.
    #[must_use]
    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    /// Topics by id.
    #[must_use]
    pub fn topics(&self) -> &BTreeMap<TopicId, TopicRecord> {
        &self.topics
    }

    /// The topic named `name`.
    #[must_use]
    pub fn topic_by_name(&self, name: &str) -> Option<&TopicRecord> {
        self.names.get(name).and_then(|id| self.topics.get(id))
    }

    /// The id the next created topic gets.
    #[must_use]
    pub fn next_topic_id(&self) -> TopicId {
        TopicId(self.next_topic_id)
    }

    /// Producer ids below this were handed out.
    #[must_use]
    pub fn producer_id_block_end(&self) -> i64 {
        self.producer_id_block_end
    }

    /// Every partition of every topic, by topic id then index.
    pub fn partitions(&self) -> impl Iterator<Item = (TopicId, u32, &PartitionRecord)> {
        self.topics.values().flat_map(|topic| {
            (0u32..)
                .zip(&topic.partitions)
                .map(move |(index, record)| (topic.id, index, record))
        })
    }

    /// A partition.
    #[must_use]
    pub fn partition(&self, topic_id: TopicId, partition: u32) -> Option<&PartitionRecord> {
        self.topics
            .get(&topic_id)?
            .partitions
            .get(partition as usize)
    }

    /// Records that the entry at `index` carried no command (a new Raft
    /// leader's empty entry), so that the version still equals the applied
    /// index.
    ///
    /// # Panics
    /// If `index` does not follow the version: entries apply in log order.
    pub fn note_applied(&mut self, index: u64) {
        assert!(
            index > self.version,
            "metadata index {index} applied after {}",
            self.version
        );
        self.version = index;
    }

    /// Applies the command committed at Raft index `index`.
    ///
    /// # Errors
    /// A [`CommandError`] when the command is refused; the state is then
    /// unchanged but for the version.
    ///
    /// # Panics
    /// If `index` does not follow the version: entries apply in log order.
    pub fn apply(&mut self, index: u64, command: &Command) -> Result<Outcome, CommandError> {
        self.note_applied(index);
        match command {
            Command::RegisterBroker {
                node,
                host,
                port,
                rack,
                shard_count,
                incarnation,
            } => self.register_broker(BrokerRecord {
                id: *node,
                host: host.clone(),
                port: *port,
                rack: rack.clone(),
                shard_count: *shard_count,
                incarnation: *incarnation,
                fenced: true,
                maintenance: false,
                decommission: None,
            }),
            Command::FenceBroker { node } => {
                let broker = self
                    .brokers
                    .get_mut(node)
                    .ok_or(CommandError::UnknownBroker(*node))?;
                let changed = !broker.fenced;
                broker.fenced = true;
                Ok(Outcome::BrokerFenced {
                    node: *node,
                    changed,
                })
            }
            Command::SetBrokerMaintenance { node, enabled } => {
                self.check_maintenance(*node, *enabled)?;
                let broker = self
                    .brokers
                    .get_mut(node)
                    .ok_or(CommandError::UnknownBroker(*node))?;
                let changed = broker.maintenance != *enabled;
                broker.maintenance = *enabled;
                Ok(Outcome::BrokerMaintenance {
                    node: *node,
                    changed,
                })
            }
            Command::SetBrokerDecommission { node, decommission } => {
                self.set_decommission(*node, *decommission)
            }
            Command::UnfenceBroker { node, incarnation } => {
                let broker = self
                    .brokers
                    .get_mut(node)
                    .ok_or(CommandError::UnknownBroker(*node))?;
                if broker.incarnation != *incarnation {
                    return Err(CommandError::StaleIncarnation {
                        node: *node,
                        registered: broker.incarnation,
                        given: *incarnation,
                    });
                }
                let changed = broker.fenced;
                broker.fenced = false;
                Ok(Outcome::BrokerUnfenced {
                    node: *node,
                    changed,
                })
            }
            Command::CreateTopic {
                name,
                internal,
                config,
                assignments,
                created_at_ms,
                owner,
            } => self.create_topic(
                NewTopicRecord {
                    name,
                    internal: *internal,
                    config,
                    owner: owner.as_deref(),
                },
                assignments,
                *created_at_ms,
            ),
            Command::DeleteTopic { topic_id } => self.delete_topic(*topic_id),
            Command::StartReassignment {
                topic_id,
                partition,
                target,
                throttle_bytes_per_s,
                started_at_ms,
            } => self.start_reassignment(
                *topic_id,
                *partition,
                Reassignment {
                    original: Vec::new(),
                    target: target.clone(),
                    throttle_bytes_per_s: *throttle_bytes_per_s,
                    started_at_ms: *started_at_ms,
                    cancelled: false,
                },
            ),
            Command::CancelReassignment {
                topic_id,
                partition,
            } => {
                let record = self.partition_mut(*topic_id, *partition)?;
                let Some(changed) = reassignment::cancel(record) else {
                    return Err(CommandError::BadReplicaChange {
                        topic_id: *topic_id,
                        partition: *partition,
                        reason: ChangeError::NoReassignment,
                    });
                };
                Ok(Outcome::ReassignmentCancelled { changed })
            }
            Command::ChangeReplicaSet {
                topic_id,
                partition,
                replicas,
                leader,
                epoch,
            } => self.change_replica_set(*topic_id, *partition, replicas, *leader, *epoch),
            Command::ResignLeader {
                topic_id,
                partition,
                leader,
                epoch,
            } => {
                let record = self.partition_mut(*topic_id, *partition)?;
                let changed = record.leader == Some(*leader) && record.leader_epoch == *epoch;
                if changed {
                    record.leader = None;
                }
                Ok(Outcome::LeaderResigned { changed })
            }
            Command::ImportTopics {
                topics,
                next_topic_id,
                producer_id_block_end,
            } => self.import_topics(topics, *next_topic_id, *producer_id_block_end),
            Command::SetLeader {
                topic_id,
                partition,
                leader,
                epoch,
            } => self.set_leader(*topic_id, *partition, *leader, *epoch),
            Command::AllocateProducerIds { count } => {
                if *count == 0 || *count > PRODUCER_IDS_PER_COMMAND_MAX {
                    return Err(CommandError::InvalidProducerIdCount(*count));
                }
                let start = self.producer_id_block_end;
                let end = start
                    .checked_add(i64::from(*count))
                    .ok_or(CommandError::ProducerIdsExhausted)?;
                self.producer_id_block_end = end;
                Ok(Outcome::ProducerIdsAllocated { start, end })
            }
            Command::PutUser { name, credentials } => {
                check_user(name, credentials)?;
                if !self.users.contains_key(name) && self.users.len() >= USERS_MAX {
                    return Err(CommandError::TooManyUsers);
                }
                let record = UserRecord {
                    name: name.clone(),
                    credentials: credentials.clone(),
                    changed_at: self.version,
                };
                let created = self.users.insert(name.clone(), record).is_none();
                Ok(Outcome::UserPut { created })
            }
            Command::DeleteUser { name } => {
                self.users
                    .remove(name)
                    .ok_or_else(|| CommandError::UnknownUser(name.clone()))?;
                Ok(Outcome::UserDeleted)
            }
            Command::PutAcl { binding } => {
                binding.check().map_err(CommandError::InvalidAcl)?;
                if !self.acls.contains(binding) && self.acls.len() >= ACLS_MAX {
                    return Err(CommandError::TooManyAcls);
                }
                let created = self.acls.insert(binding.clone());
                Ok(Outcome::AclPut { created })
            }
            Command::DeleteAcl { binding } => {
                if !self.acls.remove(binding) {
                    return Err(CommandError::UnknownAcl(binding.to_string()));
                }
                Ok(Outcome::AclDeleted)
            }
            Command::PutQuota { entity, limits } => {
                limits.check(entity).map_err(CommandError::InvalidQuota)?;
                if !self.quotas.contains_key(entity) && self.quotas.len() >= QUOTAS_MAX {
                    return Err(CommandError::TooManyQuotas);
                }
                let created = self.quotas.insert(entity.clone(), *limits).is_none();
                Ok(Outcome::QuotaPut { created })
            }
            Command::DeleteQuota { entity } => {
                self.quotas
                    .remove(entity)
                    .ok_or_else(|| CommandError::UnknownQuota(entity.to_string()))?;
                Ok(Outcome::QuotaDeleted)
            }
        }
    }

    fn register_broker(&mut self, broker: BrokerRecord) -> Result<Outcome, CommandError> {
        let node = broker.id;
        validate_broker(&broker)?;
        if let Some(registered) = self.brokers.get(&node) {
            let retry = registered.incarnation == broker.incarnation
                && registered.host == broker.host
                && registered.port == broker.port
                && registered.rack == broker.rack
                && registered.shard_count == broker.shard_count;
            if retry {
                // The same process asking again (its answer was lost): no
                // change, and in particular its fence stays as it is.
                return Ok(Outcome::BrokerRegistered {
                    node,
                    incarnation: broker.incarnation,
                });
            }
            if broker.incarnation <= registered.incarnation {
                return Err(CommandError::StaleIncarnation {
                    node,
                    registered: registered.incarnation,
                    given: broker.incarnation,
                });
            }
        }
        if let Some(in_use) = self.highest_shard_used(node)
            && in_use.0 >= broker.shard_count
        {
            return Err(CommandError::ShardsInUse {
                node,
                shard_count: broker.shard_count,
                in_use,
            });
        }
        let incarnation = broker.incarnation;
        // Maintenance outlives the process: it is how an operator restarts
        // a broker without it taking leaderships back in between.
        // So does a decommission: a restart must not give the broker its
        // place back.
        let registered = self.brokers.get(&node);
        let maintenance = registered.is_some_and(|registered| registered.maintenance);
        let decommission = registered.and_then(|registered| registered.decommission);
        self.brokers.insert(
            node,
            BrokerRecord {
                maintenance,
                decommission,
                ..broker
            },
        );
        // A new process cannot continue its predecessor's leaderships: a
        // replica never leads an epoch twice (it may have lost an unsynced
        // tail its followers kept). Leaderless, they are elected again, as
        // soon as a majority of each replica set answers.
        for partition in self
            .topics
            .values_mut()
            .flat_map(|topic| topic.partitions.iter_mut())
            .filter(|partition| partition.leader == Some(node))
        {
            partition.leader = None;
        }
        Ok(Outcome::BrokerRegistered { node, incarnation })
    }

    /// The highest shard of `node` that holds a replica, or is to hold or
    /// held one in a move in progress.
    fn highest_shard_used(&self, node: NodeId) -> Option<ShardId> {
        self.topics
            .values()
            .flat_map(|topic| &topic.partitions)
            .flat_map(|partition| {
                let moving = partition.reassignment.iter().flat_map(|reassignment| {
                    reassignment.original.iter().chain(&reassignment.target)
                });
                partition.replicas.iter().chain(moving)
            })
            .filter(|replica| replica.node == node)
            .map(|replica| replica.shard)
            .max()
    }

    /// Checks what a new topic is before where it goes: its name, its
    /// settings, and that no topic has the name. The first part of
    /// [`MetadataState::check`] for a creation, for a leader to run before
    /// it computes a placement.
    ///
    /// # Errors
    /// [`CommandError::InvalidTopicName`], [`CommandError::InvalidConfig`]
    /// or [`CommandError::TopicExists`].
    pub fn check_new_topic(
        &self,
        name: &str,
        internal: bool,
        config: &BTreeMap<String, String>,
    ) -> Result<(), CommandError> {
        check_topic_name(name, internal)?;
        validate_config(config)?;
        if self.names.contains_key(name) {
            return Err(CommandError::TopicExists(name.to_owned()));
        }
        Ok(())
    }

    /// Checks a topic creation against the state, without changing it: the
    /// rules [`MetadataState::apply`] enforces, for a leader to run before it
    /// proposes (and for `validate_only` requests).
    fn check_create_topic(
        &self,
        topic: &NewTopicRecord<'_>,
        assignments: &[Vec<Replica>],
    ) -> Result<(), CommandError> {
        self.check_new_topic(topic.name, topic.internal, topic.config)?;
        if assignments.is_empty() || assignments.len() > PARTITIONS_MAX as usize {
            return Err(CommandError::InvalidPartitions(assignments.len()));
        }
        for (partition, replicas) in (0u32..).zip(assignments) {
            self.validate_replicas(partition, replicas)?;
        }
        if let Some(owner) = topic.owner {
            if topic.internal {
                return Err(CommandError::InvalidTopicOwner(
                    "an internal topic counts for nobody".to_owned(),
                ));
            }
            check_user_name(owner).map_err(CommandError::InvalidTopicOwner)?;
            let partitions = u32::try_from(assignments.len()).unwrap_or(u32::MAX);
            self.check_owner_limits(owner, partitions)?;
        }
        Ok(())
    }

    /// Checks that `owner` may own one more topic of `partitions`
    /// partitions: before a proposal, and again when it applies, so that
    /// creations proposed together cannot pass the limit between them.
    ///
    /// # Errors
    /// [`CommandError::LimitExceeded`].
    pub fn check_owner_limits(&self, owner: &str, partitions: u32) -> Result<(), CommandError> {
        let usage = Usage::of(self.topics.values(), owner);
        let allowed = ObjectLimits::of(&self.quotas, owner);
        limits::check_new_topic(owner, usage, allowed, partitions)?;
        Ok(())
    }

    fn create_topic(
        &mut self,
        topic: NewTopicRecord<'_>,
        assignments: &[Vec<Replica>],
        created_at_ms: i64,
    ) -> Result<Outcome, CommandError> {
        self.check_create_topic(&topic, assignments)?;
        let NewTopicRecord {
            name,
            internal,
            config,
            owner,
        } = topic;
        let partitions = assignments
            .iter()
            .map(|replicas| PartitionRecord {
                replicas: replicas.clone(),
                leader: replicas.first().map(|replica| replica.node),
                leader_epoch: LeaderEpoch(0),
                reassignment: None,
            })
            .collect();
        let id = TopicId(self.next_topic_id);
        self.next_topic_id += 1;
        self.insert_topic(TopicRecord {
            id,
            name: name.to_owned(),
            internal,
            config: config.clone(),
            partitions,
            created_at_ms,
            owner: owner.map(str::to_owned),
        });
        Ok(Outcome::TopicCreated { topic_id: id })
    }

    fn insert_topic(&mut self, topic: TopicRecord) {
        self.names.insert(topic.name.clone(), topic.id);
        self.topics.insert(topic.id, topic);
    }

    fn check_delete_topic(&self, topic_id: TopicId) -> Result<&TopicRecord, CommandError> {
        let topic = self
            .topics
            .get(&topic_id)
            .ok_or(CommandError::UnknownTopic(topic_id))?;
        if topic.internal {
            return Err(CommandError::InternalTopic(topic.name.clone()));
        }
        Ok(topic)
    }

    fn delete_topic(&mut self, topic_id: TopicId) -> Result<Outcome, CommandError> {
        self.check_delete_topic(topic_id)?;
        let topic = self
            .topics
            .remove(&topic_id)
            .ok_or(CommandError::UnknownTopic(topic_id))?;
        self.names.remove(&topic.name);
        Ok(Outcome::TopicDeleted {
            topic_id,
            name: topic.name,
        })
    }

    /// Checks an import: every topic either already here, identical in id,
    /// name and partition count (an import applied before, retried after a
    /// crash), or new and valid, with an id below the import's next id.
    fn check_import(
        &self,
        topics: &[ImportedTopic],
        next_topic_id: u64,
        producer_id_block_end: i64,
    ) -> Result<(), CommandError> {
        if producer_id_block_end < 0 {
            return Err(CommandError::InvalidProducerIdCount(0));
        }
        let mut seen = BTreeSet::new();
        for topic in topics {
            let conflict = |reason: String| CommandError::ImportConflict {
                name: topic.name.clone(),
                topic_id: topic.id,
                reason,
            };
            if !seen.insert(topic.id) || topic.id.0 >= next_topic_id {
                return Err(conflict(format!(
                    "ids must be distinct and below the next topic id {next_topic_id}"
                )));
            }
            match (self.topics.get(&topic.id), self.names.get(&topic.name)) {
                (Some(existing), _) if existing.name == topic.name => {
                    if existing.partitions.len() != topic.partitions.len() {
                        return Err(conflict(format!(
                            "it exists with {} partitions, the import has {}",
                            existing.partitions.len(),
                            topic.partitions.len()
                        )));
                    }
                }
                (Some(existing), _) => {
                    return Err(conflict(format!(
                        "the id belongs to topic {:?}",
                        existing.name
                    )));
                }
                (None, Some(other)) => {
                    return Err(conflict(format!("the name belongs to topic id {other}")));
                }
                (None, None) if topic.id.0 < self.next_topic_id => {
                    return Err(conflict(format!(
                        "the id is below this cluster's next topic id {}: it may have been used",
                        self.next_topic_id
                    )));
                }
                (None, None) => {
                    check_topic_name(&topic.name, topic.internal)?;
                    validate_config(&topic.config)?;
                    if topic.partitions.is_empty()
                        || topic.partitions.len() > PARTITIONS_MAX as usize
                    {
                        return Err(CommandError::InvalidPartitions(topic.partitions.len()));
                    }
                    for (partition, replicas) in (0u32..).zip(&topic.partitions) {
                        self.validate_replicas(partition, replicas)?;
                    }
                    if topic.leader_epochs.len() != topic.partitions.len()
                        || topic
                            .leader_epochs
                            .iter()
                            .any(|epoch| *epoch < IMPORTED_LEADER_EPOCH)
                    {
                        return Err(conflict(format!(
                            "it needs one leader epoch of at least {} per partition",
                            IMPORTED_LEADER_EPOCH.0
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes in topics a standalone broker's catalog held, or a rebuilt
    /// catalog, under their own ids; see [`Command::ImportTopics`].
    fn import_topics(
        &mut self,
        topics: &[ImportedTopic],
        next_topic_id: u64,
        producer_id_block_end: i64,
    ) -> Result<Outcome, CommandError> {
        self.check_import(topics, next_topic_id, producer_id_block_end)?;
        let mut imported = 0;
        for topic in topics {
            if self.topics.contains_key(&topic.id) {
                continue;
            }
            imported += 1;
            self.insert_topic(TopicRecord {
                id: topic.id,
                name: topic.name.clone(),
                internal: topic.internal,
                config: topic.config.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .zip(&topic.leader_epochs)
                    .map(|(replicas, epoch)| PartitionRecord {
                        replicas: replicas.clone(),
                        leader: replicas.first().map(|replica| replica.node),
                        leader_epoch: *epoch,
                        reassignment: None,
                    })
                    .collect(),
                created_at_ms: topic.created_at_ms,
                // A standalone broker's topics predate owners.
                owner: None,
            });
        }
        self.next_topic_id = self.next_topic_id.max(next_topic_id);
        self.producer_id_block_end = self.producer_id_block_end.max(producer_id_block_end);
        Ok(Outcome::TopicsImported { imported })
    }

    /// Checks `command` against the state without applying it: the same
    /// rules [`MetadataState::apply`] enforces for topic creation, deletion
    /// and import, so that a leader refuses a bad request at once instead
    /// of spending a log entry on it. Other commands pass (their checks
    /// depend on the order they apply in).
    ///
    /// # Errors
    /// The [`CommandError`] applying it would give.
    pub fn check(&self, command: &Command) -> Result<(), CommandError> {
        match command {
            Command::CreateTopic {
                name,
                internal,
                config,
                assignments,
                owner,
                ..
            } => self.check_create_topic(
                &NewTopicRecord {
                    name,
                    internal: *internal,
                    config,
                    owner: owner.as_deref(),
                },
                assignments,
            ),
            Command::DeleteTopic { topic_id } => self.check_delete_topic(*topic_id).map(drop),
            Command::ImportTopics {
                topics,
                next_topic_id,
                producer_id_block_end,
            } => self.check_import(topics, *next_topic_id, *producer_id_block_end),
            Command::PutUser { name, credentials } => check_user(name, credentials),
            Command::DeleteUser { name } => {
                if self.users.contains_key(name) {
                    Ok(())
                } else {
                    Err(CommandError::UnknownUser(name.clone()))
                }
            }
            Command::PutAcl { binding } => binding.check().map_err(CommandError::InvalidAcl),
            Command::PutQuota { entity, limits } => {
                limits.check(entity).map_err(CommandError::InvalidQuota)
            }
            Command::DeleteQuota { entity } => {
                if self.quotas.contains_key(entity) {
                    Ok(())
                } else {
                    Err(CommandError::UnknownQuota(entity.to_string()))
                }
            }
            Command::DeleteAcl { binding } => {
                if self.acls.contains(binding) {
                    Ok(())
                } else {
                    Err(CommandError::UnknownAcl(binding.to_string()))
                }
            }
            Command::SetBrokerMaintenance { node, enabled } => {
                self.check_maintenance(*node, *enabled)
            }
            Command::SetBrokerDecommission { node, decommission } => {
                self.check_decommission(*node, decommission.as_ref())
            }
            Command::StartReassignment {
                topic_id,
                partition,
                target,
                ..
            } => self
                .check_start_reassignment(*topic_id, *partition, target)
                .map(drop),
            Command::CancelReassignment {
                topic_id,
                partition,
            } => {
                let record = self.existing_partition(*topic_id, *partition)?;
                if record.reassignment.is_none() {
                    return Err(CommandError::BadReplicaChange {
                        topic_id: *topic_id,
                        partition: *partition,
                        reason: ChangeError::NoReassignment,
                    });
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Marks `node` decommissioning, or clears the mark and turns back the
    /// moves still running off it (see [`crate::decommission`]).
    fn set_decommission(
        &mut self,
        node: NodeId,
        wanted: Option<Decommission>,
    ) -> Result<Outcome, CommandError> {
        self.check_decommission(node, wanted.as_ref())?;
        let broker = self
            .brokers
            .get_mut(&node)
            .ok_or(CommandError::UnknownBroker(node))?;
        let changed = broker.decommission != wanted;
        broker.decommission = wanted;
        let mut cancelled = 0;
        if wanted.is_none() {
            for topic in self.topics.values_mut() {
                for record in &mut topic.partitions {
                    if decommission::moves_off(record, node) {
                        reassignment::cancel(record);
                        cancelled += 1;
                    }
                }
            }
        }
        Ok(Outcome::BrokerDecommission {
            node,
            changed,
            cancelled,
        })
    }

    /// Whether `node` may be decommissioned as `wanted` (every partition
    /// on it must find a replacement among the brokers that stay), or
    /// recommissioned (`None`).
    fn check_decommission(
        &self,
        node: NodeId,
        wanted: Option<&Decommission>,
    ) -> Result<(), CommandError> {
        if !self.brokers.contains_key(&node) {
            return Err(CommandError::UnknownBroker(node));
        }
        let Some(wanted) = wanted else {
            return Ok(());
        };
        if wanted.max_moves == 0 {
            return Err(CommandError::InvalidDecommission {
                node,
                reason: "at least one move must be allowed at a time".to_owned(),
            });
        }
        let staying = self
            .brokers
            .values()
            .filter(|broker| broker.id != node && broker.decommission.is_none())
            .count();
        let widest = self
            .topics
            .values()
            .flat_map(|topic| &topic.partitions)
            .filter(|record| record.replica_on(node).is_some())
            .map(|record| record.replicas.len())
            .max()
            .unwrap_or(0);
        if widest > staying {
            return Err(CommandError::InvalidDecommission {
                node,
                reason: format!(
                    "a partition on it has {widest} replicas and only {staying} broker(s) would stay; add a broker first"
                ),
            });
        }
        Ok(())
    }

    /// Whether `node` may be put in maintenance (`enabled`) or out of it.
    fn check_maintenance(&self, node: NodeId, enabled: bool) -> Result<(), CommandError> {
        if !self.brokers.contains_key(&node) {
            return Err(CommandError::UnknownBroker(node));
        }
        if enabled
            && let Some(other) = self
                .brokers
                .values()
                .find(|broker| broker.maintenance && broker.id != node)
        {
            return Err(CommandError::MaintenanceBusy {
                node,
                in_maintenance: other.id,
            });
        }
        Ok(())
    }

    /// The broker in maintenance, if any.
    #[must_use]
    pub fn broker_in_maintenance(&self) -> Option<NodeId> {
        self.brokers
            .values()
            .find(|broker| broker.maintenance)
            .map(|broker| broker.id)
    }

    fn validate_replicas(&self, partition: u32, replicas: &[Replica]) -> Result<(), CommandError> {
        let invalid = |reason: String| Err(CommandError::InvalidAssignment { partition, reason });
        if replicas.is_empty() || replicas.len() > REPLICAS_MAX {
            return invalid(format!("must have 1 to {REPLICAS_MAX} replicas"));
        }
        let mut seen = BTreeSet::new();
        for replica in replicas {
            if !seen.insert(replica.node) {
                return invalid(format!("broker {} appears twice", replica.node));
            }
            let broker = self
                .brokers
                .get(&replica.node)
                .ok_or(CommandError::UnknownBroker(replica.node))?;
            if broker.fenced {
                return Err(CommandError::BrokerFenced(replica.node));
            }
            if replica.shard.0 >= broker.shard_count {
                return invalid(format!(
                    "broker {} has {} shard(s), not shard {}",
                    replica.node, broker.shard_count, replica.shard
                ));
            }
        }
        Ok(())
    }

    fn partition_mut(
        &mut self,
        topic_id: TopicId,
        partition: u32,
    ) -> Result<&mut PartitionRecord, CommandError> {
        self.topics
            .get_mut(&topic_id)
            .ok_or(CommandError::UnknownTopic(topic_id))?
            .partitions
            .get_mut(partition as usize)
            .ok_or(CommandError::UnknownPartition {
                topic_id,
                partition,
            })
    }

    fn existing_partition(
        &self,
        topic_id: TopicId,
        partition: u32,
    ) -> Result<&PartitionRecord, CommandError> {
        self.topics
            .get(&topic_id)
            .ok_or(CommandError::UnknownTopic(topic_id))?
            .partitions
            .get(partition as usize)
            .ok_or(CommandError::UnknownPartition {
                topic_id,
                partition,
            })
    }

    /// Whether a move of the partition to `target` may start; returns the
    /// partition's current set.
    fn check_start_reassignment(
        &self,
        topic_id: TopicId,
        partition: u32,
        target: &[Replica],
    ) -> Result<Vec<Replica>, CommandError> {
        self.validate_replicas(partition, target)?;
        let record = self.existing_partition(topic_id, partition)?;
        if record.reassignment.is_some() {
            return Err(CommandError::ReassignmentInProgress {
                topic_id,
                partition,
            });
        }
        if reassignment::same_brokers(&record.replicas, target) {
            return Err(CommandError::NothingToMove {
                topic_id,
                partition,
            });
        }
        let joining_decommissioned = target
            .iter()
            .filter(|replica| record.replica_on(replica.node).is_none())
            .find(|replica| {
                self.brokers
                    .get(&replica.node)
                    .is_some_and(|broker| broker.decommission.is_some())
            });
        if let Some(replica) = joining_decommissioned {
            return Err(CommandError::BrokerDecommissioning(replica.node));
        }
        Ok(record.replicas.clone())
    }

    fn start_reassignment(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        mut reassignment: Reassignment,
    ) -> Result<Outcome, CommandError> {
        reassignment.original =
            self.check_start_reassignment(topic_id, partition, &reassignment.target)?;
        let record = self.partition_mut(topic_id, partition)?;
        record.reassignment = Some(reassignment);
        Ok(Outcome::ReassignmentStarted {
            topic_id,
            partition,
        })
    }

    /// One step of a move: `replicas` (one replica added or removed, see
    /// [`reassignment::check_change`]) led by `leader` from `epoch` on.
    /// The move ends when the set is its goal, in the goal's order.
    fn change_replica_set(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        replicas: &[Replica],
        leader: Option<NodeId>,
        epoch: LeaderEpoch,
    ) -> Result<Outcome, CommandError> {
        for replica in replicas {
            let broker = self
                .brokers
                .get(&replica.node)
                .ok_or(CommandError::UnknownBroker(replica.node))?;
            if replica.shard.0 >= broker.shard_count {
                return Err(CommandError::InvalidAssignment {
                    partition,
                    reason: format!(
                        "broker {} has {} shard(s), not shard {}",
                        replica.node, broker.shard_count, replica.shard
                    ),
                });
            }
        }
        let record = self.partition_mut(topic_id, partition)?;
        reassignment::check_change(record, replicas).map_err(|reason| {
            CommandError::BadReplicaChange {
                topic_id,
                partition,
                reason,
            }
        })?;
        check_leadership(
            (topic_id, partition),
            record.leader_epoch,
            replicas,
            leader,
            epoch,
        )?;
        record.replicas = replicas.to_vec();
        record.leader = leader;
        record.leader_epoch = epoch;
        let finished = record
            .reassignment
            .as_ref()
            .filter(|reassignment| reassignment.reached(replicas))
            .map(|reassignment| reassignment.goal().to_vec());
        if let Some(goal) = &finished {
            // Preferred leader first again, as the goal lists it.
            record.replicas.clone_from(goal);
            record.reassignment = None;
        }
        Ok(Outcome::ReplicaSetChanged {
            leader,
            epoch,
            finished: finished.is_some(),
        })
    }

    fn set_leader(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        leader: Option<NodeId>,
        epoch: LeaderEpoch,
    ) -> Result<Outcome, CommandError> {
        if let Some(node) = leader {
            match self.brokers.get(&node) {
                None => return Err(CommandError::UnknownBroker(node)),
                Some(broker) if broker.fenced => return Err(CommandError::BrokerFenced(node)),
                Some(_) => {}
            }
        }
        let record = self.partition_mut(topic_id, partition)?;
        check_leadership(
            (topic_id, partition),
            record.leader_epoch,
            &record.replicas,
            leader,
            epoch,
        )?;
        record.leader = leader;
        record.leader_epoch = epoch;
        Ok(Outcome::LeaderSet {
            topic_id,
            partition,
            leader,
            epoch,
        })
    }

    /// Checks every structural invariant; used after decoding a snapshot
    /// (a snapshot that breaks one is corrupt) and by the tests after every
    /// applied command.
    ///
    /// # Errors
    /// The first broken invariant, as a sentence.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, broker) in &self.brokers {
            if *id != broker.id {
                return Err(format!("broker {id} is keyed under another id"));
            }
            validate_broker(broker).map_err(|error| error.to_string())?;
        }
        if self
            .brokers
            .values()
            .filter(|broker| broker.maintenance)
            .count()
            > 1
        {
            return Err("more than one broker is in maintenance".to_owned());
        }
        if self.names.len() != self.topics.len() {
            return Err("the name index does not match the topics".to_owned());
        }
        if self.producer_id_block_end < 0 {
            return Err("the producer id block end is negative".to_owned());
        }
        if self.users.len() > USERS_MAX {
            return Err(format!("{} users, over {USERS_MAX}", self.users.len()));
        }
        for (name, user) in &self.users {
            if *name != user.name {
                return Err(format!("user {name:?} is keyed under another name"));
            }
            check_user(name, &user.credentials).map_err(|error| error.to_string())?;
            if user.changed_at > self.version {
                return Err(format!("user {name:?} changed after the metadata version"));
            }
        }
        if self.acls.len() > ACLS_MAX {
            return Err(format!("{} ACLs, over {ACLS_MAX}", self.acls.len()));
        }
        for binding in self.acls.iter() {
            binding
                .check()
                .map_err(|reason| format!("ACL {binding}: {reason}"))?;
        }
        if self.quotas.len() > QUOTAS_MAX {
            return Err(format!("{} quotas, over {QUOTAS_MAX}", self.quotas.len()));
        }
        for (entity, limits) in &self.quotas {
            limits
                .check(entity)
                .map_err(|reason| format!("quota of {entity}: {reason}"))?;
        }
        for (id, topic) in &self.topics {
            if *id != topic.id || self.names.get(&topic.name) != Some(id) {
                return Err(format!("topic {id} is indexed under another id or name"));
            }
            if id.0 >= self.next_topic_id {
                return Err(format!("topic {id} is not below the next topic id"));
            }
            check_topic_name(&topic.name, topic.internal).map_err(|error| error.to_string())?;
            if let Some(owner) = &topic.owner {
                if topic.internal {
                    return Err(format!("internal topic {id} has an owner"));
                }
                check_user_name(owner).map_err(|reason| format!("topic {id} owner: {reason}"))?;
            }
            validate_config(&topic.config).map_err(|error| error.to_string())?;
            if topic.partitions.is_empty() || topic.partitions.len() > PARTITIONS_MAX as usize {
                return Err(format!(
                    "topic {id} has {} partitions",
                    topic.partitions.len()
                ));
            }
            for (index, partition) in topic.partitions.iter().enumerate() {
                self.check_partition(partition)
                    .map_err(|reason| format!("topic {id} partition {index}: {reason}"))?;
            }
        }
        Ok(())
    }

    fn check_partition(&self, partition: &PartitionRecord) -> Result<(), String> {
        if partition.replicas.is_empty() || partition.replicas.len() > REPLICAS_MAX {
            return Err(format!("{} replicas", partition.replicas.len()));
        }
        let mut seen = BTreeSet::new();
        for replica in &partition.replicas {
            if !seen.insert(replica.node) {
                return Err(format!("broker {} appears twice", replica.node));
            }
            let broker = self
                .brokers
                .get(&replica.node)
                .ok_or_else(|| format!("replica on unregistered broker {}", replica.node))?;
            if replica.shard.0 >= broker.shard_count {
                return Err(format!("replica on missing shard {}", replica.shard));
            }
        }
        if let Some(leader) = partition.leader
            && !seen.contains(&leader)
        {
            return Err(format!("leader {leader} is not a replica"));
        }
        if let Some(reassignment) = &partition.reassignment {
            self.check_reassignment(partition, reassignment)?;
        }
        Ok(())
    }
}

impl MetadataState {
    /// A move's sets are usable, it is not finished, and the replica set is
    /// made of its original and target replicas only.
    fn check_reassignment(
        &self,
        partition: &PartitionRecord,
        reassignment: &Reassignment,
    ) -> Result<(), String> {
        for (what, set) in [
            ("original", &reassignment.original),
            ("target", &reassignment.target),
        ] {
            if set.is_empty() || set.len() > REPLICAS_MAX {
                return Err(format!(
                    "a reassignment's {what} set has {} replicas",
                    set.len()
                ));
            }
            let distinct: BTreeSet<NodeId> = set.iter().map(|replica| replica.node).collect();
            if distinct.len() != set.len() {
                return Err(format!("a reassignment's {what} set repeats a broker"));
            }
            if let Some(replica) = set.iter().find(|replica| {
                self.brokers
                    .get(&replica.node)
                    .is_none_or(|broker| replica.shard.0 >= broker.shard_count)
            }) {
                return Err(format!(
                    "a reassignment's {what} set names missing broker {} or shard {}",
                    replica.node, replica.shard
                ));
            }
        }
        if reassignment.reached(&partition.replicas) {
            return Err("a finished reassignment is still in progress".to_owned());
        }
        if let Some(stray) = partition.replicas.iter().find(|replica| {
            !reassignment.original.contains(replica) && !reassignment.target.contains(replica)
        }) {
            return Err(format!(
                "replica on broker {} is in neither set of the reassignment",
                stray.node
            ));
        }
        Ok(())
    }
}

/// A new leadership of a partition at `current` epoch: `epoch` above it,
/// and `leader` (if any) one of `replicas`.
fn check_leadership(
    (topic_id, partition): (TopicId, u32),
    current: LeaderEpoch,
    replicas: &[Replica],
    leader: Option<NodeId>,
    epoch: LeaderEpoch,
) -> Result<(), CommandError> {
    if epoch <= current {
        return Err(CommandError::StaleEpoch {
            topic_id,
            partition,
            current,
            given: epoch,
        });
    }
    if let Some(node) = leader
        && !replicas.iter().any(|replica| replica.node == node)
    {
        return Err(CommandError::NotAReplica {
            topic_id,
            partition,
            node,
        });
    }
    Ok(())
}

fn validate_broker(broker: &BrokerRecord) -> Result<(), CommandError> {
    let invalid = |reason: &str| {
        Err(CommandError::InvalidBroker {
            node: broker.id,
            reason: reason.to_owned(),
        })
    };
    if broker.id.0 == 0 {
        return invalid("node id 0 is reserved");
    }
    if broker.host.is_empty() || broker.host.len() > HOST_BYTES_MAX {
        return invalid("host must be 1 to 255 bytes");
    }
    if broker
        .rack
        .as_ref()
        .is_some_and(|rack| rack.is_empty() || rack.len() > RACK_BYTES_MAX)
    {
        return invalid("rack must be 1 to 255 bytes when set");
    }
    if broker.shard_count == 0 {
        return invalid("shard count must be at least 1");
    }
    Ok(())
}

/// Checks the stored form of a topic's settings: bounded (the encoding's
/// limits) and meaningful (every key known, every value in range).
fn validate_config(config: &BTreeMap<String, String>) -> Result<(), CommandError> {
    let invalid = |reason: String| Err(CommandError::InvalidConfig { reason });
    if config.len() > CONFIG_ENTRIES_MAX {
        return invalid(format!("more than {CONFIG_ENTRIES_MAX} entries"));
    }
    for (key, value) in config {
        if key.is_empty() || key.len() > CONFIG_KEY_BYTES_MAX {
            return invalid(format!(
                "key {key:?}: keys are 1 to {CONFIG_KEY_BYTES_MAX} bytes"
            ));
        }
        if value.len() > CONFIG_VALUE_BYTES_MAX {
            return invalid(format!(
                "{key}: values are at most {CONFIG_VALUE_BYTES_MAX} bytes"
            ));
        }
    }
    TopicConfig::from_stored(config)
        .map(drop)
        .map_err(|reason| CommandError::InvalidConfig { reason })
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
