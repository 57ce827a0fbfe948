//! The coordinator of the groups that hash to one `__groups` partition,
//! on the shard that owns that partition (C6).
//!
//! Every change a client must be able to rely on is durable before it is
//! answered: a completed rebalance's membership record before the joiners
//! get their assignment, offsets before the commit is acknowledged, the
//! audit record before an audited reset or skip. State is rebuilt by
//! replaying the partition when the coordinator starts.
//!
//! Checks that depend on other shards (high watermarks, log starts) are
//! made first; the group checks are then repeated synchronously right
//! before the append, so nothing that changed during the lookups (a
//! rebalance, say) can slip through.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use bytes::BytesMut;
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::TopicPartitions;
use corelog_wire::message::group_records::GroupRecord;
use corelog_wire::message::offset_commit::{
    OffsetCommitPartitionResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetCommitTopicResponse,
};
use corelog_wire::message::offset_fetch::{
    OffsetFetchPartition, OffsetFetchRequest, OffsetFetchResponse, OffsetFetchTopic,
};
use corelog_wire::types::{Offset, TimestampMs};
use event_listener::Event;

use super::assignor::TopicPartition;
use super::budget::GroupBudget;
use super::log::GroupLog;
use super::offsets::TopicIdentity;
use super::records;
use super::state::{Committed, Group, GroupState, JoinOutcome, JoinRequest};
use crate::partition::PartitionError;

/// Where a join ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    /// The member's id.
    pub member_id: String,
    /// Its generation.
    pub generation: i32,
    /// Its partitions.
    pub assignment: Vec<TopicPartitions>,
    /// Members in the group.
    pub members: u32,
}

fn not_coordinator() -> PartitionError {
    PartitionError::new(
        ErrorCode::NotCoordinator,
        "this broker no longer coordinates the group; find the coordinator again",
    )
}

/// Coordinator of the groups of one `__groups` partition.
pub struct GroupCoordinator {
    /// Index of the `__groups` partition.
    pub partition_index: u32,
    log: Rc<dyn GroupLog>,
    pub(super) groups: RefCell<BTreeMap<String, Group>>,
    /// Per group, the newest generation whose membership record is durable.
    persisted: RefCell<BTreeMap<String, i32>>,
    /// Notified when a generation is persisted (joiners wait on it), and
    /// when the coordinator retires.
    rebalanced: Event,
    /// Set when this broker no longer leads the `__groups` partition: no
    /// tick completes a rebalance here any more, so waiting joiners are
    /// told to find the new coordinator instead of waiting out their
    /// timeout.
    retired: Cell<bool>,
    /// Ticks since start, to pace lag metrics.
    ticks: Cell<u64>,
    /// Appends under way: compaction waits for none, so that every record
    /// below the log end is reflected in memory when it snapshots.
    appending: Cell<u32>,
    /// The groups whose series this coordinator published (metrics), with
    /// the partitions of their lag series: removed when a group goes, a
    /// partition's offset goes, or the coordinator moves away.
    published: RefCell<BTreeMap<String, BTreeSet<TopicPartition>>>,
}

/// The refusal of new group `name` under `budget`, given the groups the
/// coordinator holds.
fn refusal(
    groups: &BTreeMap<String, Group>,
    name: &str,
    budget: Option<&GroupBudget>,
) -> Option<PartitionError> {
    let budget = budget?;
    let used = groups
        .values()
        .filter(|group| group.creator.as_deref() == Some(budget.principal.as_str()))
        .count();
    budget.refusal(name, u32::try_from(used).unwrap_or(u32::MAX))
}

/// A new group, created by `budget`'s principal.
fn created(name: &str, budget: Option<&GroupBudget>) -> Group {
    let mut group = Group::new(name);
    group.creator = budget.map(|budget| budget.principal.clone());
    group
}

/// Records per batch when the coordinator writes a snapshot of its state.
const SNAPSHOT_RECORDS_PER_BATCH: usize = 500;

impl std::fmt::Debug for GroupCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCoordinator")
            .field("partition_index", &self.partition_index)
            .field("groups", &self.groups.borrow().len())
            .finish_non_exhaustive()
    }
}

/// Looks up a partition's high watermark (on whichever shard owns it).
pub type HighWatermarkLookup =
    dyn Fn(&str, u32) -> futures::future::LocalBoxFuture<'static, Result<Offset, PartitionError>>;

/// The judgement of one partition of a commit.
struct Verdict {
    topic: String,
    topic_id: Option<u64>,
    partition: u32,
    next_offset: u64,
    metadata: Option<String>,
    result: Result<(), PartitionError>,
}

/// One partition's move by a commit outside a generation, for its audit
/// record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditedMove {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The committed offset before; `-1` for none.
    pub before: i64,
    /// The offset committed.
    pub after: u64,
}

/// Writes the audit record of a commit outside a generation (a manual
/// commit, which moves a group like a reset does, C6) before it is
/// applied; an error refuses the commit.
pub type ManualCommitAudit =
    dyn Fn(
        Vec<AuditedMove>,
    ) -> futures::future::LocalBoxFuture<'static, Result<(), PartitionError>>;

