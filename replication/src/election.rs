//! The controller's election decision, pure: given the answers to the
//! queries of one election round, who leads the new epoch.
//!
//! Why it preserves the committed prefix: a record is committed only when a
//! majority holds it durably (with the committing leader's marker, so their
//! last epoch is at least the committing epoch). Any majority of answers
//! shares a replica with that majority, and that replica answered only
//! after promising the new epoch, so after it stopped acknowledging older
//! leaders; its durable log, as answered, holds the record. The replica with
//! the greatest `(last_epoch, log_end)` holds everything that one holds
//! (the log matching property), so the winner holds every committed record.
//! Fewer than a majority of answers and nothing can be concluded: the
//! partition stays leaderless. There is no unclean election.

use std::collections::BTreeMap;

use corelog_wire::types::{LeaderEpoch, Offset};

use crate::ids::ReplicaId;
use crate::message::{QueryAnswer, QueryResult};

/// The outcome of an election round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Publish `leader` for `epoch`.
    Elect {
        /// The new leader.
        leader: ReplicaId,
        /// The round's epoch.
        epoch: LeaderEpoch,
    },
    /// Fewer than a majority of the replica set answered with their state:
    /// no leader; the partition refuses appends (`NOT_ENOUGH_REPLICAS`)
    /// until a later round succeeds.
    NoQuorum {
        /// How many distinct members answered with their state.
        answered: usize,
        /// How many are needed.
        needed: usize,
    },
    /// Some replica had already promised `fenced_epoch`, at or above the
    /// round's epoch (a previous round's query reached it). Only returned
    /// when there is no quorum; the next round must use an epoch above
    /// `fenced_epoch`. (An addition to the spec's two outcomes.)
    Superseded {
        /// The highest epoch a replica reported promising.
        fenced_epoch: LeaderEpoch,
    },
}

