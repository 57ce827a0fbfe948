//! JoinGroup: join a consumer group, or rejoin after a rebalance, and get
//! this member's assignment.
//!
//! The coordinator computes the assignment itself (sticky, cooperative where
//! possible: DESIGN §8), so the request carries what the member subscribes to
//! and what it consumes now, and the response carries the member's share.
//! Every membership change bumps the generation; commits from an older
//! generation are refused (`ILLEGAL_GENERATION`, C6).

use rkyv::{Archive, Deserialize, Serialize};

use super::common::TopicPartitions;
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Joins (or rejoins) a group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct JoinGroupRequest {
    /// Group id.
    pub group: String,
    /// The id the coordinator gave this member before; `None` for a new
    /// member, which gets a fresh id in the response.
    pub member_id: Option<String>,
    /// A stable id chosen by the application (static membership): a member
    /// that restarts with the same instance id takes its old place without a
    /// rebalance. `None` for dynamic membership.
    pub instance_id: Option<String>,
    /// Client software id, for describe output and logs.
    pub client_id: String,
    /// Topics the member subscribes to.
    pub topics: Vec<String>,
    /// How long the coordinator waits for a heartbeat before it removes the
    /// member.
    pub session_timeout_ms: u32,
    /// How long the coordinator waits for members to rejoin during a
    /// rebalance before it removes those that did not.
    pub rebalance_timeout_ms: u32,
    /// What the member consumes now, so that the coordinator can keep
    /// partitions where they are (sticky) and revoke only what moves
    /// (cooperative).
    pub owned: Vec<TopicPartitions>,
}

/// The member's place in the new generation.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct JoinGroupResponse {
    /// `NONE` (0), or for example `REBALANCE_IN_PROGRESS` (join again),
    /// `UNKNOWN_MEMBER_ID` (join again without a member id) or
    /// `NOT_COORDINATOR`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// This member's id; send it with every later group request.
    pub member_id: String,
    /// The group's generation; send it with heartbeats and commits.
    pub generation: i32,
    /// The partitions this member consumes in this generation.
    pub assignment: Vec<TopicPartitions>,
    /// How often to send heartbeats.
    pub heartbeat_interval_ms: u32,
    /// How many members the group has in this generation.
    pub members: u32,
}

api!(ApiKey::JoinGroup, JoinGroupRequest => JoinGroupResponse);
no_raw_section!(
    JoinGroupRequest,
    ArchivedJoinGroupRequest,
    JoinGroupResponse,
    ArchivedJoinGroupResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response, topic_partitions,
    };

    pub(crate) fn request() -> impl Strategy<Value = JoinGroupRequest> {
        (
            (name(), optional_name(), optional_name(), name()),
            (
                few(name()),
                any::<u32>(),
                any::<u32>(),
                few(topic_partitions()),
            ),
        )
            .prop_map(
                |(
                    (group, member_id, instance_id, client_id),
                    (topics, session_timeout_ms, rebalance_timeout_ms, owned),
                )| JoinGroupRequest {
                    group,
                    member_id,
                    instance_id,
                    client_id,
                    topics,
                    session_timeout_ms,
                    rebalance_timeout_ms,
                    owned,
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = JoinGroupResponse> {
        (
            (any::<u16>(), optional_name(), name(), any::<i32>()),
            (few(topic_partitions()), any::<u32>(), any::<u32>()),
        )
            .prop_map(
                |(
                    (error_code, error_message, member_id, generation),
                    (assignment, heartbeat_interval_ms, members),
                )| JoinGroupResponse {
                    error_code,
                    error_message,
                    member_id,
                    generation,
                    assignment,
                    heartbeat_interval_ms,
                    members,
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
    }
}
