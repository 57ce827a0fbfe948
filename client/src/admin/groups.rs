//! Group administration: list, describe (members, assignment, committed
//! offsets, lag), delete, reset offsets with an audit reason, delete
//! offsets (of deleted topics) with an audit reason, manual offsets, and
//! reading the audit log.
//!
//! ```no_run
//! use corelog_client::{Admin, ClientConfig};
//! use corelog_client::admin::{ResetOffsets, ResetTarget};
//!
//! # async fn example() -> Result<(), corelog_client::ClientError> {
//! let admin = Admin::connect(ClientConfig::new("127.0.0.1:7100")).await?;
//! for partition in admin.describe_group("search").await?.partitions {
//!     println!("{}: {} records behind", partition.partition, partition.lag_records);
//! }
//! // Replay the last hour, saying why (written to the audit log).
//! let reset = ResetOffsets::new("search", "orders", ResetTarget::Timestamp(1_700_000_000_000),
//!     "rebuild the projection after the schema fix", "ops:alice");
//! admin.reset_offsets(&reset).await?;
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::audit::{AUDIT_TOPIC, AuditKind, AuditRecord};
use corelog_wire::message::delete_groups::DeleteGroupsRequest;
use corelog_wire::message::describe_groups::{
    ArchivedDeletedTopicOffset, ArchivedGroupDescription, DescribeGroupsRequest,
    DescribeGroupsRequestV1,
};
use corelog_wire::message::list_groups::ListGroupsRequest;
use corelog_wire::message::reset_offsets::ResetOffsetsRequest;
pub use corelog_wire::message::reset_offsets::{PartitionOffset, ResetTarget};
use serde::Serialize;

use super::Admin;
use crate::consumer::{Consumer, ConsumerConfig, StartFrom};
use crate::error::ClientError;
use crate::group::coordinator::{
    CommitResults, CommittedOffset, Coordinator, MemberGeneration, OffsetToCommit,
};
use crate::group::{TopicPartition, validate_group_id};

/// A group as ListGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupListing {
    /// Group id.
    pub group: String,
    /// State, for example `Stable`, `PreparingRebalance`, `Empty`.
    pub state: String,
    /// Members now.
    pub members: u32,
    /// Current generation.
    pub generation: i32,
}

/// The groups of a cluster, and the brokers that could not say theirs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupList {
    /// Every group the brokers that answered coordinate, sorted by id.
    pub groups: Vec<GroupListing>,
    /// Brokers that did not answer: the groups they coordinate are not
    /// in `groups`.
    pub unanswered: Vec<UnansweredBroker>,
}

/// A broker that did not answer a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnansweredBroker {
    /// Its node id.
    pub node_id: u32,
    /// What went wrong.
    pub error: String,
}

/// One member of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemberDescription {
    /// Member id given by the coordinator.
    pub member_id: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// The member's client id.
    pub client_id: String,
    /// Where it connected from.
    pub client_host: String,
    /// What it consumes in this generation.
    pub assignment: Vec<TopicPartition>,
}

/// A group's position and lag on one partition (DESIGN §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    /// The partition.
    pub partition: TopicPartition,
    /// The committed next offset; `None` if the group has none.
    pub committed_offset: Option<u64>,
    /// Text stored with the offset.
    pub metadata: Option<String>,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// What readers can see up to.
    pub high_watermark: u64,
    /// Records between the committed offset and the high watermark.
    pub lag_records: u64,
    /// Bytes of those records.
    pub lag_bytes: u64,
    /// Age of the oldest record not yet consumed, ms; `None` when caught
    /// up.
    pub oldest_unconsumed_age_ms: Option<i64>,
    /// Time before retention deletes the oldest record the group still
    /// needs, ms; `None` when nothing is needed or retention is unbounded.
    pub retention_left_ms: Option<i64>,
    /// The offset is of a topic since deleted (the name may be a new
    /// topic's now, with offsets of its own): never used by consumers,
    /// removed with `corelog group delete-offsets`. Its log fields are 0.
    pub topic_deleted: bool,
}

impl PartitionLag {
    /// A deleted topic's offset, as DescribeGroups version 1 lists it.
    fn of_deleted_topic(offset: &ArchivedDeletedTopicOffset) -> PartitionLag {
        PartitionLag {
            partition: TopicPartition::new(offset.topic.as_str(), offset.partition.to_native()),
            committed_offset: Some(offset.committed_offset.to_native()),
            metadata: offset.metadata.as_ref().map(|m| m.to_string()),
            log_start_offset: 0,
            high_watermark: 0,
            lag_records: 0,
            lag_bytes: 0,
            oldest_unconsumed_age_ms: None,
            retention_left_ms: None,
            topic_deleted: true,
        }
    }
}

