//! The wire forms of the replication messages the controller and the
//! replicas share: the partition key, and election queries with their
//! answers as `ReplicaQuery` carries them. Conversions only; the messages
//! are `corelog_wire`'s, the meaning this crate's.

use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_query::{
    QueryResult as WireQueryResult, ReplicaQueryRequest, ReplicaQueryResponse,
};
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::ids::{PartitionKey, ReplicaId};
use crate::message::{Query, QueryAnswer, QueryResult};

/// The replication key of partition `partition` of topic `topic_id`: the
/// topic id in the high 32 bits, the partition in the low ones. Topic ids
/// are allocated sequentially by the controller, far below 2^32.
#[must_use]
pub fn partition_key(topic_id: u64, partition: u32) -> PartitionKey {
    PartitionKey((topic_id << 32) | u64::from(partition))
}

/// A received `ReplicaQuery` as the state machine's [`Query`].
#[must_use]
pub fn query_from_wire(request: &ReplicaQueryRequest) -> Query {
    Query {
        partition: partition_key(request.topic_id, request.partition),
        new_epoch: LeaderEpoch(request.new_epoch),
    }
}

/// A replica's answer to an election query.
#[must_use]
pub fn answer_to_wire(answer: &QueryAnswer) -> ReplicaQueryResponse {
    let result = match answer.result {
        QueryResult::State {
            last_epoch,
            log_end,
        } => WireQueryResult::State {
            last_epoch: last_epoch.map(|epoch| epoch.0),
            log_end: log_end.0,
        },
        QueryResult::Fenced { fenced_epoch } => WireQueryResult::Fenced {
            fenced_epoch: fenced_epoch.0,
        },
    };
    ReplicaQueryResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        result,
    }
}

/// A replica's wire answer as the election counts it; `None` for an answer
/// that does not count (an error code, or "not a replica").
#[must_use]
pub fn answer_from_wire(
    key: PartitionKey,
    epoch: LeaderEpoch,
    from: ReplicaId,
    response: &ReplicaQueryResponse,
) -> Option<QueryAnswer> {
    if response.error_code != ErrorCode::None.code() {
        return None;
    }
    let result = match response.result {
        WireQueryResult::State {
            last_epoch,
            log_end,
        } => QueryResult::State {
            last_epoch: last_epoch.map(LeaderEpoch),
            log_end: Offset(log_end),
        },
        WireQueryResult::Fenced { fenced_epoch } => QueryResult::Fenced {
            fenced_epoch: LeaderEpoch(fenced_epoch),
        },
        WireQueryResult::NotReplica => return None,
    };
    Some(QueryAnswer {
        partition: key,
        epoch,
        from,
        result,
    })
}

/// A refused election query.
#[must_use]
pub fn query_refusal(code: ErrorCode, message: String) -> ReplicaQueryResponse {
    ReplicaQueryResponse {
        error_code: code.code(),
        error_message: Some(message),
        result: WireQueryResult::NotReplica,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_keys_are_distinct_per_topic_and_partition() {
        assert_ne!(partition_key(1, 0), partition_key(0, 1));
        assert_eq!(partition_key(3, 7).0 >> 32, 3);
        assert_eq!(partition_key(3, 7).0 & 0xffff_ffff, 7);
    }

    #[test]
    fn answers_cross_the_wire_unchanged_and_refusals_do_not_count() {
        let key = partition_key(2, 1);
        let epoch = LeaderEpoch(6);
        for result in [
            QueryResult::State {
                last_epoch: Some(LeaderEpoch(5)),
                log_end: Offset(40),
            },
            QueryResult::State {
                last_epoch: None,
                log_end: Offset(0),
            },
            QueryResult::Fenced {
                fenced_epoch: LeaderEpoch(7),
            },
        ] {
            let answer = QueryAnswer {
                partition: key,
                epoch,
                from: ReplicaId(3),
                result,
            };
            assert_eq!(
                answer_from_wire(key, epoch, ReplicaId(3), &answer_to_wire(&answer)),
                Some(answer)
            );
        }
        let refused = query_refusal(ErrorCode::NotLeader, "no replica".to_owned());
        assert_eq!(answer_from_wire(key, epoch, ReplicaId(3), &refused), None);
        let query = query_from_wire(&ReplicaQueryRequest {
            topic_id: 2,
            partition: 1,
            new_epoch: 6,
        });
        assert_eq!(
            query,
            Query {
                partition: key,
                new_epoch: epoch
            }
        );
    }
}