/// Topics and their partition counts, as the coordinator needs them.
pub trait TopicView {
    /// Partition count of `topic`, if it exists.
    fn partition_count(&self, topic: &str) -> Option<u32>;
    /// The id and creation time of the live topic named `topic`, if it
    /// exists: whose committed offsets are its (see [`super::offsets`]).
    fn topic_identity(&self, topic: &str) -> Option<TopicIdentity>;
}

impl GroupCoordinator {
    /// Rebuilds the coordinator's groups by replaying its partition.
    ///
    /// # Errors
    /// [`PartitionError`] if the partition cannot be read.
    pub async fn load(
        partition_index: u32,
        log: Rc<dyn GroupLog>,
        now: TimestampMs,
    ) -> Result<Self, PartitionError> {
        let mut groups = BTreeMap::new();
        let limits = BatchLimits::default();
        let mut position = log.summary().log_start;
        let end = log.summary().high_watermark;
        let mut replayed = 0u64;
        while position < end {
            let read = log.read(position, 1 << 20).await?;
            if read.next_offset <= position {
                break;
            }
            for chunk in &read.chunks {
                for found in batch::batches(chunk, &limits) {
                    let found = found.map_err(PartitionError::from)?;
                    if found.header.is_control() {
                        // A replicated leader's epoch-start marker, not group state.
                        continue;
                    }
                    let bytes = chunk.slice_ref(found.bytes);
                    for record in
                        batch::decode_records(&bytes, &limits).map_err(PartitionError::from)?
                    {
                        if record.offset < position {
                            continue;
                        }
                        let Some(value) = record.value else { continue };
                        match GroupRecord::decode(&value) {
                            Ok(decoded) => {
                                records::replay(&mut groups, decoded, now);
                                replayed += 1;
                            }
                            Err(error) => {
                                tracing::error!(offset = record.offset.0, %error, "unreadable __groups record skipped");
                            }
                        }
                    }
                }
            }
            position = read.next_offset;
        }
        let persisted = groups
            .iter()
            .map(|(name, group)| (name.clone(), group.generation))
            .collect();
        tracing::info!(
            partition = partition_index,
            groups = groups.len(),
            replayed,
            "group coordinator loaded"
        );
        Ok(GroupCoordinator {
            partition_index,
            log,
            groups: RefCell::new(groups),
            persisted: RefCell::new(persisted),
            rebalanced: Event::new(),
            retired: Cell::new(false),
            ticks: Cell::new(0),
            appending: Cell::new(0),
            published: RefCell::new(BTreeMap::new()),
        })
    }

    /// Appends records durably.
    pub(super) async fn append(
        &self,
        records: &[GroupRecord],
        now: TimestampMs,
    ) -> Result<Offset, PartitionError> {
        self.appending.set(self.appending.get() + 1);
        let produced = self.log.append(records::batch(records, now)).await;
        self.appending.set(self.appending.get() - 1);
        Ok(produced?.base_offset)
    }

    /// Compaction by snapshot: once the partition has two closed segments,
    /// writes every group's current membership and offsets as new records,
    /// then deletes the segments wholly below where the snapshot began.
    /// Replaying the remaining log yields the same state, so `__groups`
    /// stays bounded by the live state rather than by commit history.
    ///
    /// # Errors
    /// The append's or deletion's error.
    pub async fn compact_if_due(&self, now: TimestampMs) -> Result<u64, PartitionError> {
        if self.log.summary().segment_count < 3 || self.appending.get() > 0 {
            return Ok(0);
        }
        // Taken synchronously: with no append in flight, every record below
        // the log end is already applied to memory.
        let cut = self.log.summary().high_watermark;
        let snapshot: Vec<GroupRecord> = self
            .groups
            .borrow()
            .values()
            .flat_map(|group| {
                std::iter::once(records::membership(group))
                    .chain(records::offsets(group))
                    .collect::<Vec<_>>()
            })
            .collect();
        for chunk in snapshot.chunks(SNAPSHOT_RECORDS_PER_BATCH) {
            self.append(chunk, now).await?;
        }
        let mut deleted = 0;
        while let Some(range) = self.log.delete_segment_below(cut).await? {
            deleted += range.record_count;
        }
        tracing::info!(
            partition = self.partition_index,
            records = snapshot.len(),
            deleted,
            "compacted __groups"
        );
        Ok(deleted)
    }

    /// Persists the group's membership and marks its generation persisted.
    async fn persist_membership(&self, name: &str, now: TimestampMs) -> Result<(), PartitionError> {
        let (record, generation) = {
            let groups = self.groups.borrow();
            let Some(group) = groups.get(name) else {
                return Ok(());
            };
            (records::membership(group), group.generation)
        };
        self.append(&[record], now).await?;
        let mut persisted = self.persisted.borrow_mut();
        let entry = persisted.entry(name.to_owned()).or_insert(generation);
        *entry = (*entry).max(generation);
        drop(persisted);
        self.rebalanced.notify(usize::MAX);
        Ok(())
    }

