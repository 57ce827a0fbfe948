//! The fake broker's group coordinator: enough of the protocol for the
//! client's tests, in memory.
//!
//! It follows the rules the client relies on: JoinGroup waits until every
//! known member rejoined (or the rebalance timeout), then bumps the
//! generation and answers everyone; heartbeats answer
//! `REBALANCE_IN_PROGRESS` meanwhile and `ILLEGAL_GENERATION` /
//! `UNKNOWN_MEMBER_ID` to the fenced; commits of the current generation are
//! accepted during a rebalance; a static member rejoining with an unchanged
//! subscription gets its place back without a rebalance; manual commits
//! (generation -1) only for a group without members; resets need a reason
//! and an empty group. Unlike the real coordinator it assigns round-robin
//! (not sticky) and moves partitions in one step.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_wire::batch::{self, BatchBuilder, BatchLimits, Compression, NewRecord};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::audit::{AUDIT_TOPIC, AuditKind, AuditRecord};
use corelog_wire::message::delete_groups::{
    DeleteGroupsRequest, DeleteGroupsResponse, GroupResult,
};
use corelog_wire::message::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsResponse, GroupDescription, MemberDescription,
    PartitionLag,
};
use corelog_wire::message::find_coordinator::{FindCoordinatorRequest, FindCoordinatorResponse};
use corelog_wire::message::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use corelog_wire::message::list_groups::{GroupListing, ListGroupsRequest, ListGroupsResponse};
use corelog_wire::message::offset_commit::{
    OffsetCommitPartitionResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetCommitTopicResponse,
};
use corelog_wire::message::offset_fetch::{
    OffsetFetchPartition, OffsetFetchRequest, OffsetFetchResponse, OffsetFetchTopic,
};
use corelog_wire::message::reset_offsets::{
    ResetOffsetsRequest, ResetOffsetsResponse, ResetPartition, ResetTarget,
};
use corelog_wire::message::write_audit::{WriteAuditRequest, WriteAuditResponse};
use corelog_wire::message::{Request, Response, TopicPartitions, decode_request, encode_response};
use corelog_wire::types::TimestampMs;
use rkyv::rancor;

use super::fake_broker::{FakeBroker, State, append};

/// Every group the fake coordinates.
#[derive(Debug, Default)]
pub struct Groups {
    groups: BTreeMap<String, Group>,
    next_member: u64,
    /// Commits accepted, in order: (group, generation, topic, partition, offset).
    pub commits: Vec<(String, i32, String, u32, u64)>,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// LeaveGroup requests received.
    pub leaves: u64,
    /// Answer WriteAudit with this code instead of appending (a broker
    /// that refuses the principal group-admin).
    refuse_audits: Option<ErrorCode>,
    /// WriteAudit requests refused.
    pub refused_audits: u64,
}

#[derive(Debug, Default)]
struct Group {
    generation: i32,
    members: BTreeMap<String, Member>,
    rebalancing: bool,
    joined: BTreeSet<String>,
    offsets: BTreeMap<(String, u32), Committed>,
}

#[derive(Debug)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    topics: Vec<String>,
    assignment: Vec<(String, u32)>,
    last_seen: Instant,
    session_timeout: Duration,
}

#[derive(Clone, Debug)]
struct Committed {
    next_offset: u64,
    metadata: Option<String>,
    at_ms: i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Decodes a request into its owned form.
fn owned<Q>(body: &[u8]) -> Q
where
    Q: Request,
    Q::Archived: rkyv::Deserialize<Q, rancor::Strategy<rkyv::de::Pool, rancor::Error>>,
{
    let (archived, _) = decode_request::<Q>(body).unwrap();
    rkyv::deserialize::<Q, rancor::Error>(archived).unwrap()
}

fn encode<R: Response>(response: &R) -> Vec<u8> {
    encode_response(response, &[]).unwrap()
}

fn grouped(partitions: &[(String, u32)]) -> Vec<TopicPartitions> {
    let mut topics: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        topics.entry(topic).or_default().push(*partition);
    }
    topics
        .into_iter()
        .map(|(topic, partitions)| TopicPartitions {
            topic: topic.to_owned(),
            partitions,
        })
        .collect()
}

