//! One consumer group as a pure state machine: membership, generations,
//! the coordinator-computed assignment and committed offsets. Time comes in
//! as an argument; persistence and waiting are the coordinator's.
//!
//! States: `Empty` (no members), `PreparingRebalance` (waiting for members
//! to rejoin, until all have or the rebalance deadline passes) and `Stable`.
//! Every membership change bumps the generation when the rebalance
//! completes; commits are judged against the current generation (C6).

use std::collections::{BTreeMap, BTreeSet};

use corelog_wire::error::ErrorCode;
use corelog_wire::types::TimestampMs;

use super::assignor::{self, MemberInput, TopicPartition};
use super::offsets::DeletedTopicPartition;

/// Where a group is in its membership protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to rejoin until the deadline.
    PreparingRebalance {
        /// When members that have not rejoined are removed.
        deadline: TimestampMs,
    },
    /// Members hold the current generation's assignment.
    Stable,
}

impl GroupState {
    /// Name shown to users.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance { .. } => "PreparingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// One member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Assigned by the coordinator.
    pub id: String,
    /// Static membership: survives the member's restarts.
    pub instance_id: Option<String>,
    /// The client's own name.
    pub client_id: String,
    /// Where it connects from.
    pub client_host: String,
    /// Subscribed topics.
    pub topics: BTreeSet<String>,
    /// Removed when silent this long.
    pub session_timeout_ms: u32,
    /// How long a rebalance waits for it.
    pub rebalance_timeout_ms: u32,
    /// Last heartbeat or join.
    pub last_seen: TimestampMs,
}

/// A committed position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The next offset the group will read.
    pub next_offset: u64,
    /// The committer's note.
    pub metadata: Option<String>,
    /// When.
    pub committed_at: TimestampMs,
    /// The id of the topic it was committed on; `None` for an offset
    /// written before offsets carried topic ids (see [`super::offsets`]).
    pub topic_id: Option<u64>,
}

/// A join request, as the state machine needs it.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    /// Known member id, or `None` for a new member.
    pub member_id: Option<String>,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// Client name.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
    /// Subscription.
    pub topics: BTreeSet<String>,
    /// Session timeout.
    pub session_timeout_ms: u32,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: u32,
}

/// What a join does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinOutcome {
    /// The member's place is settled already: answer now.
    Settled {
        /// The member's id.
        member_id: String,
    },
    /// A rebalance is under way: wait until it completes.
    Wait {
        /// The member's id.
        member_id: String,
    },
}

/// A consumer group.
#[derive(Clone, Debug)]
pub struct Group {
    /// Name.
    pub name: String,
    /// Bumped by every completed rebalance.
    pub generation: i32,
    /// Protocol state.
    pub state: GroupState,
    /// Members by id.
    pub members: BTreeMap<String, Member>,
    /// The current generation's assignment, by member id.
    pub assignment: BTreeMap<String, BTreeSet<TopicPartition>>,
    /// Members that rejoined during the current rebalance.
    joined: BTreeSet<String>,
    /// Committed positions on live topics (see [`super::offsets`]).
    pub offsets: BTreeMap<TopicPartition, Committed>,
    /// Committed positions on topics since deleted, kept until deleted
    /// with `group delete-offsets` or the group.
    pub deleted_topic_offsets: BTreeMap<DeletedTopicPartition, Committed>,
    /// Source of member ids unique within the group.
    next_member_number: u64,
    /// The principal whose group limit it counts against, when this
    /// coordinator created it (see [`super::budget`]); `None` for nobody.
    pub creator: Option<String>,
}

/// Ids of members, and whether another round must follow, after a rebalance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rebalanced {
    /// The new generation.
    pub generation: i32,
    /// Members removed for not rejoining in time.
    pub removed: Vec<String>,
    /// Whether partitions were withheld, so a follow-up round has started.
    pub follow_up: bool,
}

impl Group {
    /// An empty group.
    #[must_use]
    pub fn new(name: &str) -> Group {
        Group {
            name: name.to_owned(),
            generation: 0,
            state: GroupState::Empty,
            members: BTreeMap::new(),
            assignment: BTreeMap::new(),
            joined: BTreeSet::new(),
            offsets: BTreeMap::new(),
            deleted_topic_offsets: BTreeMap::new(),
            next_member_number: 0,
            creator: None,
        }
    }