/// A group's membership, offsets and lag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupDescription {
    /// Group id.
    pub group: String,
    /// State.
    pub state: String,
    /// Current generation.
    pub generation: i32,
    /// Members now.
    pub members: Vec<MemberDescription>,
    /// Every partition the group has an offset for or is assigned.
    pub partitions: Vec<PartitionLag>,
}

fn optional(value: i64) -> Option<i64> {
    (value >= 0).then_some(value)
}

impl GroupDescription {
    /// A description from its archive, with the offsets of deleted topics
    /// (listed before the live topic's offset of the same partition).
    fn from_archived(
        group: &ArchivedGroupDescription,
        deleted_topic_offsets: Vec<PartitionLag>,
    ) -> GroupDescription {
        let partitions_of =
            |topics: &rkyv::vec::ArchivedVec<corelog_wire::message::ArchivedTopicPartitions>| {
                topics
                    .iter()
                    .flat_map(|topic| {
                        let name: Arc<str> = Arc::from(topic.topic.as_str());
                        topic
                            .partitions
                            .iter()
                            .map(move |p| TopicPartition::new(Arc::clone(&name), p.to_native()))
                    })
                    .collect::<Vec<_>>()
            };
        let mut partitions: Vec<PartitionLag> = group
            .partitions
            .iter()
            .map(|lag| PartitionLag {
                partition: TopicPartition::new(lag.topic.as_str(), lag.partition.to_native()),
                committed_offset: u64::try_from(lag.committed_offset.to_native()).ok(),
                metadata: lag.metadata.as_ref().map(|m| m.to_string()),
                log_start_offset: lag.log_start_offset.to_native(),
                high_watermark: lag.high_watermark.to_native(),
                lag_records: lag.lag_records.to_native(),
                lag_bytes: lag.lag_bytes.to_native(),
                oldest_unconsumed_age_ms: optional(lag.oldest_unconsumed_age_ms.to_native()),
                retention_left_ms: optional(lag.retention_left_ms.to_native()),
                topic_deleted: false,
            })
            .chain(deleted_topic_offsets)
            .collect();
        partitions.sort_by(|a, b| {
            (&a.partition, !a.topic_deleted).cmp(&(&b.partition, !b.topic_deleted))
        });
        GroupDescription {
            group: group.group.to_string(),
            state: group.state.to_string(),
            generation: group.generation.to_native(),
            members: group
                .members
                .iter()
                .map(|member| MemberDescription {
                    member_id: member.member_id.to_string(),
                    instance_id: member.instance_id.as_ref().map(|id| id.to_string()),
                    client_id: member.client_id.to_string(),
                    client_host: member.client_host.to_string(),
                    assignment: partitions_of(&member.assignment),
                })
                .collect(),
            partitions,
        }
    }
}

/// A privileged offset reset: moves a group (which must have no active
/// members) to another position, with a reason written to the audit log
/// (C6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetOffsets {
    /// Group id.
    pub group: String,
    /// Topic whose offsets move.
    pub topic: String,
    /// Partitions to move; `None` for all of the topic's.
    pub partitions: Option<Vec<u32>>,
    /// Where to.
    pub to: ResetTarget,
    /// Why: required, written to the audit log.
    pub reason: String,
    /// Who asks.
    pub principal: String,
    /// Only report what would change.
    pub dry_run: bool,
}

impl ResetOffsets {
    /// A reset of every partition of `topic`.
    #[must_use]
    pub fn new(
        group: impl Into<String>,
        topic: impl Into<String>,
        to: ResetTarget,
        reason: impl Into<String>,
        principal: impl Into<String>,
    ) -> ResetOffsets {
        ResetOffsets {
            group: group.into(),
            topic: topic.into(),
            partitions: None,
            to,
            reason: reason.into(),
            principal: principal.into(),
            dry_run: false,
        }
    }
}

/// One partition of a reset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionReset {
    /// Partition index.
    pub partition: u32,
    /// Committed offset before; `None` if there was none.
    pub before: Option<u64>,
    /// Committed offset after (or that a dry run would set).
    pub after: Option<u64>,
    /// Why this partition was not moved, if it was not.
    #[serde(serialize_with = "serialize_code")]
    pub error: Option<ErrorCode>,
}