impl Group {
    /// Removes members silent past their session timeout; starts a
    /// rebalance if any went.
    fn expire(&mut self) {
        let before = self.members.len();
        self.members
            .retain(|_, member| member.last_seen.elapsed() <= member.session_timeout);
        if self.members.len() != before {
            self.start_rebalance();
        }
    }

    fn start_rebalance(&mut self) {
        if !self.rebalancing {
            self.rebalancing = true;
            self.joined.clear();
        }
        if self.members.is_empty() {
            self.rebalancing = false;
            self.generation += 1;
        }
    }

    /// Ends the round: bumps the generation and assigns round-robin.
    fn complete(&mut self, state: &State) {
        self.members.retain(|id, _| self.joined.contains(id));
        self.generation += 1;
        self.rebalancing = false;
        self.joined.clear();
        for member in self.members.values_mut() {
            member.assignment.clear();
        }
        let topics: BTreeSet<String> = self
            .members
            .values()
            .flat_map(|member| member.topics.iter().cloned())
            .collect();
        for topic in topics {
            let count = state.topics.get(&topic).map_or(0, Vec::len) as u32;
            let subscribers: Vec<String> = self
                .members
                .iter()
                .filter(|(_, member)| member.topics.contains(&topic))
                .map(|(id, _)| id.clone())
                .collect();
            for partition in 0..count {
                let owner = &subscribers[partition as usize % subscribers.len()];
                self.members
                    .get_mut(owner)
                    .unwrap()
                    .assignment
                    .push((topic.clone(), partition));
            }
        }
    }

    fn join_answer(&self, member_id: &str) -> JoinGroupResponse {
        match self.members.get(member_id) {
            Some(member) => JoinGroupResponse {
                error_code: 0,
                error_message: None,
                member_id: member_id.to_owned(),
                generation: self.generation,
                assignment: grouped(&member.assignment),
                heartbeat_interval_ms: (member.session_timeout.as_millis() / 5).max(10) as u32,
                members: self.members.len() as u32,
            },
            None => join_error(ErrorCode::UnknownMemberId),
        }
    }

    fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.rebalancing {
            "PreparingRebalance"
        } else {
            "Stable"
        }
    }
}

fn join_error(code: ErrorCode) -> JoinGroupResponse {
    JoinGroupResponse {
        error_code: code.code(),
        error_message: None,
        member_id: String::new(),
        generation: -1,
        assignment: Vec::new(),
        heartbeat_interval_ms: 0,
        members: 0,
    }
}