    /// Completes `name`'s rebalance if it is due, and persists the result.
    /// Returns the deadline of a follow-up round, if one started.
    pub async fn try_complete(
        &self,
        name: &str,
        topics: &dyn TopicView,
        now: TimestampMs,
    ) -> Option<TimestampMs> {
        let outcome = {
            let mut groups = self.groups.borrow_mut();
            let group = groups.get_mut(name)?;
            let counts: BTreeMap<String, u32> = group
                .subscribed_topics()
                .into_iter()
                .filter_map(|topic| topics.partition_count(&topic).map(|count| (topic, count)))
                .collect();
            group.complete_rebalance(now, &counts)?
        };
        if !outcome.removed.is_empty() {
            tracing::info!(group = name, removed = ?outcome.removed, "members removed for not rejoining in time");
        }
        if let Err(error) = self.persist_membership(name, now).await {
            tracing::error!(group = name, %error, "cannot persist a rebalance");
        }
        if outcome.follow_up {
            self.groups.borrow().get(name).and_then(Group::deadline)
        } else {
            None
        }
    }

    /// Handles a join: returns at once when the member's place is settled,
    /// or after the rebalance it joined is complete and persisted.
    ///
    /// # Errors
    /// `UNKNOWN_MEMBER_ID`, or `COORDINATOR_NOT_AVAILABLE` if persisting
    /// failed (without a message: the code says it all);
    /// `GROUP_LIMIT_REACHED` for a new group over `budget`.
    pub async fn join(
        &self,
        name: &str,
        request: JoinRequest,
        budget: Option<&GroupBudget>,
        topics: &dyn TopicView,
        now: TimestampMs,
    ) -> Result<Joined, PartitionError> {
        let (outcome, generation_before) = {
            let mut groups = self.groups.borrow_mut();
            if !groups.contains_key(name)
                && let Some(refusal) = refusal(&groups, name, budget)
            {
                return Err(refusal);
            }
            let group = groups
                .entry(name.to_owned())
                .or_insert_with(|| created(name, budget));
            let before = group.generation;
            let joined = group
                .join(request, now)
                .map_err(|code| PartitionError::new(code, String::new()))?;
            (joined, before)
        };
        let joined = |member_id: &str| {
            self.joined(name, member_id)
                .map_err(|code| PartitionError::new(code, String::new()))
        };
        let member_id = match outcome {
            JoinOutcome::Settled { member_id } => return joined(&member_id),
            JoinOutcome::Wait { member_id } => member_id,
        };
        // Completes at once if everyone has rejoined; otherwise the
        // coordinator's tick completes it at the deadline.
        self.try_complete(name, topics, now).await;
        loop {
            let listener = self.rebalanced.listen();
            let persisted = self.persisted.borrow().get(name).copied().unwrap_or(0);
            if persisted > generation_before {
                return joined(&member_id);
            }
            if self.retired.get() {
                return Err(not_coordinator());
            }
            listener.await;
        }
    }

    fn joined(&self, name: &str, member_id: &str) -> Result<Joined, ErrorCode> {
        let groups = self.groups.borrow();
        let group = groups.get(name).ok_or(ErrorCode::UnknownMemberId)?;
        if !group.members.contains_key(member_id) {
            return Err(ErrorCode::UnknownMemberId);
        }
        Ok(Joined {
            member_id: member_id.to_owned(),
            generation: group.generation,
            assignment: records::to_wire(group.assignment.get(member_id)),
            members: group.members.len() as u32,
        })
    }

    /// A heartbeat.
    ///
    /// # Errors
    /// `UNKNOWN_MEMBER_ID`, `ILLEGAL_GENERATION`, `REBALANCE_IN_PROGRESS`.
    pub fn heartbeat(
        &self,
        name: &str,
        member_id: &str,
        generation: i32,
        now: TimestampMs,
    ) -> Result<(), ErrorCode> {
        let mut groups = self.groups.borrow_mut();
        let group = groups.get_mut(name).ok_or(ErrorCode::UnknownMemberId)?;
        group.heartbeat(member_id, generation, now)
    }

    /// A member leaves; returns the deadline of the rebalance it starts.
    ///
    /// # Errors
    /// `UNKNOWN_MEMBER_ID`.
    pub async fn leave(
        &self,
        name: &str,
        member_id: &str,
        now: TimestampMs,
    ) -> Result<Option<TimestampMs>, ErrorCode> {
        let (deadline, empty) = {
            let mut groups = self.groups.borrow_mut();
            let group = groups.get_mut(name).ok_or(ErrorCode::UnknownMemberId)?;
            group.leave(member_id, now)?;
            (group.deadline(), group.state == GroupState::Empty)
        };
        if empty {
            self.persist_membership(name, now)
                .await
                .map_err(|_| ErrorCode::CoordinatorNotAvailable)?;
        }
        Ok(deadline)
    }

    /// Expires silent members; returns groups with a rebalance to schedule.
    pub async fn expire(&self, now: TimestampMs) -> Vec<(String, TimestampMs)> {
        let mut emptied = Vec::new();
        let mut rebalancing = Vec::new();
        {
            let mut groups = self.groups.borrow_mut();
            for (name, group) in groups.iter_mut() {
                let expired = group.expire(now);
                if expired.is_empty() {
                    continue;
                }
                tracing::info!(group = %name, ?expired, "members expired after their session timeout");
                match group.deadline() {
                    Some(deadline) => rebalancing.push((name.clone(), deadline)),
                    None => emptied.push(name.clone()),
                }
            }
        }
        for name in emptied {
            if let Err(error) = self.persist_membership(&name, now).await {
                tracing::error!(group = %name, %error, "cannot persist an emptied group");
            }
        }
        self.ticks.set(self.ticks.get() + 1);
        rebalancing
    }