fn serialize_code<S: serde::Serializer>(
    code: &Option<ErrorCode>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match code {
        Some(code) => serializer.serialize_some(code.name()),
        None => serializer.serialize_none(),
    }
}

/// What a reset did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResetOutcome {
    /// Offset of the audit record in `__audit`; `None` for a dry run.
    pub audit_offset: Option<u64>,
    /// Per partition.
    pub partitions: Vec<PartitionReset>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// One audit record, as read from `__audit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditLogEntry {
    /// Where it is in `__audit` partition 0.
    pub audit_offset: u64,
    /// `offset-reset`, `skip`, `quarantine` or `stop`.
    pub kind: &'static str,
    /// Group id.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// The partition concerned; `None` for a reset of the whole topic.
    pub partition: Option<u32>,
    /// Who.
    pub principal: String,
    /// Why.
    pub reason: String,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// `(partition, committed offset)` before a reset; -1 for none.
    pub before: Vec<(u32, i64)>,
    /// `(partition, committed offset)` after a reset.
    pub after: Vec<(u32, i64)>,
    /// The skipped, quarantined or stopping record's offset.
    pub offset: Option<u64>,
    /// Where a quarantined record was copied.
    pub dead_letter_topic: Option<String>,
    /// Its offset there.
    pub dead_letter_offset: Option<u64>,
    /// The processing error, when given apart from the reason.
    pub error: Option<String>,
}

impl AuditLogEntry {
    fn new(audit_offset: u64, record: AuditRecord) -> AuditLogEntry {
        AuditLogEntry {
            audit_offset,
            kind: match record.kind {
                AuditKind::OffsetReset => "offset-reset",
                AuditKind::Skip => "skip",
                AuditKind::Quarantine => "quarantine",
                AuditKind::Stop => "stop",
            },
            group: record.group,
            topic: record.topic,
            partition: record.partition,
            principal: record.principal,
            reason: record.reason,
            at_ms: record.at_ms,
            before: record.before,
            after: record.after,
            offset: record.offset,
            dead_letter_topic: record.dead_letter_topic,
            dead_letter_offset: record.dead_letter_offset,
            error: record.error,
        }
    }
}

/// Most audit records [`Admin::read_audit`] keeps in memory: the newest are
/// kept when there are more.
pub const AUDIT_READ_MAX: usize = 100_000;

/// DescribeGroups version 1 of `group` on `connection`.
async fn describe_v1(
    connection: &crate::connection::Connection,
    group: &str,
) -> Result<GroupDescription, ClientError> {
    let request = DescribeGroupsRequestV1 {
        groups: vec![group.to_owned()],
    };
    let reply = connection
        .call(&request, Vec::new(), Duration::ZERO)
        .await?;
    let (response, _) = reply.decode()?;
    let described = response
        .groups
        .iter()
        .find(|described| described.description.group == group)
        .ok_or_else(|| ClientError::Protocol {
            addr: reply.addr().to_owned(),
            detail: format!("DescribeGroups response has no entry for {group}"),
        })?;
    check(
        described.description.error_code.to_native(),
        described
            .description
            .error_message
            .as_ref()
            .map(|m| m.to_string()),
        || format!("describe group {group}"),
    )?;
    let deleted = described
        .deleted_topic_offsets
        .iter()
        .map(PartitionLag::of_deleted_topic)
        .collect();
    Ok(GroupDescription::from_archived(
        &described.description,
        deleted,
    ))
}