impl FakeBroker {
    /// The group's committed offset of a partition.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<u64> {
        let groups = self.groups.lock().unwrap();
        groups
            .groups
            .get(group)?
            .offsets
            .get(&(topic.to_owned(), partition))
            .map(|committed| committed.next_offset)
    }

    /// The group's generation and member count.
    pub fn group_state(&self, group: &str) -> Option<(i32, usize, bool)> {
        let groups = self.groups.lock().unwrap();
        groups
            .groups
            .get(group)
            .map(|group| (group.generation, group.members.len(), group.rebalancing))
    }

    /// Forces a rebalance, as a coordinator would for a new member.
    pub fn start_rebalance(&self, group: &str) {
        let mut groups = self.groups.lock().unwrap();
        groups
            .groups
            .entry(group.to_owned())
            .or_default()
            .start_rebalance();
    }

    /// Forgets every member, as a coordinator does after their session
    /// timeout: their next heartbeat gets `UNKNOWN_MEMBER_ID`.
    pub fn expel_members(&self, group: &str) {
        let mut groups = self.groups.lock().unwrap();
        let group = groups.groups.entry(group.to_owned()).or_default();
        group.members.clear();
        group.start_rebalance();
    }

    /// LeaveGroup requests received.
    pub fn leaves(&self) -> u64 {
        self.groups.lock().unwrap().leaves
    }

    /// Refuses every WriteAudit from now on with `code`, as a broker does
    /// for a principal without group-admin.
    pub fn refuse_audits(&self, code: ErrorCode) {
        self.groups.lock().unwrap().refuse_audits = Some(code);
    }

    /// WriteAudit requests refused so far.
    pub fn refused_audits(&self) -> u64 {
        self.groups.lock().unwrap().refused_audits
    }

    /// Every audit record appended so far.
    pub fn audit_records(&self) -> Vec<AuditRecord> {
        if !self.state.lock().unwrap().topics.contains_key(AUDIT_TOPIC) {
            return Vec::new();
        }
        self.records(AUDIT_TOPIC, 0)
            .iter()
            .map(|record| AuditRecord::decode(record.value.as_deref().unwrap()).unwrap())
            .collect()
    }

    /// JoinGroup: waits for the round to complete.
    pub(crate) async fn join_group(&self, body: &[u8]) -> Vec<u8> {
        let request: JoinGroupRequest = owned(body);
        let rebalance_timeout = Duration::from_millis(u64::from(request.rebalance_timeout_ms));
        let (member_id, round) = {
            let mut groups = self.groups.lock().unwrap();
            groups.next_member += 1;
            let fresh = format!("member-{}", groups.next_member);
            let group = groups.groups.entry(request.group.clone()).or_default();
            group.expire();
            let known_static = request.instance_id.as_ref().and_then(|instance| {
                group
                    .members
                    .iter()
                    .find(|(_, member)| member.instance_id.as_ref() == Some(instance))
                    .map(|(id, _)| id.clone())
            });
            let member_id = match (known_static, &request.member_id) {
                (Some(id), _) => {
                    let member = group.members.get_mut(&id).unwrap();
                    member.last_seen = Instant::now();
                    if !group.rebalancing && member.topics == request.topics {
                        // A static member back within its session: its
                        // place, without a rebalance.
                        return encode(&group.join_answer(&id));
                    }
                    id
                }
                (None, None) => {
                    group.members.insert(
                        fresh.clone(),
                        Member {
                            instance_id: request.instance_id.clone(),
                            client_id: request.client_id.clone(),
                            topics: request.topics.clone(),
                            assignment: Vec::new(),
                            last_seen: Instant::now(),
                            session_timeout: Duration::from_millis(u64::from(
                                request.session_timeout_ms,
                            )),
                        },
                    );
                    group.start_rebalance();
                    fresh
                }
                (None, Some(id)) => {
                    let Some(member) = group.members.get_mut(id) else {
                        return encode(&join_error(ErrorCode::UnknownMemberId));
                    };
                    member.last_seen = Instant::now();
                    if member.topics != request.topics {
                        member.topics = request.topics.clone();
                        group.start_rebalance();
                    }
                    if !group.rebalancing {
                        return encode(&group.join_answer(id));
                    }
                    id.clone()
                }
            };
            let round = group.generation;
            group.joined.insert(member_id.clone());
            if group.members.keys().all(|id| group.joined.contains(id)) {
                let state = self.state.lock().unwrap();
                group.complete(&state);
            }
            (member_id, round)
        };
        let deadline = Instant::now() + rebalance_timeout;
        loop {
            {
                let mut groups = self.groups.lock().unwrap();
                let group = groups.groups.get_mut(&request.group).unwrap();
                if group.generation > round || !group.members.contains_key(&member_id) {
                    return encode(&group.join_answer(&member_id));
                }
                if Instant::now() >= deadline {
                    let state = self.state.lock().unwrap();
                    group.complete(&state);
                    return encode(&group.join_answer(&member_id));
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The group APIs that answer at once.
    pub(crate) fn handle_group(&self, api: ApiKey, body: &[u8]) -> Vec<u8> {
        match api {
            ApiKey::FindCoordinator => {
                let _: FindCoordinatorRequest = owned(body);
                encode(&FindCoordinatorResponse {
                    error_code: 0,
                    error_message: None,
                    node_id: 1,
                    host: "0.0.0.0".to_owned(),
                    port: self.addr.port(),
                    owner_shard: 0,
                })
            }
            ApiKey::Heartbeat => encode(&self.heartbeat(owned(body))),
            ApiKey::LeaveGroup => {
                let request: LeaveGroupRequest = owned(body);
                let mut groups = self.groups.lock().unwrap();
                groups.leaves += 1;
                let code = match groups.groups.get_mut(&request.group) {
                    Some(group) => {
                        if group.members.remove(&request.member_id).is_some() {
                            group.start_rebalance();
                            ErrorCode::None
                        } else {
                            ErrorCode::UnknownMemberId
                        }
                    }
                    None => ErrorCode::UnknownMemberId,
                };
                encode(&LeaveGroupResponse {
                    error_code: code.code(),
                    error_message: None,
                })
            }
            ApiKey::OffsetCommit => encode(&self.offset_commit(owned(body))),
            ApiKey::OffsetFetch => encode(&self.offset_fetch(owned(body))),
            ApiKey::ListGroups => {
                let request: ListGroupsRequest = owned(body);
                let groups = self.groups.lock().unwrap();
                let listed = groups
                    .groups
                    .iter()
                    .filter(|(_, group)| {
                        request.states.is_empty()
                            || request.states.iter().any(|s| s == group.state_name())
                    })
                    .map(|(name, group)| GroupListing {
                        group: name.clone(),
                        state: group.state_name().to_owned(),
                        members: group.members.len() as u32,
                        generation: group.generation,
                    })
                    .collect();
                encode(&ListGroupsResponse { groups: listed })
            }
            ApiKey::DescribeGroups => encode(&self.describe_groups(owned(body))),
            ApiKey::DeleteGroups => {
                let request: DeleteGroupsRequest = owned(body);
                let mut groups = self.groups.lock().unwrap();
                let results = request
                    .groups
                    .iter()
                    .map(|name| {
                        let code = match groups.groups.get(name) {
                            None => ErrorCode::UnknownGroup,
                            Some(group) if !group.members.is_empty() => ErrorCode::GroupNotEmpty,
                            Some(_) => {
                                groups.groups.remove(name);
                                ErrorCode::None
                            }
                        };
                        GroupResult {
                            group: name.clone(),
                            error_code: code.code(),
                            error_message: None,
                        }
                    })
                    .collect();
                encode(&DeleteGroupsResponse { results })
            }
            ApiKey::ResetOffsets => encode(&self.reset_offsets(owned(body))),
            ApiKey::WriteAudit => {
                let refusal = {
                    let mut groups = self.groups.lock().unwrap();
                    let refusal = groups.refuse_audits;
                    groups.refused_audits += u64::from(refusal.is_some());
                    refusal
                };
                if let Some(code) = refusal {
                    return encode(&WriteAuditResponse {
                        error_code: code.code(),
                        error_message: None,
                        audit_offset: -1,
                    });
                }
                let request: WriteAuditRequest = owned(body);
                let offset = self.write_audit(AuditRecord {
                    kind: AuditKind::from(request.action),
                    group: request.group,
                    topic: request.topic,
                    partition: Some(request.partition),
                    principal: request.principal,
                    reason: request.reason,
                    at_ms: now_ms(),
                    before: Vec::new(),
                    after: Vec::new(),
                    offset: Some(request.offset),
                    dead_letter_topic: request.dead_letter_topic,
                    dead_letter_offset: u64::try_from(request.dead_letter_offset).ok(),
                    error: None,
                });
                encode(&WriteAuditResponse {
                    error_code: 0,
                    error_message: None,
                    audit_offset: offset as i64,
                })
            }
            other => unreachable!("{other} is not a group API"),
        }
    }

    fn heartbeat(&self, request: HeartbeatRequest) -> HeartbeatResponse {
        let mut groups = self.groups.lock().unwrap();
        groups.heartbeats += 1;
        let code = match groups.groups.get_mut(&request.group) {
            None => ErrorCode::UnknownMemberId,
            Some(group) => {
                group.expire();
                match group.members.get_mut(&request.member_id) {
                    None => ErrorCode::UnknownMemberId,
                    Some(member) => {
                        member.last_seen = Instant::now();
                        if group.rebalancing {
                            ErrorCode::RebalanceInProgress
                        } else if request.generation != group.generation {
                            ErrorCode::IllegalGeneration
                        } else {
                            ErrorCode::None
                        }
                    }
                }
            }
        };
        HeartbeatResponse {
            error_code: code.code(),
            error_message: None,
        }
    }

    fn offset_commit(&self, request: OffsetCommitRequest) -> OffsetCommitResponse {
        let mut groups = self.groups.lock().unwrap();
        let state = self.state.lock().unwrap();
        let group = groups.groups.entry(request.group.clone()).or_default();
        let refuse = |code: ErrorCode| OffsetCommitResponse {
            error_code: code.code(),
            error_message: None,
            topics: Vec::new(),
        };
        let member = if request.generation == -1 && request.member_id.is_empty() {
            if !group.members.is_empty() {
                return refuse(ErrorCode::IllegalGeneration);
            }
            None
        } else {
            match group.members.get(&request.member_id) {
                None => return refuse(ErrorCode::UnknownMemberId),
                Some(_) if request.generation != group.generation => {
                    return refuse(ErrorCode::IllegalGeneration);
                }
                Some(member) => Some(member.assignment.clone()),
            }
        };
        let mut accepted = Vec::new();
        let topics = request
            .topics
            .iter()
            .map(|topic| OffsetCommitTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let high_watermark = state
                            .topics
                            .get(&topic.name)
                            .and_then(|logs| logs.get(p.partition as usize))
                            .map(|log| log.next_offset);
                        let owned = member.as_ref().is_none_or(|assignment| {
                            assignment.contains(&(topic.name.clone(), p.partition))
                        });
                        let code = match high_watermark {
                            None => ErrorCode::UnknownTopicOrPartition,
                            Some(_) if !owned => ErrorCode::NotOwner,
                            Some(hw) if p.next_offset > hw => ErrorCode::OffsetBeyondHighWatermark,
                            Some(_) => {
                                accepted.push((
                                    topic.name.clone(),
                                    p.partition,
                                    p.next_offset,
                                    p.metadata.clone(),
                                ));
                                ErrorCode::None
                            }
                        };
                        OffsetCommitPartitionResponse {
                            partition: p.partition,
                            error_code: code.code(),
                            error_message: None,
                        }
                    })
                    .collect(),
            })
            .collect();
        let generation = group.generation;
        let mut log = Vec::new();
        for (topic, partition, next_offset, metadata) in accepted {
            group.offsets.insert(
                (topic.clone(), partition),
                Committed {
                    next_offset,
                    metadata,
                    at_ms: now_ms(),
                },
            );
            log.push((
                request.group.clone(),
                generation,
                topic,
                partition,
                next_offset,
            ));
        }
        groups.commits.extend(log);
        OffsetCommitResponse {
            error_code: 0,
            error_message: None,
            topics,
        }
    }

    fn offset_fetch(&self, request: OffsetFetchRequest) -> OffsetFetchResponse {
        let groups = self.groups.lock().unwrap();
        let offsets = groups
            .groups
            .get(&request.group)
            .map(|group| group.offsets.clone())
            .unwrap_or_default();
        let wanted: Vec<(String, u32)> = match &request.topics {
            Some(topics) => topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
                .collect(),
            None => offsets.keys().cloned().collect(),
        };
        let mut topics: BTreeMap<String, Vec<OffsetFetchPartition>> = BTreeMap::new();
        for (topic, partition) in wanted {
            let committed = offsets.get(&(topic.clone(), partition));
            topics.entry(topic).or_default().push(OffsetFetchPartition {
                partition,
                next_offset: committed.map_or(-1, |c| c.next_offset as i64),
                metadata: committed.and_then(|c| c.metadata.clone()),
                committed_at_ms: committed.map_or(-1, |c| c.at_ms),
                error_code: 0,
            });
        }
        OffsetFetchResponse {
            error_code: 0,
            error_message: None,
            topics: topics
                .into_iter()
                .map(|(name, partitions)| OffsetFetchTopic { name, partitions })
                .collect(),
        }
    }

    fn describe_groups(&self, request: DescribeGroupsRequest) -> DescribeGroupsResponse {
        let groups = self.groups.lock().unwrap();
        let state = self.state.lock().unwrap();
        let described = request
            .groups
            .iter()
            .map(|name| match groups.groups.get(name) {
                None => GroupDescription {
                    group: name.clone(),
                    error_code: ErrorCode::UnknownGroup.code(),
                    error_message: None,
                    state: "Dead".to_owned(),
                    generation: -1,
                    members: Vec::new(),
                    partitions: Vec::new(),
                },
                Some(group) => GroupDescription {
                    group: name.clone(),
                    error_code: 0,
                    error_message: None,
                    state: group.state_name().to_owned(),
                    generation: group.generation,
                    members: group
                        .members
                        .iter()
                        .map(|(id, member)| MemberDescription {
                            member_id: id.clone(),
                            instance_id: member.instance_id.clone(),
                            client_id: member.client_id.clone(),
                            client_host: "127.0.0.1".to_owned(),
                            assignment: grouped(&member.assignment),
                        })
                        .collect(),
                    partitions: group
                        .offsets
                        .iter()
                        .map(|((topic, partition), committed)| {
                            let log = &state.topics[topic][*partition as usize];
                            PartitionLag {
                                topic: topic.clone(),
                                partition: *partition,
                                committed_offset: committed.next_offset as i64,
                                metadata: committed.metadata.clone(),
                                log_start_offset: log.log_start,
                                high_watermark: log.next_offset,
                                lag_records: log.next_offset.saturating_sub(committed.next_offset),
                                lag_bytes: 0,
                                oldest_unconsumed_age_ms: -1,
                                retention_left_ms: -1,
                            }
                        })
                        .collect(),
                },
            })
            .collect();
        DescribeGroupsResponse { groups: described }
    }

    fn reset_offsets(&self, request: ResetOffsetsRequest) -> ResetOffsetsResponse {
        let refuse = |code: ErrorCode| ResetOffsetsResponse {
            error_code: code.code(),
            error_message: None,
            audit_offset: -1,
            partitions: Vec::new(),
        };
        if request.reason.trim().is_empty() {
            return refuse(ErrorCode::AuditReasonRequired);
        }
        let (bounds, count) = {
            let state = self.state.lock().unwrap();
            let Some(logs) = state.topics.get(&request.topic) else {
                return refuse(ErrorCode::UnknownTopicOrPartition);
            };
            let bounds: Vec<(u64, u64)> =
                logs.iter().map(|l| (l.log_start, l.next_offset)).collect();
            (bounds, logs.len() as u32)
        };
        let partitions: Vec<u32> = match (&request.to, &request.partitions) {
            (ResetTarget::Offsets(offsets), _) => offsets.iter().map(|o| o.partition).collect(),
            (_, Some(partitions)) => partitions.clone(),
            (_, None) => (0..count).collect(),
        };
        let mut results = Vec::new();
        {
            let groups = self.groups.lock().unwrap();
            if groups
                .groups
                .get(&request.group)
                .is_some_and(|g| !g.members.is_empty())
            {
                return refuse(ErrorCode::GroupNotEmpty);
            }
            for partition in partitions {
                let Some(&(start, end)) = bounds.get(partition as usize) else {
                    results.push(ResetPartition {
                        partition,
                        before: -1,
                        after: -1,
                        error_code: ErrorCode::UnknownTopicOrPartition.code(),
                    });
                    continue;
                };
                let before = groups
                    .groups
                    .get(&request.group)
                    .and_then(|g| g.offsets.get(&(request.topic.clone(), partition)))
                    .map_or(-1, |c| c.next_offset as i64);
                let after = match &request.to {
                    ResetTarget::Earliest => start,
                    ResetTarget::Latest => end,
                    ResetTarget::Offset(offset) => (*offset).clamp(start, end),
                    ResetTarget::Offsets(offsets) => offsets
                        .iter()
                        .find(|o| o.partition == partition)
                        .map_or(start, |o| o.offset.clamp(start, end)),
                    ResetTarget::Timestamp(time) => self
                        .records(&request.topic, partition)
                        .iter()
                        .find(|r| r.timestamp >= TimestampMs(*time))
                        .map_or(end, |r| r.offset.0),
                };
                results.push(ResetPartition {
                    partition,
                    before,
                    after: after as i64,
                    error_code: 0,
                });
            }
        }
        let mut audit_offset = -1;
        if !request.dry_run {
            audit_offset = self.write_audit(AuditRecord {
                kind: AuditKind::OffsetReset,
                group: request.group.clone(),
                topic: request.topic.clone(),
                partition: request
                    .partitions
                    .as_ref()
                    .and_then(|p| (p.len() == 1).then(|| p[0])),
                principal: request.principal.clone(),
                reason: request.reason.clone(),
                at_ms: now_ms(),
                before: results.iter().map(|r| (r.partition, r.before)).collect(),
                after: results.iter().map(|r| (r.partition, r.after)).collect(),
                offset: None,
                dead_letter_topic: None,
                dead_letter_offset: None,
                error: None,
            }) as i64;
            let mut groups = self.groups.lock().unwrap();
            let group = groups.groups.entry(request.group.clone()).or_default();
            for result in results.iter().filter(|r| r.error_code == 0) {
                group.offsets.insert(
                    (request.topic.clone(), result.partition),
                    Committed {
                        next_offset: result.after as u64,
                        metadata: None,
                        at_ms: now_ms(),
                    },
                );
            }
        }
        ResetOffsetsResponse {
            error_code: 0,
            error_message: None,
            audit_offset,
            partitions: results,
        }
    }

    /// Appends an audit record to `__audit` partition 0 and returns its
    /// offset.
    fn write_audit(&self, record: AuditRecord) -> u64 {
        let mut builder = BatchBuilder::new(Compression::None);
        builder
            .push(&NewRecord {
                value: Some(Bytes::from(record.encode())),
                timestamp: TimestampMs(record.at_ms),
                ..NewRecord::default()
            })
            .unwrap();
        let bytes = builder.build().unwrap().to_vec();
        let header = batch::validate(&bytes, &BatchLimits::default()).unwrap();
        let mut state = self.state.lock().unwrap();
        if !state.topics.contains_key(AUDIT_TOPIC) {
            state
                .topics
                .insert(AUDIT_TOPIC.to_owned(), vec![Default::default()]);
            state.configs.insert(AUDIT_TOPIC.to_owned(), Vec::new());
        }
        let (code, offset) = append(&mut state, AUDIT_TOPIC, 0, &bytes, &header);
        assert_eq!(code, ErrorCode::None);
        drop(state);
        self.appended.notify_waiters();
        offset as u64
    }
}
