//! Requests to a group's coordinator: finding it, membership (join,
//! heartbeat, leave), committed offsets, and the audited writes of the
//! poison policy. Shared by the group consumer, its membership task and the
//! admin client.
//!
//! The coordinator's address is cached after FindCoordinator and forgotten
//! when it answers `NOT_COORDINATOR` / `COORDINATOR_NOT_AVAILABLE` or its
//! connection breaks, so the next request looks it up again. Nothing here
//! retries on its own except [`Coordinator::retrying`], which callers use
//! for requests that are safe to repeat.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::TopicPartitions;
use corelog_wire::message::find_coordinator::FindCoordinatorRequest;
use corelog_wire::message::heartbeat::HeartbeatRequest;
use corelog_wire::message::join_group::JoinGroupRequest;
use corelog_wire::message::leave_group::LeaveGroupRequest;
use corelog_wire::message::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic,
};
use corelog_wire::message::offset_fetch::OffsetFetchRequest;
use corelog_wire::message::write_audit::WriteAuditRequest;
use corelog_wire::types::{Offset, TimestampMs};

use super::tracker::TopicPartition;
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::ClientError;

/// First wait between two attempts of [`Coordinator::retrying`]; doubles.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Attempts of [`Coordinator::retrying`]: with the doubling backoff, about
/// 3 s of waiting, enough for a coordinator to be elected or restarted
/// locally.
const RETRY_ATTEMPTS: u32 = 6;

/// Who commits: a member in its generation, or nobody
/// ([`MemberGeneration::none`]) for manual offsets of a group without
/// members.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemberGeneration {
    /// The member id the coordinator gave; empty for none.
    pub member_id: String,
    /// The generation; -1 for none.
    pub generation: i32,
}

impl MemberGeneration {
    /// No member: accepted only while the group has no members.
    #[must_use]
    pub fn none() -> MemberGeneration {
        MemberGeneration {
            member_id: String::new(),
            generation: -1,
        }
    }
}

/// One offset to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetToCommit {
    /// The partition.
    pub partition: TopicPartition,
    /// The next offset to read: every record below it is done.
    pub next_offset: Offset,
    /// Free text stored with the offset.
    pub metadata: Option<String>,
}

/// A group's committed offset for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The partition.
    pub partition: TopicPartition,
    /// The next offset to read; `None` if the group never committed one.
    pub next_offset: Option<Offset>,
    /// Text stored with the offset.
    pub metadata: Option<String>,
    /// When it was committed, by the coordinator's clock.
    pub committed_at: Option<TimestampMs>,
}

/// The member's place after a JoinGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Joined {
    pub member_id: String,
    pub generation: i32,
    pub assignment: BTreeSet<TopicPartition>,
    pub heartbeat_interval: Duration,
    pub members: u32,
}

/// The outcome of each partition of a commit.
pub type CommitResults = Vec<(TopicPartition, Result<Offset, ClientError>)>;

/// One group's coordinator.
#[derive(Debug)]
pub(crate) struct Coordinator {
    cluster: Arc<Cluster>,
    group: String,
    addr: Mutex<Option<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only plain assignments happen under this lock.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether an error means the coordinator may be elsewhere now.
fn coordinator_moved(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
    ) || matches!(
        error,
        ClientError::Connect { .. }
            | ClientError::Resolve { .. }
            | ClientError::ConnectTimeout { .. }
            | ClientError::HandshakeTimeout { .. }
            | ClientError::ConnectionLost { .. }
            | ClientError::RequestTimeout { .. }
    )
}

