//! AlterCluster: change the cluster's shape — move a partition's
//! leadership to one of its replicas, put a broker in maintenance, move
//! a partition's replicas to other brokers, or decommission a broker.
//!
//! Sent by operators (`corelog partition elect-leader`, `corelog cluster
//! maintenance`, `corelog partition reassign`, `corelog cluster
//! decommission`) to any broker, which forwards the change to the controller
//! leader and answers once its own metadata shows it. Needs the cluster
//! `Alter` permission.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One change. The tags are part of the protocol: a new change takes a new
/// number, and a retired one is never reused.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
#[repr(u8)]
pub enum ClusterChange {
    /// Move the leadership of one partition to `to`, or to its preferred
    /// replica (the first) when `to` is `None`. The new leader is elected
    /// by a majority of the other replicas, as in any election, so no
    /// acknowledged record is lost; producers see a retriable `NOT_LEADER`
    /// for the appends in flight.
    ElectLeader {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The broker to lead.
        to: Option<u32>,
    } = 0,
    /// Put `broker` in maintenance (its leaderships move to other replicas
    /// and it takes none until disabled; it still replicates) or take it
    /// out. One broker at a time.
    SetMaintenance {
        /// The broker.
        broker: u32,
        /// In maintenance or not.
        enabled: bool,
    } = 1,
    /// Start moving one partition to the brokers `replicas` (preferred
    /// leader first): each new one catches up as a learner, then the set
    /// changes one replica at a time. Answered once the move started.
    Reassign {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The brokers to hold it.
        replicas: Vec<u32>,
        /// Bytes a second each new replica copies at most; 0 for no limit.
        throttle_bytes_per_s: u64,
    } = 2,
    /// Turn a partition's move back to the set it started from.
    CancelReassignment {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    } = 3,
    /// Start decommissioning `broker` (`enabled`): it takes no new
    /// replica, and the controller moves each of its replicas to another
    /// broker, `max_moves` at a time; or recommission it, turning back the
    /// moves still running. Answered once the broker's mark changed.
    SetDecommission {
        /// The broker.
        broker: u32,
        /// Decommission (true) or recommission (false).
        enabled: bool,
        /// Bytes a second each new replica copies at most; 0 for no limit.
        throttle_bytes_per_s: u64,
        /// Moves off the broker running at once; at least 1.
        max_moves: u16,
    } = 4,
}

/// Asks for one change.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterClusterRequest {
    /// The change.
    pub change: ClusterChange,
    /// How long the broker waits for the change to show before answering
    /// `REQUEST_TIMED_OUT` (the change may still complete).
    pub timeout_ms: u32,
}

/// The change's outcome.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterClusterResponse {
    /// `NONE`, or why the change was refused or did not complete
    /// (`UNKNOWN_TOPIC_OR_PARTITION`, `REPLICA_NOT_IN_SYNC`,
    /// `BROKER_IN_MAINTENANCE`, `BROKER_FENCED`, `REQUEST_TIMED_OUT`, …).
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// For `ElectLeader`: the partition's leader when answering.
    pub leader: Option<u32>,
    /// For `ElectLeader`: its epoch. For `SetMaintenance`: how many
    /// partitions the broker still leads (those no other replica can take).
    /// For `SetDecommission`: how many partitions still hold a replica on
    /// the broker (decommissioning), or how many moves were turned back
    /// (recommissioning).
    pub value: u32,
}

api!(ApiKey::AlterCluster, AlterClusterRequest => AlterClusterResponse);
no_raw_section!(
    AlterClusterRequest,
    ArchivedAlterClusterRequest,
    AlterClusterResponse,
    ArchivedAlterClusterResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, few, name, noise, optional_name,
        round_trip_request, round_trip_response,
    };

    fn change() -> impl Strategy<Value = ClusterChange> {
        prop_oneof![
            (name(), any::<u32>(), any::<Option<u32>>()).prop_map(|(topic, partition, to)| {
                ClusterChange::ElectLeader {
                    topic,
                    partition,
                    to,
                }
            }),
            (any::<u32>(), any::<bool>())
                .prop_map(|(broker, enabled)| ClusterChange::SetMaintenance { broker, enabled }),
            (name(), any::<u32>(), few(any::<u32>()), any::<u64>()).prop_map(
                |(topic, partition, replicas, throttle_bytes_per_s)| ClusterChange::Reassign {
                    topic,
                    partition,
                    replicas,
                    throttle_bytes_per_s,
                }
            ),
            (name(), any::<u32>()).prop_map(|(topic, partition)| {
                ClusterChange::CancelReassignment { topic, partition }
            }),
            (any::<u32>(), any::<bool>(), any::<u64>(), any::<u16>()).prop_map(
                |(broker, enabled, throttle_bytes_per_s, max_moves)| {
                    ClusterChange::SetDecommission {
                        broker,
                        enabled,
                        throttle_bytes_per_s,
                        max_moves,
                    }
                }
            ),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = AlterClusterRequest> {
        (change(), any::<u32>())
            .prop_map(|(change, timeout_ms)| AlterClusterRequest { change, timeout_ms })
    }

    pub(crate) fn response() -> impl Strategy<Value = AlterClusterResponse> {
        (
            any::<u16>(),
            optional_name(),
            any::<Option<u32>>(),
            any::<u32>(),
        )
            .prop_map(
                |(error_code, error_message, leader, value)| AlterClusterResponse {
                    error_code,
                    error_message,
                    leader,
                    value,
                },
            )
    }

    #[test]
    fn change_tags_are_pinned() {
        let elect = ClusterChange::ElectLeader {
            topic: "t".to_owned(),
            partition: 0,
            to: None,
        };
        assert_eq!(archived_tag(&elect), 0);
        let maintenance = ClusterChange::SetMaintenance {
            broker: 1,
            enabled: true,
        };
        assert_eq!(archived_tag(&maintenance), 1);
        let reassign = ClusterChange::Reassign {
            topic: "t".to_owned(),
            partition: 0,
            replicas: vec![1],
            throttle_bytes_per_s: 0,
        };
        assert_eq!(archived_tag(&reassign), 2);
        let cancel = ClusterChange::CancelReassignment {
            topic: "t".to_owned(),
            partition: 0,
        };
        assert_eq!(archived_tag(&cancel), 3);
        let decommission = ClusterChange::SetDecommission {
            broker: 4,
            enabled: true,
            throttle_bytes_per_s: 0,
            max_moves: 4,
        };
        assert_eq!(archived_tag(&decommission), 4);
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