    /// A group as persisted: members and assignment of `generation`, all
    /// considered alive from `now` (they are expired if they stay silent).
    #[must_use]
    pub fn restored(
        name: &str,
        generation: i32,
        members: Vec<Member>,
        assignment: BTreeMap<String, BTreeSet<TopicPartition>>,
        now: TimestampMs,
    ) -> Group {
        let mut group = Group::new(name);
        group.generation = generation;
        group.next_member_number = members.len() as u64 + u64::from(generation.unsigned_abs());
        group.members = members
            .into_iter()
            .map(|member| {
                (
                    member.id.clone(),
                    Member {
                        last_seen: now,
                        ..member
                    },
                )
            })
            .collect();
        group.assignment = assignment;
        group.state = if group.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        group
    }

    /// Handles a join: a new member, a rejoin during a rebalance, or a
    /// static member coming back.
    pub fn join(
        &mut self,
        request: JoinRequest,
        now: TimestampMs,
    ) -> Result<JoinOutcome, ErrorCode> {
        let static_member = request
            .instance_id
            .as_ref()
            .and_then(|instance| {
                self.members
                    .values()
                    .find(|member| member.instance_id.as_ref() == Some(instance))
            })
            .map(|member| member.id.clone());
        let member_id = match (&request.member_id, static_member) {
            (_, Some(id)) => id,
            (Some(id), None) if self.members.contains_key(id) => id.clone(),
            (Some(_), None) => return Err(ErrorCode::UnknownMemberId),
            (None, None) => {
                self.next_member_number += 1;
                format!("{}-{}", request.client_id, self.next_member_number)
            }
        };
        let existing = self.members.get(&member_id).cloned();
        let subscription_changed = existing
            .as_ref()
            .is_none_or(|member| member.topics != request.topics);
        self.members.insert(
            member_id.clone(),
            Member {
                id: member_id.clone(),
                instance_id: request.instance_id,
                client_id: request.client_id,
                client_host: request.client_host,
                topics: request.topics,
                session_timeout_ms: request.session_timeout_ms,
                rebalance_timeout_ms: request.rebalance_timeout_ms,
                last_seen: now,
            },
        );
        match self.state {
            GroupState::Stable if !subscription_changed => Ok(JoinOutcome::Settled { member_id }),
            GroupState::Stable | GroupState::Empty => {
                self.start_rebalance(now);
                self.joined.insert(member_id.clone());
                Ok(JoinOutcome::Wait { member_id })
            }
            GroupState::PreparingRebalance { .. } => {
                self.joined.insert(member_id.clone());
                Ok(JoinOutcome::Wait { member_id })
            }
        }
    }