/// The error for a code in a response, if it is not `NONE`.
fn check(
    code: u16,
    message: Option<String>,
    context: impl FnOnce() -> String,
) -> Result<(), ClientError> {
    match ClientError::from_wire(code, context, message) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Groups partitions by topic, as the wire messages carry them.
pub(crate) fn by_topic<'a>(
    partitions: impl IntoIterator<Item = &'a TopicPartition>,
) -> Vec<TopicPartitions> {
    let mut topics: std::collections::BTreeMap<&str, Vec<u32>> = std::collections::BTreeMap::new();
    for partition in partitions {
        topics
            .entry(&partition.topic)
            .or_default()
            .push(partition.partition);
    }
    topics
        .into_iter()
        .map(|(topic, mut partitions)| {
            partitions.sort_unstable();
            partitions.dedup();
            TopicPartitions {
                topic: topic.to_owned(),
                partitions,
            }
        })
        .collect()
}

impl Coordinator {
    pub(crate) fn new(cluster: Arc<Cluster>, group: &str) -> Coordinator {
        Coordinator {
            cluster,
            group: group.to_owned(),
            addr: Mutex::new(None),
        }
    }

    pub(crate) fn group(&self) -> &str {
        &self.group
    }

    /// Forgets the cached address, so the next request looks it up.
    pub(crate) fn forget(&self) {
        *lock(&self.addr) = None;
    }

