//! Moving a partition's replicas to other brokers
//! ([`Admin::reassign_partition`]) and turning a move back
//! ([`Admin::cancel_reassignment`]), spoken with `AlterCluster`; and
//! their progress ([`Admin::reassignments`]).

use std::collections::BTreeMap;

use corelog_wire::message::alter_cluster::ClusterChange;
use serde::Serialize;

use super::{Admin, PartitionMove, PartitionState};
use crate::error::ClientError;

impl Admin {
    /// Starts moving `partition` of `topic` to the brokers `replicas`
    /// (preferred leader first) and returns once the move started; it goes
    /// on in the cluster (watch the partition's replicas in
    /// [`Admin::describe_cluster`]). Each new replica copies the log as a
    /// learner, at most `throttle_bytes_per_s` (0: no limit), outside the
    /// commit quorum; then the set changes one replica at a time, each
    /// change an election, so no acknowledged record is lost.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`; `REASSIGNMENT_IN_PROGRESS`;
    /// `INVALID_REQUEST` (an unknown or repeated broker, or the set it has
    /// already); `BROKER_FENCED`; `CLUSTER_ADMIN_REQUIRED`; connection
    /// errors.
    pub async fn reassign_partition(
        &self,
        topic: &str,
        partition: u32,
        replicas: &[u32],
        throttle_bytes_per_s: u64,
    ) -> Result<(), ClientError> {
        let change = ClusterChange::Reassign {
            topic: topic.to_owned(),
            partition,
            replicas: replicas.to_vec(),
            throttle_bytes_per_s,
        };
        self.alter_cluster(change, || format!("{topic}/{partition}"))
            .await
            .map(drop)
    }

    /// Turns the move of `partition` of `topic` back to the replicas it
    /// started from (at once if no replica changed yet).
    ///
    /// # Errors
    /// `NO_REASSIGNMENT_IN_PROGRESS`; `UNKNOWN_TOPIC_OR_PARTITION`;
    /// `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn cancel_reassignment(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<(), ClientError> {
        let change = ClusterChange::CancelReassignment {
            topic: topic.to_owned(),
            partition,
        };
        self.alter_cluster(change, || format!("{topic}/{partition}"))
            .await
            .map(drop)
    }
}

/// Moves a decommission runs at once when the operator names no other
/// number: enough to keep several learners copying, few enough that the
/// leaders' outgoing bandwidth stays mostly for their followers.
pub const DEFAULT_DECOMMISSION_MOVES: u16 = 4;

impl Admin {
    /// Starts decommissioning `broker`: it takes no new replica, and the
    /// controller moves each of its replicas to another broker (rack-aware,
    /// the fewest replicas first), `max_moves` at a time, each new replica
    /// copying at most `throttle_bytes_per_s` (0: no limit). Works the same
    /// for a dead broker: its replicas are rebuilt from the surviving ones.
    /// Returns how many partitions still hold a replica on it; watch them
    /// drain with [`Admin::describe_cluster`].
    ///
    /// # Errors
    /// `INVALID_REQUEST` (an unknown broker, `max_moves` 0, or too few
    /// brokers would stay for a partition's replicas);
    /// `CLUSTER_ADMIN_REQUIRED`; connection errors. A broker of a release
    /// without decommissioning refuses the request as malformed.
    pub async fn decommission_broker(
        &self,
        broker: u32,
        throttle_bytes_per_s: u64,
        max_moves: u16,
    ) -> Result<u32, ClientError> {
        let change = ClusterChange::SetDecommission {
            broker,
            enabled: true,
            throttle_bytes_per_s,
            max_moves,
        };
        let altered = self
            .alter_cluster(change, || format!("broker {broker}"))
            .await?;
        Ok(altered.value)
    }

    /// Recommissions `broker`: it takes replicas again, and the moves
    /// still running off it turn back (those that finished stay). Returns
    /// how many moves turned back.
    ///
    /// # Errors
    /// As [`Admin::decommission_broker`].
    pub async fn recommission_broker(&self, broker: u32) -> Result<u32, ClientError> {
        let change = ClusterChange::SetDecommission {
            broker,
            enabled: false,
            throttle_bytes_per_s: 0,
            max_moves: 0,
        };
        let altered = self
            .alter_cluster(change, || format!("broker {broker}"))
            .await?;
        Ok(altered.value)
    }
}