/// Decides the round for `epoch` over the replica set `replicas` (in
/// preference order: the first is the preferred leader) from the answers
/// received so far.
///
/// Counts only `State` answers to this round's `epoch` from distinct
/// members of the set (duplicates and strangers are ignored). With a
/// majority of the set, elects the greatest `(last_epoch, log_end)`, ties
/// to the earlier replica in `replicas`. Without one: `Superseded` if some
/// answer was `Fenced` (retry with a higher epoch), else `NoQuorum`.
#[must_use]
pub fn decide(epoch: LeaderEpoch, replicas: &[ReplicaId], answers: &[QueryAnswer]) -> Decision {
    let mut states: BTreeMap<ReplicaId, (Option<LeaderEpoch>, Offset)> = BTreeMap::new();
    let mut fenced: Option<LeaderEpoch> = None;
    for answer in answers {
        if answer.epoch != epoch || !replicas.contains(&answer.from) {
            continue;
        }
        match answer.result {
            QueryResult::State {
                last_epoch,
                log_end,
            } => {
                states.insert(answer.from, (last_epoch, log_end));
            }
            QueryResult::Fenced { fenced_epoch } => {
                fenced = fenced.max(Some(fenced_epoch));
            }
        }
    }
    let mut members = replicas.to_vec();
    members.sort_unstable();
    members.dedup();
    let needed = members.len() / 2 + 1;
    if states.len() < needed {
        return match fenced {
            Some(fenced_epoch) => Decision::Superseded { fenced_epoch },
            None => Decision::NoQuorum {
                answered: states.len(),
                needed,
            },
        };
    }
    let mut best: Option<(ReplicaId, (Option<LeaderEpoch>, Offset))> = None;
    for replica in replicas {
        let Some(state) = states.get(replica) else {
            continue;
        };
        // Strictly greater: an equal state later in the list loses the tie.
        if best.is_none_or(|(_, best_state)| *state > best_state) {
            best = Some((*replica, *state));
        }
    }
    match best {
        Some((leader, _)) => Decision::Elect { leader, epoch },
        None => Decision::NoQuorum {
            answered: 0,
            needed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_wire::types::PartitionId;
    use proptest::prelude::*;

    fn state(from: u32, epoch: u32, last_epoch: Option<u32>, log_end: u64) -> QueryAnswer {
        QueryAnswer {
            partition: PartitionId {
                topic_id: 1,
                partition: 0,
            },
            epoch: LeaderEpoch(epoch),
            from: ReplicaId(from),
            result: QueryResult::State {
                last_epoch: last_epoch.map(LeaderEpoch),
                log_end: Offset(log_end),
            },
        }
    }

    fn set(ids: &[u32]) -> Vec<ReplicaId> {
        ids.iter().copied().map(ReplicaId).collect()
    }

    #[test]
    fn a_minority_elects_nobody() {
        let decision = decide(
            LeaderEpoch(4),
            &set(&[1, 2, 3]),
            &[state(2, 4, Some(3), 90)],
        );
        assert_eq!(
            decision,
            Decision::NoQuorum {
                answered: 1,
                needed: 2
            }
        );
    }

    #[test]
    fn duplicates_strangers_and_old_rounds_do_not_make_a_majority() {
        let answers = [
            state(2, 4, Some(3), 90),
            state(2, 4, Some(3), 90),
            state(9, 4, Some(3), 99),
            state(3, 3, Some(3), 99),
        ];
        assert!(matches!(
            decide(LeaderEpoch(4), &set(&[1, 2, 3]), &answers),
            Decision::NoQuorum { answered: 1, .. }
        ));
    }

    #[test]
    fn the_last_epoch_wins_over_a_longer_log() {
        let answers = [state(1, 5, Some(3), 100), state(3, 5, Some(4), 20)];
        assert_eq!(
            decide(LeaderEpoch(5), &set(&[1, 2, 3]), &answers),
            Decision::Elect {
                leader: ReplicaId(3),
                epoch: LeaderEpoch(5)
            }
        );
    }

    #[test]
    fn the_longer_log_wins_within_an_epoch_and_ties_go_to_the_preferred() {
        let longer = [state(1, 5, Some(4), 30), state(3, 5, Some(4), 31)];
        assert!(matches!(
            decide(LeaderEpoch(5), &set(&[1, 2, 3]), &longer),
            Decision::Elect {
                leader: ReplicaId(3),
                ..
            }
        ));
        let tied = [state(3, 5, Some(4), 31), state(2, 5, Some(4), 31)];
        assert!(matches!(
            decide(LeaderEpoch(5), &set(&[2, 1, 3]), &tied),
            Decision::Elect {
                leader: ReplicaId(2),
                ..
            }
        ));
    }

    #[test]
    fn a_fenced_answer_without_quorum_asks_for_a_higher_epoch() {
        let answers = [
            state(1, 5, Some(4), 30),
            QueryAnswer {
                partition: PartitionId {
                    topic_id: 1,
                    partition: 0,
                },
                epoch: LeaderEpoch(5),
                from: ReplicaId(2),
                result: QueryResult::Fenced {
                    fenced_epoch: LeaderEpoch(7),
                },
            },
        ];
        assert_eq!(
            decide(LeaderEpoch(5), &set(&[1, 2, 3]), &answers),
            Decision::Superseded {
                fenced_epoch: LeaderEpoch(7)
            }
        );
    }

    proptest! {
        /// Against a model: elected iff a majority of distinct members
        /// answered this round; the winner's state is the maximum, and no
        /// earlier replica in preference order has the same state.
        #[test]
        fn decide_matches_the_model(
            size in 1usize..6,
            raw in proptest::collection::vec((0u32..7, 3u32..6, proptest::option::of(0u32..4), 0u64..5), 0..12),
        ) {
            let replicas: Vec<ReplicaId> = (0..size as u32).map(ReplicaId).collect();
            let answers: Vec<QueryAnswer> = raw
                .iter()
                .map(|&(from, epoch, last, end)| state(from, epoch, last, end))
                .collect();
            let round = LeaderEpoch(4);
            let mut latest = BTreeMap::new();
            for answer in &answers {
                if answer.epoch == round && (answer.from.0 as usize) < size {
                    latest.insert(answer.from, answer.result);
                }
            }
            let decision = decide(round, &replicas, &answers);
            if latest.len() < size / 2 + 1 {
                prop_assert!(matches!(decision, Decision::NoQuorum { .. }), "{:?}", decision);
            } else {
                let key = |result: &QueryResult| match *result {
                    QueryResult::State { last_epoch, log_end } => (last_epoch, log_end),
                    QueryResult::Fenced { .. } => unreachable!(),
                };
                let max = latest.values().map(key).max().unwrap();
                let first = replicas.iter().find(|r| latest.get(r).map(key) == Some(max)).unwrap();
                prop_assert_eq!(decision, Decision::Elect { leader: *first, epoch: round });
            }
        }
    }
}
