//! ReplicaQuery: before an election, the controller fences a partition's
//! replicas at a new epoch and asks each for its log position.
//!
//! Inter-broker: spoken by the controller leader to brokers, never by
//! clients.
//!
//! This is the wire form of the replication crate's `Query` and
//! `QueryAnswer` (see the replication spec, "Election"). A replica that
//! answers [`QueryResult::State`] has durably promised `new_epoch` first, so
//! an old leader can no longer commit; the controller picks the replica with
//! the greatest `(last_epoch, log_end)` among answers from a majority.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Fences one replica at `new_epoch` and asks for its position.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReplicaQueryRequest {
    /// The partition's topic, by id.
    pub topic_id: u64,
    /// Partition index.
    pub partition: u32,
    /// The epoch the election will give the new leader.
    pub new_epoch: u32,
}

/// What a replica answered. The tags are part of the protocol.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
#[repr(u8)]
pub enum QueryResult {
    /// The replica promised `new_epoch` (durably, before answering) and
    /// reports its log.
    State {
        /// Epoch of the replica's last durable record; `None` for an empty
        /// log.
        last_epoch: Option<u32>,
        /// End of the replica's durable log: only what survives a crash may
        /// decide an election.
        log_end: u64,
    } = 0,
    /// The replica already promised `new_epoch` or a higher one; the
    /// controller retries with an epoch above `fenced_epoch`.
    Fenced {
        /// The highest epoch the replica promised.
        fenced_epoch: u32,
    } = 1,
    /// This broker holds no replica of the partition.
    NotReplica = 2,
}

/// A replica's answer to a query.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReplicaQueryResponse {
    /// `NONE` (0) when the replica handled the query, with the outcome in
    /// `result`; otherwise (for example `STORAGE_ERROR`: the promise could
    /// not be made durable) the replica counts as not answering, and
    /// `result` means nothing.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// The outcome, with `NONE`.
    pub result: QueryResult,
}

api!(ApiKey::ReplicaQuery, ReplicaQueryRequest => ReplicaQueryResponse);
no_raw_section!(
    ReplicaQueryRequest,
    ArchivedReplicaQueryRequest,
    ReplicaQueryResponse,
    ArchivedReplicaQueryResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = ReplicaQueryRequest> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(topic_id, partition, new_epoch)| {
            ReplicaQueryRequest {
                topic_id,
                partition,
                new_epoch,
            }
        })
    }

    fn result() -> impl Strategy<Value = QueryResult> {
        prop_oneof![
            (any::<Option<u32>>(), any::<u64>()).prop_map(|(last_epoch, log_end)| {
                QueryResult::State {
                    last_epoch,
                    log_end,
                }
            }),
            any::<u32>().prop_map(|fenced_epoch| QueryResult::Fenced { fenced_epoch }),
            Just(QueryResult::NotReplica),
        ]
    }

    pub(crate) fn response() -> impl Strategy<Value = ReplicaQueryResponse> {
        (any::<u16>(), optional_name(), result()).prop_map(|(error_code, error_message, result)| {
            ReplicaQueryResponse {
                error_code,
                error_message,
                result,
            }
        })
    }

    /// A renumbered tag would make an old controller misread an answer.
    #[test]
    fn result_tags_are_pinned() {
        let state = QueryResult::State {
            last_epoch: Some(1),
            log_end: 5,
        };
        assert_eq!(archived_tag(&state), 0);
        assert_eq!(archived_tag(&QueryResult::Fenced { fenced_epoch: 2 }), 1);
        assert_eq!(archived_tag(&QueryResult::NotReplica), 2);
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }
    }
}