/// A move in progress and how far its new replicas got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReassignmentProgress {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The replica set now, preferred leader first.
    pub replicas: Vec<u32>,
    /// The leader now, if any.
    pub leader: Option<u32>,
    /// Where the move goes and where it started.
    pub moving: PartitionMove,
    /// Each broker copying the log now.
    pub learners: Vec<LearnerProgress>,
    /// Bytes the learners hold, summed.
    pub bytes_copied: u64,
    /// Bytes the learners still have to copy, summed (estimated from the
    /// leader's average record size).
    pub bytes_left: u64,
    /// Time left for the copies at their average rate since the move
    /// started; `None` when that cannot be told yet (nothing copied, or
    /// a learner could not be asked). The replica-set changes after the
    /// copies take one election each.
    pub eta_ms: Option<u64>,
}

/// How far one learner got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LearnerProgress {
    /// The learner's node id.
    pub broker: u32,
    /// Bytes it holds; `None` when it could not be asked.
    pub bytes_copied: Option<u64>,
    /// Bytes still to copy; `None` when it or the leader could not be
    /// asked.
    pub bytes_left: Option<u64>,
    /// Why it could not be asked, if it could not.
    pub unknown: Option<String>,
}

impl Admin {
    /// Every move in progress, with the bytes each learner copied and has
    /// left (asked of the partition's leader and of each learner) and an
    /// ETA.
    ///
    /// # Errors
    /// Connection errors when no broker answers; `UNSUPPORTED_VERSION`
    /// from brokers that do not describe moves is not an error: they list
    /// none. A learner or leader that cannot be asked leaves its figures
    /// unknown.
    pub async fn reassignments(&self) -> Result<Vec<ReassignmentProgress>, ClientError> {
        let status = self.describe_cluster(None).await?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
            });
        let moving = status
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .any(|partition| partition.moving.is_some());
        // Leaders and learners are asked directly: the client's metadata
        // must know every broker (it may predate some, or not be fetched
        // yet).
        if moving && let Err(error) = self.cluster.refresh_metadata(&[]).await {
            tracing::debug!(%error, "metadata refresh before asking leaders and learners");
        }
        let mut moves = Vec::new();
        // Each broker describes each topic once, whatever the number of
        // its partitions moving.
        let mut described = Described::new();
        for topic in &status.topics {
            for partition in &topic.partitions {
                let Some(moving) = &partition.moving else {
                    continue;
                };
                let leader_state = match partition.leader {
                    Some(leader) => {
                        self.state_on(&mut described, leader, &topic.name, partition.partition)
                            .await
                    }
                    None => Err("the partition has no leader".to_owned()),
                };
                let mut learners = Vec::new();
                for &learner in &moving.learners {
                    let learner_state = self
                        .state_on(&mut described, learner, &topic.name, partition.partition)
                        .await;
                    learners.push(match (&leader_state, learner_state) {
                        (Ok(leader), Ok(learner_state)) => {
                            let (copied, left) = copy_progress(leader, &learner_state);
                            LearnerProgress {
                                broker: learner,
                                bytes_copied: Some(copied),
                                bytes_left: Some(left),
                                unknown: None,
                            }
                        }
                        (Err(error), learner_state) => LearnerProgress {
                            broker: learner,
                            bytes_copied: learner_state.ok().map(|state| copied(&state)),
                            bytes_left: None,
                            unknown: Some(format!("leader: {error}")),
                        },
                        (Ok(_), Err(error)) => LearnerProgress {
                            broker: learner,
                            bytes_copied: None,
                            bytes_left: None,
                            unknown: Some(error),
                        },
                    });
                }
                let elapsed_ms =
                    u64::try_from(now_ms.saturating_sub(moving.started_at_ms)).unwrap_or(0);
                moves.push(ReassignmentProgress {
                    topic: topic.name.clone(),
                    partition: partition.partition,
                    replicas: partition.replicas.clone(),
                    leader: partition.leader,
                    moving: moving.clone(),
                    bytes_copied: learners.iter().filter_map(|l| l.bytes_copied).sum(),
                    bytes_left: learners.iter().filter_map(|l| l.bytes_left).sum(),
                    eta_ms: eta_ms(&learners, elapsed_ms),
                    learners,
                });
            }
        }
        Ok(moves)
    }
}

/// What each broker said of each topic's partitions, by (broker, topic).
type Described = BTreeMap<(u32, String), Result<Vec<PartitionState>, String>>;

