//! PartitionReport: a broker tells the controller leader, about every
//! partition it leads, which replicas are in sync.
//!
//! Inter-broker: spoken by brokers to the controller, never by clients.
//!
//! Each report is whole (every partition the broker leads, in the epoch it
//! leads it), so the controller keeps only the latest per broker and a lost
//! report costs nothing but freshness. The view is for people and metrics
//! (`DescribeCluster`, the under-replicated series) and for pacing a
//! replica move's steps: commitment counts a majority of acknowledgements
//! and never reads it.
//!
//! Version 1 adds, per partition, whether the leader has committed its
//! epoch: a move's next step waits for it instead of querying (and so
//! fencing) the replicas to find out.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One partition the reporting broker leads.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct LedPartition {
    /// The topic's id.
    pub topic_id: u64,
    /// The partition.
    pub partition: u32,
    /// The epoch the broker leads it in; a report of an older epoch than
    /// the published one is not used.
    pub leader_epoch: u32,
    /// The replicas in sync, the leader included.
    pub in_sync: Vec<u32>,
}

/// Every partition a broker leads, with its in-sync replicas.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionReportRequest {
    /// The reporting broker's node id.
    pub node_id: u32,
    /// The incarnation it registered with: a report from an earlier
    /// process of the node is not used.
    pub incarnation: u64,
    /// The partitions it leads.
    pub partitions: Vec<LedPartition>,
}

/// Whether the report was taken.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionReportResponse {
    /// `NONE` (0); `NOT_CONTROLLER` (report to `leader_hint`),
    /// `STALE_BROKER_INCARNATION`, …
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// With `NOT_CONTROLLER`: node id of the controller leader, if the
    /// answering voter knows it.
    pub leader_hint: Option<u32>,
}

/// [`LedPartition`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct LedPartitionV1 {
    /// The version 0 fields.
    pub led: LedPartition,
    /// The leader's high watermark passed its epoch's start (or the log is
    /// empty): a majority of the replica set holds the epoch, so the set
    /// the epoch was published with is committed.
    pub epoch_committed: bool,
}

/// [`PartitionReportRequest`] of version 1, answered with
/// [`PartitionReportResponseV1`].
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionReportRequestV1 {
    /// As in version 0.
    pub node_id: u32,
    /// As in version 0.
    pub incarnation: u64,
    /// The partitions it leads.
    pub partitions: Vec<LedPartitionV1>,
}

/// [`PartitionReportResponse`] of version 1: the same fields.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionReportResponseV1 {
    /// As in version 0.
    pub error_code: u16,
    /// As in version 0.
    pub error_message: Option<String>,
    /// As in version 0.
    pub leader_hint: Option<u32>,
}

impl PartitionReportRequestV1 {
    /// The same report in version 0, for a controller that predates
    /// version 1.
    #[must_use]
    pub fn version_0(&self) -> PartitionReportRequest {
        PartitionReportRequest {
            node_id: self.node_id,
            incarnation: self.incarnation,
            partitions: self.partitions.iter().map(|led| led.led.clone()).collect(),
        }
    }
}

api!(ApiKey::PartitionReport, PartitionReportRequest => PartitionReportResponse);
api!(ApiKey::PartitionReport, version 1, PartitionReportRequestV1 => PartitionReportResponseV1);
no_raw_section!(
    PartitionReportRequest,
    ArchivedPartitionReportRequest,
    PartitionReportResponse,
    ArchivedPartitionReportResponse,
    PartitionReportRequestV1,
    ArchivedPartitionReportRequestV1,
    PartitionReportResponseV1,
    ArchivedPartitionReportResponseV1,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    fn led() -> impl Strategy<Value = LedPartition> {
        (any::<u64>(), any::<[u32; 2]>(), few(any::<u32>())).prop_map(
            |(topic_id, [partition, leader_epoch], in_sync)| LedPartition {
                topic_id,
                partition,
                leader_epoch,
                in_sync,
            },
        )
    }

    pub(crate) fn request() -> impl Strategy<Value = PartitionReportRequest> {
        (any::<u32>(), any::<u64>(), few(led())).prop_map(|(node_id, incarnation, partitions)| {
            PartitionReportRequest {
                node_id,
                incarnation,
                partitions,
            }
        })
    }

    pub(crate) fn request_v1() -> impl Strategy<Value = PartitionReportRequestV1> {
        let led = (led(), any::<bool>()).prop_map(|(led, epoch_committed)| LedPartitionV1 {
            led,
            epoch_committed,
        });
        (any::<u32>(), any::<u64>(), few(led)).prop_map(|(node_id, incarnation, partitions)| {
            PartitionReportRequestV1 {
                node_id,
                incarnation,
                partitions,
            }
        })
    }

    pub(crate) fn response_v1() -> impl Strategy<Value = PartitionReportResponseV1> {
        response().prop_map(|response| PartitionReportResponseV1 {
            error_code: response.error_code,
            error_message: response.error_message,
            leader_hint: response.leader_hint,
        })
    }

    pub(crate) fn response() -> impl Strategy<Value = PartitionReportResponse> {
        (any::<u16>(), optional_name(), any::<Option<u32>>()).prop_map(
            |(error_code, error_message, leader_hint)| PartitionReportResponse {
                error_code,
                error_message,
                leader_hint,
            },
        )
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

        #[test]
        fn version_1_round_trips(q in request_v1(), s in response_v1(), noise in noise()) {
            round_trip_request(&q, &[])?;
            round_trip_response(&s, &[])?;
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }
    }
}