    fn start_rebalance(&mut self, now: TimestampMs) {
        let timeout = self
            .members
            .values()
            .map(|member| member.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.joined.clear();
        self.state = GroupState::PreparingRebalance {
            deadline: TimestampMs(now.0 + i64::from(timeout)),
        };
    }

    /// Whether a rebalance is waiting for nobody: every member rejoined.
    #[must_use]
    pub fn all_joined(&self) -> bool {
        matches!(self.state, GroupState::PreparingRebalance { .. })
            && self.members.keys().all(|id| self.joined.contains(id))
    }

    /// Completes the rebalance if everyone rejoined or the deadline passed:
    /// removes absentees, bumps the generation and assigns partitions of the
    /// subscribed topics (`partition_counts`). If partitions had to be
    /// withheld, a follow-up round starts at once.
    pub fn complete_rebalance(
        &mut self,
        now: TimestampMs,
        partition_counts: &BTreeMap<String, u32>,
    ) -> Option<Rebalanced> {
        let GroupState::PreparingRebalance { deadline } = self.state else {
            return None;
        };
        if !self.all_joined() && now < deadline {
            return None;
        }
        let removed: Vec<String> = self
            .members
            .keys()
            .filter(|id| !self.joined.contains(*id))
            .cloned()
            .collect();
        for id in &removed {
            self.members.remove(id);
            self.assignment.remove(id);
        }
        // Members that rejoined were waiting on the coordinator: alive now.
        for member in self.members.values_mut() {
            member.last_seen = now;
        }
        self.generation += 1;
        let inputs: BTreeMap<String, MemberInput> = self
            .members
            .values()
            .map(|member| {
                (
                    member.id.clone(),
                    MemberInput {
                        topics: member.topics.clone(),
                        owned: self.assignment.get(&member.id).cloned().unwrap_or_default(),
                    },
                )
            })
            .collect();
        let result = assignor::assign(&inputs, partition_counts);
        self.assignment = result.members;
        self.joined.clear();
        let follow_up = !result.withheld.is_empty();
        self.state = if self.members.is_empty() {
            GroupState::Empty
        } else if follow_up {
            GroupState::PreparingRebalance {
                deadline: TimestampMs(now.0 + i64::from(self.max_rebalance_timeout())),
            }
        } else {
            GroupState::Stable
        };
        Some(Rebalanced {
            generation: self.generation,
            removed,
            follow_up,
        })
    }

    fn max_rebalance_timeout(&self) -> u32 {
        self.members
            .values()
            .map(|member| member.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// A heartbeat: keeps the member alive and tells it whether to rejoin.
    ///
    /// # Errors
    /// `UNKNOWN_MEMBER_ID`, `ILLEGAL_GENERATION`, or
    /// `REBALANCE_IN_PROGRESS` (rejoin).
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        generation: i32,
        now: TimestampMs,
    ) -> Result<(), ErrorCode> {
        let member = self
            .members
            .get_mut(member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        member.last_seen = now;
        if matches!(self.state, GroupState::PreparingRebalance { .. }) {
            return Err(ErrorCode::RebalanceInProgress);
        }
        if generation != self.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    /// A member leaves; the others rebalance.
    ///
    /// # Errors
    /// `UNKNOWN_MEMBER_ID`.
    pub fn leave(&mut self, member_id: &str, now: TimestampMs) -> Result<(), ErrorCode> {
        self.members
            .remove(member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        self.assignment.remove(member_id);
        self.joined.remove(member_id);
        self.after_departure(now);
        Ok(())
    }

    /// Removes members silent past their session timeout; returns their ids.
    pub fn expire(&mut self, now: TimestampMs) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|member| now.0 - member.last_seen.0 > i64::from(member.session_timeout_ms))
            .map(|member| member.id.clone())
            .collect();
        for id in &expired {
            self.members.remove(id);
            self.assignment.remove(id);
            self.joined.remove(id);
        }
        if !expired.is_empty() {
            self.after_departure(now);
        }
        expired
    }

    fn after_departure(&mut self, now: TimestampMs) {
        if self.members.is_empty() {
            self.generation += 1;
            self.assignment.clear();
            self.joined.clear();
            self.state = GroupState::Empty;
        } else if !matches!(self.state, GroupState::PreparingRebalance { .. }) {
            self.start_rebalance(now);
        }
    }

    /// Whether `member_id` may commit for `partition` in `generation`.
    /// Generation -1 with an empty member id is a manual commit, allowed
    /// only while the group has no members.
    ///
    /// # Errors
    /// `ILLEGAL_GENERATION` or `UNKNOWN_MEMBER_ID` for the whole commit.
    pub fn check_committer(&self, member_id: &str, generation: i32) -> Result<(), ErrorCode> {
        if generation == -1 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(ErrorCode::IllegalGeneration)
            };
        }
        if !self.members.contains_key(member_id) {
            return Err(ErrorCode::UnknownMemberId);
        }
        if generation != self.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    /// Whether the committer owns `partition` in the current generation
    /// (manual commits own everything).
    #[must_use]
    pub fn owns(&self, member_id: &str, partition: &TopicPartition) -> bool {
        member_id.is_empty()
            || self
                .assignment
                .get(member_id)
                .is_some_and(|owned| owned.contains(partition))
    }

    /// The subscribed topics of all members.
    #[must_use]
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|member| member.topics.iter().cloned())
            .collect()
    }