    /// Notes that `group`'s series are published, its lag on exactly
    /// `partitions` when given; returns the partitions whose lag series
    /// were published before and no longer are.
    pub fn note_published(
        &self,
        group: &str,
        partitions: Option<BTreeSet<TopicPartition>>,
    ) -> Vec<TopicPartition> {
        let mut published = self.published.borrow_mut();
        let entry = published.entry(group.to_owned()).or_default();
        let Some(partitions) = partitions else {
            return Vec::new();
        };
        let gone = entry.difference(&partitions).cloned().collect();
        *entry = partitions;
        gone
    }

    /// Retires the coordinator (this broker no longer leads its
    /// `__groups` partition): joins waiting on a rebalance get
    /// `NOT_COORDINATOR` now. Returns the published series' record of
    /// every group, for the caller to forget.
    pub fn retire(&self) -> BTreeMap<String, BTreeSet<TopicPartition>> {
        self.retired.set(true);
        self.rebalanced.notify(usize::MAX);
        std::mem::take(&mut *self.published.borrow_mut())
    }

    /// Takes the published series' record of `group` (it was deleted):
    /// the partitions of its lag series.
    pub fn take_published_of(&self, group: &str) -> BTreeSet<TopicPartition> {
        self.published
            .borrow_mut()
            .remove(group)
            .unwrap_or_default()
    }

    /// Sets apart the offsets of deleted topics of `group` (every group
    /// for `None`) by the metadata in `topics`, before anything reads or
    /// changes its offsets (see [`super::offsets`]).
    pub fn set_apart_deleted_topic_offsets(&self, group: Option<&str>, topics: &dyn TopicView) {
        let identity = |name: &str| topics.topic_identity(name);
        let mut groups = self.groups.borrow_mut();
        match group {
            Some(name) => {
                if let Some(group) = groups.get_mut(name) {
                    group.set_apart_deleted_topic_offsets(&identity);
                }
            }
            None => {
                for group in groups.values_mut() {
                    group.set_apart_deleted_topic_offsets(&identity);
                }
            }
        }
    }

    /// Ticks so far, for pacing periodic work.
    #[must_use]
    pub fn ticks(&self) -> u64 {
        self.ticks.get()
    }

    /// The group-level judgement of a commit: `Ok(manual)` or the top-level code.
    fn judge_committer(&self, request: &OffsetCommitRequest) -> Result<(), ErrorCode> {
        let groups = self.groups.borrow();
        match groups.get(&request.group) {
            Some(group) => group.check_committer(&request.member_id, request.generation),
            None if request.generation == -1 && request.member_id.is_empty() => Ok(()),
            None => Err(ErrorCode::UnknownMemberId),
        }
    }