pub(super) fn check(
    code: u16,
    message: Option<String>,
    context: impl FnOnce() -> String,
) -> Result<(), ClientError> {
    match ClientError::from_wire(code, context, message) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

impl Admin {
    pub(super) fn coordinator(&self, group: &str) -> Result<Coordinator, ClientError> {
        validate_group_id(group)?;
        Ok(Coordinator::new(Arc::clone(&self.cluster), group))
    }

    /// Lists groups, optionally only those in `states` (empty: all),
    /// sorted by id. A broker lists the groups it coordinates, so every
    /// broker of the cluster is asked (as Kafka's admin client does); a
    /// group two brokers report (its coordinator moving) is listed once,
    /// at its newest generation. Brokers that do not answer are named in
    /// [`GroupList::unanswered`]: their groups are missing.
    ///
    /// # Errors
    /// Connection errors before the brokers are known.
    pub async fn list_groups(&self, states: &[String]) -> Result<GroupList, ClientError> {
        let metadata = self.cluster.fetch_metadata(Some(Vec::new())).await?;
        let request = ListGroupsRequest {
            states: states.to_vec(),
        };
        let mut by_name: std::collections::BTreeMap<String, GroupListing> =
            std::collections::BTreeMap::new();
        let mut unanswered = Vec::new();
        for (node_id, broker) in &metadata.brokers {
            let addr = self.cluster.advertised_addr(&broker.host, broker.port);
            let listed = async {
                let connection = self.cluster.connection_at(&addr).await?;
                let reply = connection
                    .call(&request, Vec::new(), Duration::ZERO)
                    .await?;
                let (response, _) = reply.decode()?;
                Ok::<Vec<GroupListing>, ClientError>(
                    response
                        .groups
                        .iter()
                        .map(|group| GroupListing {
                            group: group.group.to_string(),
                            state: group.state.to_string(),
                            members: group.members.to_native(),
                            generation: group.generation.to_native(),
                        })
                        .collect(),
                )
            }
            .await;
            match listed {
                Ok(groups) => {
                    for group in groups {
                        let newer = by_name
                            .get(&group.group)
                            .is_none_or(|known| known.generation < group.generation);
                        if newer {
                            by_name.insert(group.group.clone(), group);
                        }
                    }
                }
                Err(error) => unanswered.push(UnansweredBroker {
                    node_id: *node_id,
                    error: error.to_string(),
                }),
            }
        }
        Ok(GroupList {
            groups: by_name.into_values().collect(),
            unanswered,
        })
    }

    /// Describes one group: members, assignment, committed offsets and lag,
    /// and the offsets it holds of deleted topics (from brokers that speak
    /// DescribeGroups version 1; older ones do not list them).
    ///
    /// # Errors
    /// `UNKNOWN_GROUP` for a group the coordinator does not know;
    /// connection errors.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription, ClientError> {
        let coordinator = self.coordinator(group)?;
        coordinator
            .retrying(|| async {
                let connection = coordinator.connection().await?;
                if connection.supports(ApiKey::DescribeGroups, 1) {
                    let result = describe_v1(&connection, group).await;
                    return coordinator.observe(result);
                }
                let request = DescribeGroupsRequest {
                    groups: vec![group.to_owned()],
                };
                let result = async {
                    let reply = connection
                        .call(&request, Vec::new(), Duration::ZERO)
                        .await?;
                    let (response, _) = reply.decode()?;
                    let described = response
                        .groups
                        .iter()
                        .find(|described| described.group == group)
                        .ok_or_else(|| ClientError::Protocol {
                            addr: reply.addr().to_owned(),
                            detail: format!("DescribeGroups response has no entry for {group}"),
                        })?;
                    check(
                        described.error_code.to_native(),
                        described.error_message.as_ref().map(|m| m.to_string()),
                        || format!("describe group {group}"),
                    )?;
                    Ok(GroupDescription::from_archived(described, Vec::new()))
                }
                .await;
                coordinator.observe(result)
            })
            .await
    }

    /// Deletes a group's committed offsets and membership record. Only an
    /// empty group can be deleted; topic data is never touched (C6).
    ///
    /// # Errors
    /// `GROUP_NOT_EMPTY` while it has members, `UNKNOWN_GROUP`;
    /// connection errors.
    pub async fn delete_group(&self, group: &str) -> Result<(), ClientError> {
        let coordinator = self.coordinator(group)?;
        let request = DeleteGroupsRequest {
            groups: vec![group.to_owned()],
        };
        let result = async {
            let connection = coordinator.connection().await?;
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            let result = response
                .results
                .iter()
                .find(|result| result.group == group)
                .ok_or_else(|| ClientError::Protocol {
                    addr: reply.addr().to_owned(),
                    detail: format!("DeleteGroups response has no entry for {group}"),
                })?;
            check(
                result.error_code.to_native(),
                result.error_message.as_ref().map(|m| m.to_string()),
                || format!("delete group {group}"),
            )
        }
        .await;
        coordinator.observe(result)
    }

    /// Moves a group's committed offsets (see [`ResetOffsets`]); with
    /// `dry_run`, only reports what would change.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] before sending anything for a blank
    /// reason or principal; `GROUP_NOT_EMPTY` while the group has members,
    /// `AUDIT_REASON_REQUIRED`, `UNKNOWN_TOPIC_OR_PARTITION`; connection
    /// errors. A reset is not repeated automatically after a lost answer:
    /// check with `corelog group describe` and the audit log.
    pub async fn reset_offsets(&self, reset: &ResetOffsets) -> Result<ResetOutcome, ClientError> {
        if reset.reason.trim().is_empty() {
            return Err(ClientError::InvalidArgument(
                "an offset reset needs a reason (--reason): it is written to the audit log"
                    .to_owned(),
            ));
        }
        if reset.principal.trim().is_empty() {
            return Err(ClientError::InvalidArgument(
                "an offset reset needs a principal: who asks is written to the audit log"
                    .to_owned(),
            ));
        }
        let coordinator = self.coordinator(&reset.group)?;
        let request = ResetOffsetsRequest {
            group: reset.group.clone(),
            topic: reset.topic.clone(),
            partitions: reset.partitions.clone(),
            to: reset.to.clone(),
            reason: reset.reason.clone(),
            principal: reset.principal.clone(),
            dry_run: reset.dry_run,
        };
        let result = async {
            let connection = coordinator.connection().await?;
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || format!("reset offsets of group {} on {}", reset.group, reset.topic),
            )?;
            let mut partitions: Vec<PartitionReset> = response
                .partitions
                .iter()
                .map(|partition| {
                    let code = ClientError::wire_code(partition.error_code.to_native());
                    PartitionReset {
                        partition: partition.partition.to_native(),
                        before: u64::try_from(partition.before.to_native()).ok(),
                        after: u64::try_from(partition.after.to_native()).ok(),
                        error: (code != ErrorCode::None).then_some(code),
                    }
                })
                .collect();
            partitions.sort_by_key(|partition| partition.partition);
            Ok(ResetOutcome {
                audit_offset: u64::try_from(response.audit_offset.to_native()).ok(),
                partitions,
                dry_run: reset.dry_run,
            })
        }
        .await;
        coordinator.observe(result)
    }

    /// A group's committed offsets: of `partitions`, or of every partition
    /// it has one for (`None`).
    ///
    /// # Errors
    /// The coordinator's refusal and connection errors.
    pub async fn fetch_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<CommittedOffset>, ClientError> {
        let coordinator = self.coordinator(group)?;
        coordinator
            .retrying(|| coordinator.fetch_offsets(partitions))
            .await
    }

    /// Commits offsets for a group as `member`. With
    /// [`MemberGeneration::none`] these are manual offsets, accepted only
    /// while the group has no members; moving an existing group elsewhere
    /// is [`Admin::reset_offsets`]'s job, which audits it.
    ///
    /// # Errors
    /// A refusal of the whole commit (`ILLEGAL_GENERATION`,
    /// `UNKNOWN_MEMBER_ID`, …) and connection errors; per-partition
    /// refusals (`NOT_OWNER`, `OFFSET_BEYOND_HIGH_WATERMARK`) are in the
    /// result.
    pub async fn commit_offsets(
        &self,
        group: &str,
        member: &MemberGeneration,
        offsets: &[OffsetToCommit],
    ) -> Result<CommitResults, ClientError> {
        self.coordinator(group)?.commit(member, offsets).await
    }

    /// Reads the audit log (`__audit` partition 0) from its start to its
    /// end, keeping records of `group` (all groups for `None`), newest
    /// [`AUDIT_READ_MAX`] at most.
    ///
    /// # Errors
    /// Fetch errors; an audit record this client cannot decode (written by
    /// a newer broker: upgrade).
    pub async fn read_audit(&self, group: Option<&str>) -> Result<Vec<AuditLogEntry>, ClientError> {
        let mut consumer = Consumer::connect(ConsumerConfig {
            client: self.cluster.config().clone(),
            fetch_max_wait: Duration::from_millis(100),
            ..ConsumerConfig::default()
        })
        .await?;
        consumer
            .assign_partitions(AUDIT_TOPIC, &[0], StartFrom::Earliest)
            .await?;
        let mut entries: VecDeque<AuditLogEntry> = VecDeque::new();
        loop {
            let polled = consumer.poll().await?;
            for record in polled.records {
                let value = record.value.as_deref().unwrap_or_default();
                let audit = AuditRecord::decode(value).map_err(|error| ClientError::Protocol {
                    addr: String::new(),
                    detail: format!(
                        "audit record at {AUDIT_TOPIC}/0 offset {}: {error}",
                        record.offset
                    ),
                })?;
                if group.is_some_and(|group| group != audit.group) {
                    continue;
                }
                if entries.len() == AUDIT_READ_MAX {
                    entries.pop_front();
                }
                entries.push_back(AuditLogEntry::new(record.offset.0, audit));
            }
            if consumer.caught_up() {
                return Ok(entries.into());
            }
        }
    }
}