    /// The rebalance deadline, if one is under way.
    #[must_use]
    pub fn deadline(&self) -> Option<TimestampMs> {
        match self.state {
            GroupState::PreparingRebalance { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// Whether the rebalance under way can complete now: its deadline
    /// passed, or every member still in the group rejoined (the others
    /// expired, so nobody is left to wait for).
    #[must_use]
    pub fn rebalance_due(&self, now: TimestampMs) -> bool {
        self.deadline()
            .is_some_and(|deadline| deadline <= now || self.all_joined())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join_request(member_id: Option<&str>, instance: Option<&str>) -> JoinRequest {
        JoinRequest {
            member_id: member_id.map(str::to_owned),
            instance_id: instance.map(str::to_owned),
            client_id: "c".to_owned(),
            client_host: "127.0.0.1".to_owned(),
            topics: BTreeSet::from(["orders".to_owned()]),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
        }
    }

    fn counts() -> BTreeMap<String, u32> {
        BTreeMap::from([("orders".to_owned(), 4)])
    }

    fn id(outcome: JoinOutcome) -> String {
        match outcome {
            JoinOutcome::Settled { member_id } | JoinOutcome::Wait { member_id } => member_id,
        }
    }

    #[test]
    fn generations_advance_and_stale_generations_are_refused() {
        let mut group = Group::new("search");
        let a = id(group
            .join(join_request(None, None), TimestampMs(0))
            .unwrap());
        let done = group.complete_rebalance(TimestampMs(1), &counts()).unwrap();
        assert_eq!(done.generation, 1);
        assert_eq!(group.assignment[&a].len(), 4);
        assert_eq!(group.check_committer(&a, 1), Ok(()));

        let b = id(group
            .join(join_request(None, None), TimestampMs(2))
            .unwrap());
        assert_eq!(
            group.heartbeat(&a, 1, TimestampMs(3)),
            Err(ErrorCode::RebalanceInProgress)
        );
        // Commits from the current generation are still accepted while preparing.
        assert_eq!(group.check_committer(&a, 1), Ok(()));
        group
            .join(join_request(Some(&a), None), TimestampMs(4))
            .unwrap();
        let second = group.complete_rebalance(TimestampMs(5), &counts()).unwrap();
        assert_eq!(second.generation, 2);
        assert!(
            second.follow_up,
            "b's partitions were withheld from a first"
        );
        assert_eq!(
            group.check_committer(&a, 1),
            Err(ErrorCode::IllegalGeneration)
        );
        assert_eq!(
            group.check_committer("stranger", 2),
            Err(ErrorCode::UnknownMemberId)
        );
        group
            .join(join_request(Some(&a), None), TimestampMs(6))
            .unwrap();
        group
            .join(join_request(Some(&b), None), TimestampMs(6))
            .unwrap();
        let third = group.complete_rebalance(TimestampMs(7), &counts()).unwrap();
        assert!(!third.follow_up);
        assert_eq!(
            (group.assignment[&a].len(), group.assignment[&b].len()),
            (2, 2)
        );
        assert_eq!(group.state, GroupState::Stable);
    }

    #[test]
    fn absent_members_are_removed_at_the_deadline_and_silent_ones_expire() {
        let mut group = Group::new("g");
        let a = id(group
            .join(join_request(None, None), TimestampMs(0))
            .unwrap());
        group.complete_rebalance(TimestampMs(0), &counts()).unwrap();
        let b = id(group
            .join(join_request(None, None), TimestampMs(100))
            .unwrap());
        // a does not rejoin: nothing completes before the deadline...
        assert_eq!(
            group.complete_rebalance(TimestampMs(1_000), &counts()),
            None
        );
        // ...and at it, a is removed.
        let done = group
            .complete_rebalance(TimestampMs(30_100), &counts())
            .unwrap();
        assert_eq!(done.removed, vec![a]);
        assert_eq!(group.assignment[&b].len(), 4);
        assert_eq!(
            group.expire(TimestampMs(30_100 + 9_000)),
            Vec::<String>::new()
        );
        assert_eq!(group.expire(TimestampMs(200_000)), vec![b]);
        assert_eq!(group.state, GroupState::Empty);
        assert_eq!(group.check_committer("", -1), Ok(()));
    }

    #[test]
    fn a_static_member_returning_does_not_rebalance() {
        let mut group = Group::new("g");
        let first = id(group
            .join(join_request(None, Some("host-1")), TimestampMs(0))
            .unwrap());
        group.complete_rebalance(TimestampMs(0), &counts()).unwrap();
        let generation = group.generation;
        let again = group
            .join(join_request(None, Some("host-1")), TimestampMs(5_000))
            .unwrap();
        assert_eq!(again, JoinOutcome::Settled { member_id: first });
        assert_eq!(
            (group.generation, group.state),
            (generation, GroupState::Stable)
        );
    }

    #[test]
    fn manual_commits_only_without_members() {
        let mut group = Group::new("g");
        assert_eq!(group.check_committer("", -1), Ok(()));
        group
            .join(join_request(None, None), TimestampMs(0))
            .unwrap();
        assert_eq!(
            group.check_committer("", -1),
            Err(ErrorCode::IllegalGeneration)
        );
        assert!(!group.owns("someone", &("orders".to_owned(), 0)));
    }
}