    /// Commits offsets: judged against the current generation and
    /// ownership, bounded by each partition's high watermark (looked up
    /// with `high_watermark`), acknowledged once durable. A commit outside
    /// a generation is first written to the audit log by `audit` (which
    /// the caller passes for those). Each offset is committed on the live
    /// topic of its name in `topics` (with its id).
    pub async fn commit(
        &self,
        request: OffsetCommitRequest,
        topics: &dyn TopicView,
        high_watermark: &HighWatermarkLookup,
        audit: Option<&ManualCommitAudit>,
        budget: Option<&GroupBudget>,
        now: TimestampMs,
    ) -> OffsetCommitResponse {
        if let Err(code) = self.judge_committer(&request) {
            return refused_commit(&request, code);
        }
        self.set_apart_deleted_topic_offsets(Some(request.group.as_str()), topics);
        let mut verdicts: Vec<Verdict> = Vec::new();
        for topic in &request.topics {
            for entry in &topic.partitions {
                let key = (topic.name.clone(), entry.partition);
                let owns = self
                    .groups
                    .borrow()
                    .get(&request.group)
                    .is_none_or(|group| group.owns(&request.member_id, &key));
                let topic_id = topics.topic_identity(&topic.name).map(|live| live.id);
                let verdict = if topic_id.is_none() {
                    Err(PartitionError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic {:?} does not exist", topic.name),
                    ))
                } else if owns {
                    match high_watermark(&topic.name, entry.partition).await {
                        Ok(hw) if entry.next_offset > hw.0 => Err(PartitionError::new(
                            ErrorCode::OffsetBeyondHighWatermark,
                            format!(
                                "offset {} is past the committed end {} of {}/{}",
                                entry.next_offset, hw.0, topic.name, entry.partition
                            ),
                        )),
                        Ok(_) => Ok(()),
                        Err(error) => Err(error),
                    }
                } else {
                    Err(PartitionError::new(
                        ErrorCode::NotOwner,
                        format!(
                            "member {} does not own {}/{} in generation {}",
                            request.member_id, topic.name, entry.partition, request.generation
                        ),
                    ))
                };
                verdicts.push(Verdict {
                    topic: topic.name.clone(),
                    topic_id,
                    partition: entry.partition,
                    next_offset: entry.next_offset,
                    metadata: entry.metadata.clone(),
                    result: verdict,
                });
            }
        }
        // The lookups awaited: judge the committer again, right before appending.
        if let Err(code) = self.judge_committer(&request) {
            return refused_commit(&request, code);
        }
        let accepted: Vec<GroupRecord> = verdicts
            .iter()
            .filter(|verdict| verdict.result.is_ok())
            .map(|verdict| GroupRecord::Offset {
                group: request.group.clone(),
                topic: verdict.topic.clone(),
                topic_id: verdict.topic_id,
                partition: verdict.partition,
                next_offset: verdict.next_offset,
                metadata: verdict.metadata.clone(),
                committed_at_ms: now.0,
                generation: request.generation,
            })
            .collect();
        let mut durable: Result<(), PartitionError> = Ok(());
        if let Some(audit) = audit.filter(|_| !accepted.is_empty()) {
            // The audit record first, as for a reset: a move nobody can
            // account for never happens.
            durable = audit(self.moves(&request.group, &verdicts)).await;
            if durable.is_ok()
                && let Err(code) = self.judge_committer(&request)
            {
                return refused_commit(&request, code);
            }
        }
        if !accepted.is_empty() && durable.is_ok() {
            // Checked here, after the lookups awaited, right before the
            // group is created: concurrent commits cannot pass it together.
            let mut groups = self.groups.borrow_mut();
            if !groups.contains_key(&request.group)
                && let Some(refusal) = refusal(&groups, &request.group, budget)
            {
                durable = Err(refusal);
            } else {
                groups
                    .entry(request.group.clone())
                    .or_insert_with(|| created(&request.group, budget));
            }
        }
        if !accepted.is_empty() && durable.is_ok() {
            durable = self.append(&accepted, now).await.map(drop);
            if durable.is_ok() {
                let mut groups = self.groups.borrow_mut();
                if let Some(group) = groups.get_mut(&request.group) {
                    for verdict in verdicts.iter().filter(|verdict| verdict.result.is_ok()) {
                        group.record_offset(
                            (verdict.topic.clone(), verdict.partition),
                            Committed {
                                next_offset: verdict.next_offset,
                                metadata: verdict.metadata.clone(),
                                committed_at: now,
                                topic_id: verdict.topic_id,
                            },
                        );
                    }
                }
            }
        }
        let mut topics: Vec<OffsetCommitTopicResponse> = Vec::new();
        for Verdict {
            topic,
            partition,
            result: verdict,
            ..
        } in verdicts
        {
            let outcome = match (&verdict, &durable) {
                (Err(error), _) | (Ok(()), Err(error)) => OffsetCommitPartitionResponse {
                    partition,
                    error_code: error.code.code(),
                    error_message: Some(error.message.clone()),
                },
                (Ok(()), Ok(())) => OffsetCommitPartitionResponse {
                    partition,
                    error_code: ErrorCode::None.code(),
                    error_message: None,
                },
            };
            match topics.last_mut() {
                Some(last) if last.name == topic => last.partitions.push(outcome),
                _ => topics.push(OffsetCommitTopicResponse {
                    name: topic,
                    partitions: vec![outcome],
                }),
            }
        }
        OffsetCommitResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            topics,
        }
    }

    /// Committed offsets of a group on the live topics of `topics` (never a
    /// deleted topic's: a topic created again under its name starts
    /// afresh).
    #[must_use]
    pub fn fetch_offsets(
        &self,
        request: &OffsetFetchRequest,
        topics: &dyn TopicView,
    ) -> OffsetFetchResponse {
        self.set_apart_deleted_topic_offsets(Some(request.group.as_str()), topics);
        let groups = self.groups.borrow();
        let offsets = groups.get(&request.group).map(|group| &group.offsets);
        let wanted: Vec<TopicPartition> = match &request.topics {
            Some(topics) => topics
                .iter()
                .flat_map(|entry| {
                    entry
                        .partitions
                        .iter()
                        .map(|partition| (entry.topic.clone(), *partition))
                })
                .collect(),
            None => offsets
                .map(|offsets| offsets.keys().cloned().collect())
                .unwrap_or_default(),
        };
        let mut topics: Vec<OffsetFetchTopic> = Vec::new();
        for (topic, partition) in wanted {
            let committed = offsets.and_then(|offsets| offsets.get(&(topic.clone(), partition)));
            let entry = OffsetFetchPartition {
                partition,
                next_offset: committed.map_or(-1, |committed| committed.next_offset as i64),
                metadata: committed.and_then(|committed| committed.metadata.clone()),
                committed_at_ms: committed.map_or(-1, |committed| committed.committed_at.0),
                error_code: ErrorCode::None.code(),
            };
            match topics.last_mut() {
                Some(last) if last.name == topic => last.partitions.push(entry),
                _ => topics.push(OffsetFetchTopic {
                    name: topic,
                    partitions: vec![entry],
                }),
            }
        }
        OffsetFetchResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            topics,
        }
    }

    /// What the accepted verdicts of a commit change, from the group's
    /// committed offsets.
    fn moves(&self, group: &str, verdicts: &[Verdict]) -> Vec<AuditedMove> {
        let groups = self.groups.borrow();
        let offsets = groups.get(group).map(|group| &group.offsets);
        verdicts
            .iter()
            .filter(|verdict| verdict.result.is_ok())
            .map(|verdict| AuditedMove {
                topic: verdict.topic.clone(),
                partition: verdict.partition,
                before: offsets
                    .and_then(|offsets| offsets.get(&(verdict.topic.clone(), verdict.partition)))
                    .map_or(-1, |committed| committed.next_offset as i64),
                after: verdict.next_offset,
            })
            .collect()
    }

    /// A copy of a group, for describing it.
    #[must_use]
    pub fn group(&self, name: &str) -> Option<Group> {
        self.groups.borrow().get(name).cloned()
    }

    /// Every group's name, state, member count and generation.
    #[must_use]
    pub fn list(&self) -> Vec<(String, &'static str, u32, i32)> {
        self.groups
            .borrow()
            .values()
            .map(|group| {
                (
                    group.name.clone(),
                    group.state.name(),
                    group.members.len() as u32,
                    group.generation,
                )
            })
            .collect()
    }

    /// Deletes an empty group and its offsets (never topic data).
    ///
    /// # Errors
    /// `UNKNOWN_GROUP`, `GROUP_NOT_EMPTY`, or the append's error.
    pub async fn delete(&self, name: &str, now: TimestampMs) -> Result<(), PartitionError> {
        {
            let groups = self.groups.borrow();
            let group = groups.get(name).ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::UnknownGroup,
                    format!("group {name:?} does not exist"),
                )
            })?;
            if !group.members.is_empty() {
                return Err(PartitionError::new(
                    ErrorCode::GroupNotEmpty,
                    format!(
                        "group {name:?} has {} active members; stop them first",
                        group.members.len()
                    ),
                ));
            }
        }
        self.append(
            &[GroupRecord::GroupDeleted {
                group: name.to_owned(),
            }],
            now,
        )
        .await?;
        self.groups.borrow_mut().remove(name);
        self.persisted.borrow_mut().remove(name);
        Ok(())
    }

    /// Sets offsets of the topic with id `topic_id` after an audited reset
    /// (the audit record is written by the caller first). The group must
    /// have no members.
    ///
    /// # Errors
    /// `GROUP_NOT_EMPTY`, or the append's error.
    pub async fn set_offsets(
        &self,
        name: &str,
        topic_id: u64,
        offsets: &[(String, u32, u64)],
        now: TimestampMs,
    ) -> Result<(), PartitionError> {
        self.check_empty(name)?;
        let records: Vec<GroupRecord> = offsets
            .iter()
            .map(|(topic, partition, next_offset)| GroupRecord::Offset {
                group: name.to_owned(),
                topic: topic.clone(),
                topic_id: Some(topic_id),
                partition: *partition,
                next_offset: *next_offset,
                metadata: Some("reset".to_owned()),
                committed_at_ms: now.0,
                generation: -1,
            })
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        self.append(&records, now).await?;
        let mut groups = self.groups.borrow_mut();
        let group = groups
            .entry(name.to_owned())
            .or_insert_with(|| Group::new(name));
        for (topic, partition, next_offset) in offsets {
            group.record_offset(
                (topic.clone(), *partition),
                Committed {
                    next_offset: *next_offset,
                    metadata: Some("reset".to_owned()),
                    committed_at: now,
                    topic_id: Some(topic_id),
                },
            );
        }
        Ok(())
    }

    /// Refuses changes to a group with members.
    ///
    /// # Errors
    /// `GROUP_NOT_EMPTY`.
    pub fn check_empty(&self, name: &str) -> Result<(), PartitionError> {
        let groups = self.groups.borrow();
        match groups.get(name) {
            Some(group) if !group.members.is_empty() => Err(PartitionError::new(
                ErrorCode::GroupNotEmpty,
                format!(
                    "group {name:?} has {} active members; stop its consumers before resetting offsets",
                    group.members.len()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Groups whose rebalance can complete now (see
    /// [`Group::rebalance_due`]).
    #[must_use]
    pub fn rebalances_due(&self, now: TimestampMs) -> Vec<String> {
        self.groups
            .borrow()
            .values()
            .filter(|group| group.rebalance_due(now))
            .map(|group| group.name.clone())
            .collect()
    }

    /// Every group's committed offsets, for lag metrics.
    #[must_use]
    pub fn committed(&self) -> Vec<(String, BTreeMap<TopicPartition, Committed>)> {
        self.groups
            .borrow()
            .values()
            .map(|group| (group.name.clone(), group.offsets.clone()))
            .collect()
    }

    /// Partitions assigned in the current generation, by group.
    #[must_use]
    pub fn assigned(&self, name: &str) -> BTreeSet<TopicPartition> {
        self.groups
            .borrow()
            .get(name)
            .map(|group| group.assignment.values().flatten().cloned().collect())
            .unwrap_or_default()
    }
}

fn refused_commit(request: &OffsetCommitRequest, code: ErrorCode) -> OffsetCommitResponse {
    let message = match code {
        ErrorCode::IllegalGeneration => format!(
            "generation {} is not the group's current generation: the member was rebalanced out; rejoin",
            request.generation
        ),
        ErrorCode::UnknownMemberId => format!(
            "member {:?} is not in group {:?}; rejoin",
            request.member_id, request.group
        ),
        other => other.message().to_owned(),
    };
    OffsetCommitResponse {
        error_code: code.code(),
        error_message: Some(message),
        topics: Vec::new(),
    }
}

/// A batch for `__audit` holding one encoded audit record.
#[must_use]
pub fn audit_batch(group: &str, value: Vec<u8>, now: TimestampMs) -> BytesMut {
    let mut builder =
        corelog_wire::batch::BatchBuilder::new(corelog_wire::batch::Compression::None);
    let pushed = builder.push(&corelog_wire::batch::NewRecord {
        key: Some(bytes::Bytes::from(group.to_owned())),
        value: Some(bytes::Bytes::from(value)),
        timestamp: now,
        ..corelog_wire::batch::NewRecord::default()
    });
    assert!(pushed.is_ok(), "audit records have no reserved headers");
    match builder.build() {
        Ok(bytes) => BytesMut::from(&bytes[..]),
        Err(error) => unreachable!("a one-record batch builds: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use corelog_replication::{Push, PushAck, ReplicaConfig, ReplicaId};
    use corelog_wire::batch::BatchLimits;
    use corelog_wire::message::offset_commit::{OffsetCommitPartition, OffsetCommitTopic};
    use corelog_wire::types::LeaderEpoch;
    use futures::future::LocalBoxFuture;
    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;
    use crate::executor::GlommioExecutor;
    use crate::metadata::TopicConfig;
    use crate::partition::PartitionSpec;
    use crate::replica::{PushTransport, ReplicaSpec, ReplicatedPartition, TransportError};
    use crate::runtime::groups::ReplicatedGroupLog;
    use corelog_storage::clock::ManualClock;
    use corelog_storage::memory_disk::MemoryDisk;
    use corelog_storage::{
        DiskSpace, LogConfig, NoObserver, RetentionPolicy, ShardStorage, TailCache,
    };

    /// A replica set of one has no follower to push to.
    struct NoFollowers;

    impl PushTransport for NoFollowers {
        fn send_push(
            &self,
            to: ReplicaId,
            _push: Push,
        ) -> LocalBoxFuture<'_, Result<PushAck, TransportError>> {
            Box::pin(async move {
                Err(TransportError::Unreachable {
                    to,
                    reason: "no followers".to_owned(),
                })
            })
        }
    }

    /// The `__groups` partition as a single node runs it: a replica set of
    /// one, led here, in `epoch`.
    async fn open(disk: &MemoryDisk, epoch: u32) -> Rc<ReplicatedGroupLog<MemoryDisk>> {
        let shard = ShardStorage {
            clock: Rc::new(ManualClock::new(TimestampMs(1_000))),
            space: Rc::new(DiskSpace::new(0, || Ok(u64::MAX))),
            cache: TailCache::new(1 << 20),
            observer: Rc::new(NoObserver),
            journal: None,
        };
        let limits = BatchLimits {
            batch_bytes_max: 64 << 10,
            decompressed_bytes_max: 1 << 20,
        };
        let spec = ReplicaSpec {
            id: ReplicaId(1),
            config: ReplicaConfig::default(),
            partition: PartitionSpec {
                topic: "__groups",
                id: corelog_wire::types::PartitionId {
                    topic_id: 1,
                    partition: 0,
                },
                dir: Path::new("/data/__groups/0"),
                config: TopicConfig {
                    retention_ms: None,
                    segment_bytes: 64 << 10,
                    segment_ms: 1 << 40,
                    max_message_bytes: 64 << 10,
                    ..TopicConfig::DEFAULT
                },
                broker_log: LogConfig {
                    segment_bytes: 64 << 10,
                    segment_ms: 1 << 40,
                    retention: RetentionPolicy {
                        retention_ms: None,
                        retention_bytes: None,
                    },
                    index_interval_bytes: 4096,
                    flush_bytes_max: 64 << 10,
                    batch_limits: limits,
                },
                producer_state_retention_ms: 1 << 40,
            },
            high_watermark_signal: Arc::new(Event::new()),
        };
        let replica = ReplicatedPartition::open(
            disk.clone(),
            spec,
            shard,
            Rc::new(NoFollowers),
            Rc::new(GlommioExecutor),
        )
        .await
        .unwrap();
        replica
            .become_leader(LeaderEpoch(epoch), &[ReplicaId(1)])
            .await
            .unwrap();
        Rc::new(ReplicatedGroupLog(replica))
    }

    fn commit_request(group: &str, partition: u32, next_offset: u64) -> OffsetCommitRequest {
        OffsetCommitRequest {
            group: group.to_owned(),
            generation: -1,
            member_id: String::new(),
            topics: vec![OffsetCommitTopic {
                name: "orders".to_owned(),
                partitions: vec![OffsetCommitPartition {
                    partition,
                    next_offset,
                    metadata: None,
                }],
            }],
        }
    }

    /// Topic `orders`, id 3, as the metadata shows it.
    struct Orders;

    impl TopicView for Orders {
        fn partition_count(&self, topic: &str) -> Option<u32> {
            (topic == "orders").then_some(4)
        }

        fn topic_identity(&self, topic: &str) -> Option<TopicIdentity> {
            (topic == "orders").then_some(TopicIdentity {
                id: 3,
                created_at_ms: 0,
            })
        }
    }

    fn unbounded(
        _: &str,
        _: u32,
    ) -> futures::future::LocalBoxFuture<'static, Result<Offset, PartitionError>> {
        Box::pin(async { Ok(Offset(u64::MAX)) })
    }

    fn new_member(name: &str) -> JoinRequest {
        JoinRequest {
            member_id: None,
            instance_id: None,
            client_id: name.to_owned(),
            client_host: "127.0.0.1".to_owned(),
            topics: BTreeSet::from(["orders".to_owned()]),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
        }
    }

    fn in_executor(test: impl std::future::Future<Output = ()> + 'static) {
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor starts")
            .run(test);
    }

    /// A coordinator of a fresh single-node `__groups` partition.
    async fn fresh_coordinator() -> Rc<GroupCoordinator> {
        let disk = MemoryDisk::new(512, 1 << 40);
        Rc::new(
            GroupCoordinator::load(0, open(&disk, 0).await, TimestampMs(0))
                .await
                .unwrap(),
        )
    }

    /// A group with member `a` (generation 1) and member `b` waiting on the
    /// rebalance its join started at 2 s (deadline 32 s).
    async fn b_waits_on_a(
        coordinator: &Rc<GroupCoordinator>,
    ) -> glommio::task::JoinHandle<Result<Joined, PartitionError>> {
        let a = coordinator
            .join("g", new_member("a"), None, &Orders, TimestampMs(1_000))
            .await
            .unwrap();
        assert_eq!(a.generation, 1);
        let waiting = Rc::clone(coordinator);
        let b = glommio::spawn_local(async move {
            waiting
                .join("g", new_member("b"), None, &Orders, TimestampMs(2_000))
                .await
        })
        .detach();
        glommio::yield_if_needed().await;
        glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        assert!(coordinator.groups.borrow()["g"].deadline().is_some());
        b
    }

    /// Regression: a rebalance whose absent member expired waited for its
    /// deadline (the rebalance timeout, 30 s) though nobody was left to
    /// wait for; a consumer rejoining after a broker restart sat idle.
    #[test]
    fn a_rebalance_completes_once_its_absent_members_expired() {
        in_executor(async {
            let coordinator = fresh_coordinator().await;
            let b = b_waits_on_a(&coordinator).await;
            assert!(coordinator.rebalances_due(TimestampMs(5_000)).is_empty());
            // `a` has been silent past its 10 s session; `b` has not.
            coordinator.expire(TimestampMs(11_500)).await;
            let due = coordinator.rebalances_due(TimestampMs(11_500));
            assert_eq!(
                due,
                vec!["g".to_owned()],
                "due well before the 32 s deadline"
            );
            coordinator
                .try_complete("g", &Orders, TimestampMs(11_500))
                .await;
            let joined = b.await.expect("the join task ran").unwrap();
            assert_eq!((joined.generation, joined.members), (2, 1));
        });
    }

    /// Regression: a join waiting on a rebalance when the broker lost the
    /// `__groups` leadership was never answered (no tick runs on a retired
    /// coordinator); the client waited out its whole request timeout.
    #[test]
    fn a_waiting_join_is_told_not_coordinator_when_the_coordinator_retires() {
        in_executor(async {
            let coordinator = fresh_coordinator().await;
            let b = b_waits_on_a(&coordinator).await;
            coordinator.retire();
            let answered =
                glommio::timer::timeout(std::time::Duration::from_secs(5), async { Ok(b.await) })
                    .await
                    .expect("the waiting join is answered at once")
                    .expect("the join task ran");
            assert_eq!(answered.unwrap_err().code, ErrorCode::NotCoordinator);
        });
    }

    #[test]
    fn compaction_by_snapshot_bounds_the_log_and_replays_to_the_same_state() {
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor starts");
        executor.run(async {
            let disk = MemoryDisk::new(512, 1 << 40);
            let log = open(&disk, 0).await;
            let coordinator = GroupCoordinator::load(0, log.clone(), TimestampMs(0))
                .await
                .unwrap();
            for round in 0..3_000u64 {
                let group = format!("group-{}", round % 7);
                let response = coordinator
                    .commit(
                        commit_request(&group, (round % 4) as u32, round),
                        &Orders,
                        &unbounded,
                        None,
                        None,
                        TimestampMs(2_000),
                    )
                    .await;
                assert_eq!(response.topics[0].partitions[0].error_code, 0);
            }
            let before = coordinator.committed();
            let segments_before = log.summary().segment_count;
            assert!(
                segments_before >= 3,
                "the test needs closed segments: {segments_before}"
            );
            let deleted = coordinator
                .compact_if_due(TimestampMs(3_000))
                .await
                .unwrap();
            assert!(deleted > 0);
            assert!(log.summary().segment_count < segments_before);
            // A coordinator started from the compacted log has the same state.
            let reloaded = GroupCoordinator::load(0, log.clone(), TimestampMs(4_000))
                .await
                .unwrap();
            assert_eq!(reloaded.committed(), before);
            // And a crash changes nothing: the replica comes back and leads
            // the next epoch.
            drop((coordinator, reloaded, log));
            disk.crash();
            let log = open(&disk, 1).await;
            let recovered = GroupCoordinator::load(0, log, TimestampMs(5_000))
                .await
                .unwrap();
            assert_eq!(recovered.committed(), before);
        });
    }
}