    /// Asks any broker where the group's coordinator is.
    async fn find(&self) -> Result<String, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let request = FindCoordinatorRequest {
            group: self.group.clone(),
        };
        let reply = connection
            .call(&request, Vec::new(), Duration::ZERO)
            .await?;
        let (response, _) = reply.decode()?;
        check(
            response.error_code.to_native(),
            response.error_message.as_ref().map(|m| m.to_string()),
            || format!("find the coordinator of group {}", self.group),
        )?;
        Ok(self
            .cluster
            .advertised_addr(&response.host, response.port.to_native()))
    }

    /// A connection to the coordinator, looking it up if needed.
    ///
    /// # Errors
    /// FindCoordinator's errors and connection errors.
    pub(crate) async fn connection(&self) -> Result<Connection, ClientError> {
        let cached = lock(&self.addr).clone();
        let addr = match cached {
            Some(addr) => addr,
            None => {
                let addr = self.find().await?;
                *lock(&self.addr) = Some(addr.clone());
                addr
            }
        };
        let result = self.cluster.connection_at(&addr).await;
        self.observe(result)
    }

    /// Forgets the coordinator if `result` says it moved or is unreachable.
    pub(crate) fn observe<T>(&self, result: Result<T, ClientError>) -> Result<T, ClientError> {
        if let Err(error) = &result
            && coordinator_moved(error)
        {
            self.forget();
        }
        result
    }

    /// Runs `attempt` until it succeeds, fails for good, or the attempts
    /// are spent; retriable errors wait a doubling backoff in between. For
    /// requests whose repetition is harmless.
    ///
    /// # Errors
    /// The last error.
    pub(crate) async fn retrying<T, F, Fut>(&self, mut attempt: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut backoff = RETRY_BACKOFF;
        let mut tries = 0;
        loop {
            tries += 1;
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_retriable() && tries < RETRY_ATTEMPTS => {
                    tracing::debug!(group = %self.group, %error, "coordinator request failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Joins or rejoins; waits up to `rebalance_timeout` for the rebalance
    /// to complete.
    ///
    /// # Errors
    /// The coordinator's refusal (for example `UNKNOWN_MEMBER_ID`,
    /// `REBALANCE_IN_PROGRESS`, `INVALID_GROUP_ID`) and connection errors.
    pub(crate) async fn join(
        &self,
        request: &JoinGroupRequest,
        rebalance_timeout: Duration,
    ) -> Result<Joined, ClientError> {
        let result = async {
            let connection = self.connection().await?;
            let reply = connection
                .call(request, Vec::new(), rebalance_timeout)
                .await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || format!("join group {}", self.group),
            )?;
            let assignment = response
                .assignment
                .iter()
                .flat_map(|topic| {
                    let name: Arc<str> = Arc::from(topic.topic.as_str());
                    topic
                        .partitions
                        .iter()
                        .map(move |p| TopicPartition::new(Arc::clone(&name), p.to_native()))
                })
                .collect();
            Ok(Joined {
                member_id: response.member_id.to_string(),
                generation: response.generation.to_native(),
                assignment,
                heartbeat_interval: Duration::from_millis(u64::from(
                    response.heartbeat_interval_ms.to_native(),
                )),
                members: response.members.to_native(),
            })
        }
        .await;
        self.observe(result)
    }

    /// Tells the coordinator the member is alive.
    ///
    /// # Errors
    /// `REBALANCE_IN_PROGRESS` (rejoin), `ILLEGAL_GENERATION` or
    /// `UNKNOWN_MEMBER_ID` (membership lost), connection errors.
    pub(crate) async fn heartbeat(
        &self,
        member_id: &str,
        generation: i32,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let result = async {
            let connection = self.connection().await?;
            let request = HeartbeatRequest {
                group: self.group.clone(),
                member_id: member_id.to_owned(),
                generation,
            };
            let reply = tokio::time::timeout(
                timeout,
                connection.call(&request, Vec::new(), Duration::ZERO),
            )
            .await
            .map_err(|_| ClientError::RequestTimeout {
                addr: connection.addr().to_owned(),
                api: corelog_wire::frame::ApiKey::Heartbeat,
                timeout,
            })??;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || format!("heartbeat to group {}", self.group),
            )
        }
        .await;
        self.observe(result)
    }

    /// Leaves the group at once, so its partitions move without waiting
    /// for the session timeout.
    ///
    /// # Errors
    /// The coordinator's refusal and connection errors.
    pub(crate) async fn leave(&self, member_id: &str) -> Result<(), ClientError> {
        let result = async {
            let connection = self.connection().await?;
            let request = LeaveGroupRequest {
                group: self.group.clone(),
                member_id: member_id.to_owned(),
            };
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || format!("leave group {}", self.group),
            )
        }
        .await;
        self.observe(result)
    }

    /// Commits offsets as `member`. Returns each partition's outcome; the
    /// offsets are durable when their outcome is `Ok`.
    ///
    /// # Errors
    /// A refusal of the whole commit (`ILLEGAL_GENERATION`,
    /// `UNKNOWN_MEMBER_ID`, `GROUP_NOT_EMPTY` for a manual commit while
    /// members are active, …) and connection errors.
    pub(crate) async fn commit(
        &self,
        member: &MemberGeneration,
        offsets: &[OffsetToCommit],
    ) -> Result<CommitResults, ClientError> {
        let mut topics: std::collections::BTreeMap<&str, Vec<OffsetCommitPartition>> =
            std::collections::BTreeMap::new();
        for offset in offsets {
            topics
                .entry(&offset.partition.topic)
                .or_default()
                .push(OffsetCommitPartition {
                    partition: offset.partition.partition,
                    next_offset: offset.next_offset.0,
                    metadata: offset.metadata.clone(),
                });
        }
        let request = OffsetCommitRequest {
            group: self.group.clone(),
            generation: member.generation,
            member_id: member.member_id.clone(),
            topics: topics
                .into_iter()
                .map(|(name, partitions)| OffsetCommitTopic {
                    name: name.to_owned(),
                    partitions,
                })
                .collect(),
        };
        let result = async {
            let connection = self.connection().await?;
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || {
                    format!(
                        "commit offsets of group {} in generation {}",
                        self.group, member.generation
                    )
                },
            )?;
            let addr = reply.addr().to_owned();
            Ok(offsets
                .iter()
                .map(|offset| {
                    let tp = &offset.partition;
                    let answer = response
                        .topics
                        .iter()
                        .filter(|topic| topic.name == *tp.topic)
                        .flat_map(|topic| topic.partitions.iter())
                        .find(|p| p.partition.to_native() == tp.partition);
                    let outcome = match answer {
                        None => Err(ClientError::Protocol {
                            addr: addr.clone(),
                            detail: format!("OffsetCommit response has no answer for {tp}"),
                        }),
                        Some(answer) => check(
                            answer.error_code.to_native(),
                            answer.error_message.as_ref().map(|m| m.to_string()),
                            || {
                                format!(
                                    "commit offset {} of {tp} for group {}",
                                    offset.next_offset, self.group
                                )
                            },
                        )
                        .map(|()| offset.next_offset),
                    };
                    (tp.clone(), outcome)
                })
                .collect())
        }
        .await;
        self.observe(result)
    }

    /// The group's committed offsets: of `partitions`, or of every
    /// partition it has one for (`None`).
    ///
    /// # Errors
    /// The coordinator's refusal and connection errors.
    pub(crate) async fn fetch_offsets(
        &self,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<CommittedOffset>, ClientError> {
        let request = OffsetFetchRequest {
            group: self.group.clone(),
            topics: partitions.map(by_topic),
        };
        let result = async {
            let connection = self.connection().await?;
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || format!("fetch committed offsets of group {}", self.group),
            )?;
            let mut committed = Vec::new();
            for topic in response.topics.iter() {
                let name: Arc<str> = Arc::from(topic.name.as_str());
                for answer in topic.partitions.iter() {
                    let tp = TopicPartition::new(Arc::clone(&name), answer.partition.to_native());
                    check(answer.error_code.to_native(), None, || {
                        format!(
                            "fetch the committed offset of {tp} for group {}",
                            self.group
                        )
                    })?;
                    let next_offset = answer.next_offset.to_native();
                    let committed_at = answer.committed_at_ms.to_native();
                    committed.push(CommittedOffset {
                        partition: tp,
                        next_offset: u64::try_from(next_offset).ok().map(Offset),
                        metadata: answer.metadata.as_ref().map(|m| m.to_string()),
                        committed_at: (committed_at >= 0).then_some(TimestampMs(committed_at)),
                    });
                }
            }
            committed.sort_by(|a, b| a.partition.cmp(&b.partition));
            Ok(committed)
        }
        .await;
        self.observe(result)
    }

    /// Writes an audit record through the coordinator; returns its offset
    /// in `__audit` once durable.
    ///
    /// # Errors
    /// The coordinator's refusal (for example `AUDIT_REASON_REQUIRED`) and
    /// connection errors.
    pub(crate) async fn write_audit(
        &self,
        request: &WriteAuditRequest,
    ) -> Result<Offset, ClientError> {
        let result = async {
            let connection = self.connection().await?;
            let reply = connection.call(request, Vec::new(), Duration::ZERO).await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || {
                    format!(
                        "write the audit record of {}/{}@{} for group {}",
                        request.topic, request.partition, request.offset, self.group
                    )
                },
            )?;
            let offset = response.audit_offset.to_native();
            u64::try_from(offset)
                .map(Offset)
                .map_err(|_| ClientError::Protocol {
                    addr: reply.addr().to_owned(),
                    detail: format!("WriteAudit succeeded with audit offset {offset}"),
                })
        }
        .await;
        self.observe(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_grouped_by_topic_sorted_and_deduplicated() {
        let partitions = [
            TopicPartition::new("b", 1),
            TopicPartition::new("a", 3),
            TopicPartition::new("a", 0),
            TopicPartition::new("a", 3),
        ];
        let grouped = by_topic(&partitions);
        assert_eq!(
            grouped,
            vec![
                TopicPartitions {
                    topic: "a".to_owned(),
                    partitions: vec![0, 3]
                },
                TopicPartitions {
                    topic: "b".to_owned(),
                    partitions: vec![1]
                },
            ]
        );
    }

    #[test]
    fn coordinator_errors_and_broken_connections_forget_the_coordinator() {
        let moved = ClientError::Broker {
            code: ErrorCode::NotCoordinator,
            context: String::new(),
            detail: None,
        };
        assert!(coordinator_moved(&moved));
        let lost = ClientError::ConnectionLost {
            addr: String::new(),
            reason: String::new(),
        };
        assert!(coordinator_moved(&lost));
        let stale = ClientError::Broker {
            code: ErrorCode::IllegalGeneration,
            context: String::new(),
            detail: None,
        };
        assert!(!coordinator_moved(&stale));
    }
}