impl Admin {
    /// `partition` of `topic` as broker `node` holds it, asking the broker
    /// only if `described` does not hold its answer yet.
    async fn state_on(
        &self,
        described: &mut Described,
        node: u32,
        topic: &str,
        partition: u32,
    ) -> Result<PartitionState, String> {
        let key = (node, topic.to_owned());
        if !described.contains_key(&key) {
            let answer = self
                .describe_topic_on(node, topic)
                .await
                .map(|description| description.partition_states)
                .map_err(|error| error.to_string());
            described.insert(key.clone(), answer);
        }
        let states = described
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Ok(Vec::new()))?;
        states
            .into_iter()
            .find(|state| state.partition == partition)
            .ok_or_else(|| format!("broker {node} did not describe {topic}/{partition}"))
    }
}

/// Bytes a learner holds; a broker whose replica has not opened yet
/// (no segment) holds none.
fn copied(learner: &PartitionState) -> u64 {
    if learner.segment_count == 0 {
        0
    } else {
        learner.size_bytes
    }
}

/// Bytes a learner holds and bytes it still has to copy: the offsets it
/// lacks of the leader's log times the leader's average record size.
fn copy_progress(leader: &PartitionState, learner: &PartitionState) -> (u64, u64) {
    let span = leader
        .log_end_offset
        .saturating_sub(leader.log_start_offset);
    if span == 0 {
        return (copied(learner), 0);
    }
    let learner_end = if learner.segment_count == 0 {
        leader.log_start_offset
    } else {
        learner.log_end_offset.max(leader.log_start_offset)
    };
    let missing = leader.log_end_offset.saturating_sub(learner_end).min(span);
    let left = u128::from(leader.size_bytes) * u128::from(missing) / u128::from(span);
    (copied(learner), u64::try_from(left).unwrap_or(u64::MAX))
}

/// The slowest learner's time left at its average rate over `elapsed_ms`;
/// 0 when nothing is left, `None` when a learner's figures are unknown or
/// it copied nothing yet.
fn eta_ms(learners: &[LearnerProgress], elapsed_ms: u64) -> Option<u64> {
    let mut eta = 0u64;
    for learner in learners {
        let (Some(copied), Some(left)) = (learner.bytes_copied, learner.bytes_left) else {
            return None;
        };
        if left == 0 {
            continue;
        }
        if copied == 0 || elapsed_ms == 0 {
            return None;
        }
        let time = u128::from(left) * u128::from(elapsed_ms) / u128::from(copied);
        eta = eta.max(u64::try_from(time).unwrap_or(u64::MAX));
    }
    Some(eta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(log_start: u64, log_end: u64, size_bytes: u64, segment_count: u32) -> PartitionState {
        PartitionState {
            partition: 0,
            log_start_offset: log_start,
            high_watermark: log_end,
            log_end_offset: log_end,
            size_bytes,
            segment_count,
        }
    }

    fn learner(copied: Option<u64>, left: Option<u64>) -> LearnerProgress {
        LearnerProgress {
            broker: 4,
            bytes_copied: copied,
            bytes_left: left,
            unknown: None,
        }
    }

    #[test]
    fn bytes_left_are_the_missing_offsets_at_the_leaders_average_size() {
        // 1,000 records of 100 bytes from offset 500; the learner has 400.
        let leader = state(500, 1_500, 100_000, 3);
        assert_eq!(
            copy_progress(&leader, &state(500, 900, 40_000, 1)),
            (40_000, 60_000)
        );
        // Caught up.
        assert_eq!(
            copy_progress(&leader, &state(500, 1_500, 100_000, 3)),
            (100_000, 0)
        );
        // Not opened yet: a broker without the replica describes the
        // leader's bounds and no segment; it holds nothing.
        assert_eq!(
            copy_progress(&leader, &state(500, 1_500, 0, 0)),
            (0, 100_000)
        );
        // An empty partition has nothing to copy.
        assert_eq!(
            copy_progress(&state(7, 7, 0, 1), &state(0, 0, 0, 0)),
            (0, 0)
        );
    }

    #[test]
    fn the_eta_is_the_slowest_learners_time_left_at_its_average_rate() {
        // 40 KB in 4 s: 10 KB/s; 60 KB left: 6 s. The other is done.
        let learners = [
            learner(Some(40_000), Some(60_000)),
            learner(Some(9), Some(0)),
        ];
        assert_eq!(eta_ms(&learners, 4_000), Some(6_000));
        assert_eq!(eta_ms(&[learner(Some(5), Some(0))], 0), Some(0));
        assert_eq!(eta_ms(&[learner(Some(0), Some(10))], 4_000), None);
        assert_eq!(eta_ms(&[learner(None, None)], 4_000), None);
        assert_eq!(eta_ms(&[], 4_000), Some(0));
    }
}
