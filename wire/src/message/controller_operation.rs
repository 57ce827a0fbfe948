//! ControllerOperation: a broker forwards an administrative change to the
//! controller leader.
//!
//! Inter-broker: spoken by brokers to the controller, never by clients.
//! Clients send CreateTopics, DeleteTopics and InitProducerId to any broker;
//! that broker checks what it can and forwards the change here, because only
//! the controller leader proposes metadata changes through raft.
//!
//! The controller answers once the change is committed and applied, so that
//! the forwarding broker can wait until its own metadata shows it before
//! answering the client (a client that creates a topic and then asks that
//! broker for metadata sees the topic).

use rkyv::{Archive, Deserialize, Serialize};

use super::alter_users::ScramCredentialEntry;
use super::common::ConfigEntry;
use super::describe_acls::AclEntry;
use super::describe_quotas::{QuotaEntry, QuotaEntryV1};
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One metadata change. The tags are part of the protocol: a new operation
/// takes a new number, and a retired one is never reused.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
#[repr(u8)]
pub enum ControllerOp {
    /// Create a topic; the controller computes the placement.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Number of partitions.
        partitions: u32,
        /// Replicas per partition.
        replication_factor: u16,
        /// Topic configuration: the client's entries over the forwarding
        /// broker's defaults.
        configs: Vec<ConfigEntry>,
        /// Check everything a creation would, change nothing.
        validate_only: bool,
    } = 0,
    /// Delete a topic and all its partitions.
    DeleteTopic {
        /// Topic name.
        name: String,
    } = 1,
    /// Reserve a block of idempotent producer ids for the forwarding broker,
    /// which hands them out to InitProducerId requests one by one.
    AllocateProducerIds {
        /// Ids in the block.
        count: u32,
    } = 2,
    /// The forwarding broker cannot lead this partition's epoch any more
    /// (its log was fenced and reopened): make the partition leaderless, so
    /// that an election publishes a leader under a new epoch.
    ResignLeadership {
        /// The topic's id.
        topic_id: u64,
        /// The partition.
        partition: u32,
        /// The resigning broker.
        node_id: u32,
        /// The epoch it led.
        epoch: u32,
    } = 3,
    /// Create a user or replace its credentials (`AlterUsers`).
    PutUser {
        /// The user.
        name: String,
        /// Its salted keys, one per mechanism.
        credentials: Vec<ScramCredentialEntry>,
    } = 4,
    /// Delete a user (`AlterUsers`).
    DeleteUser {
        /// The user.
        name: String,
    } = 5,
    /// Add an access rule (`AlterAcls`).
    PutAcl {
        /// The rule.
        acl: AclEntry,
    } = 6,
    /// Remove an access rule (`AlterAcls`).
    DeleteAcl {
        /// The rule.
        acl: AclEntry,
    } = 7,
    /// Set a quota (`AlterQuotas`).
    PutQuota {
        /// The entity and its limits.
        quota: QuotaEntry,
    } = 8,
    /// Remove a quota (`AlterQuotas`).
    DeleteQuota {
        /// The entity.
        entity: String,
    } = 9,
    /// Create a topic that counts against a principal's topic and
    /// partition limits: [`ControllerOp::CreateTopic`] with an owner. The
    /// forwarding broker sends `CreateTopic` for a topic without one, so
    /// that a controller of the release before serves it.
    CreateOwnedTopic {
        /// Topic name.
        name: String,
        /// Number of partitions.
        partitions: u32,
        /// Replicas per partition.
        replication_factor: u16,
        /// Topic configuration, as in `CreateTopic`.
        configs: Vec<ConfigEntry>,
        /// Check everything a creation would, change nothing.
        validate_only: bool,
        /// The principal that asked for it (logged in, not a super user).
        owner: String,
    } = 10,
    /// Set a quota with topic, partition or group limits (`AlterQuotas`
    /// version 1); a quota without them goes as `PutQuota`.
    PutQuotaV1 {
        /// The entity and all its limits.
        quota: QuotaEntryV1,
    } = 11,
    /// The forwarding broker is shutting down (a controlled shutdown): fence
    /// it now, so that its leaderships are elected elsewhere while it still
    /// replicates, and keep it fenced until a new process of it registers.
    /// A controller of an earlier release refuses this tag; the broker then
    /// stops as before, its leaderships moving once its session expires.
    LeaveCluster {
        /// The leaving broker.
        node_id: u32,
        /// The incarnation it registered with: an older process cannot
        /// fence a newer one.
        incarnation: u64,
    } = 12,
    /// Move a partition's leadership to one of its replicas
    /// (`AlterCluster`). Answered once the controller took the request;
    /// the forwarding broker waits for the metadata to show the move.
    ElectLeader {
        /// The topic's id.
        topic_id: u64,
        /// The partition.
        partition: u32,
        /// The broker to lead; `None` for the preferred replica (the first).
        to: Option<u32>,
    } = 13,
    /// Put a broker in maintenance or take it out (`AlterCluster`).
    SetBrokerMaintenance {
        /// The broker.
        node_id: u32,
        /// In maintenance or not.
        enabled: bool,
    } = 14,
    /// Start moving a partition to other brokers (`AlterCluster`); the
    /// controller picks the new replicas' shards.
    StartReassignment {
        /// The topic's id.
        topic_id: u64,
        /// The partition.
        partition: u32,
        /// The brokers to hold it, preferred leader first.
        replicas: Vec<u32>,
        /// Bytes a second each new replica copies at most; 0 for no limit.
        throttle_bytes_per_s: u64,
    } = 15,
    /// Turn a partition's move back (`AlterCluster`).
    CancelReassignment {
        /// The topic's id.
        topic_id: u64,
        /// The partition.
        partition: u32,
    } = 16,
    /// Start decommissioning a broker (`enabled`), moving each of its
    /// replicas to another broker, or recommission it (`AlterCluster`).
    SetBrokerDecommission {
        /// The broker.
        node_id: u32,
        /// Decommission (true) or recommission (false).
        enabled: bool,
        /// Bytes a second each new replica copies at most; 0 for no limit.
        throttle_bytes_per_s: u64,
        /// Moves off the broker running at once.
        max_moves: u16,
    } = 17,
}

/// Forwards one change to the controller leader.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ControllerOperationRequest {
    /// The change.
    pub op: ControllerOp,
}

/// The change's outcome.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ControllerOperationResponse {
    /// `NONE` (0); `NOT_CONTROLLER` (retry at `leader_hint`), or the
    /// operation's own refusal to pass on to the client (for example
    /// `TOPIC_ALREADY_EXISTS`, `INVALID_REPLICATION_FACTOR`,
    /// `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// With `NOT_CONTROLLER`: node id of the controller leader, if the
    /// answering voter knows it.
    pub leader_hint: Option<u32>,
    /// With `NONE`: for `AllocateProducerIds`, the first id of the allocated
    /// block (the block is `value..value + count`); for `CreateTopic`, the
    /// new topic's id (-1 when only validated), and for `CreateOwnedTopic`
    /// likewise; for `DeleteTopic`, 0; for
    /// `ResignLeadership`, 1 if the partition became leaderless, else 0;
    /// for `PutUser`, 1 if the user is new, else 0; for `DeleteUser`, 0;
    /// for `PutAcl`, 1 if the rule is new, else 0; for `DeleteAcl`, 0;
    /// for `PutQuota` and `PutQuotaV1`, 1 if the entity had no quota, else 0; for
    /// `DeleteQuota` and `LeaveCluster`, 0; for `ElectLeader`, the broker
    /// that is to lead; for `SetBrokerMaintenance`, 1 if it changed, else 0;
    /// for `SetBrokerDecommission`, the moves it turned back.
    /// `-1` on error.
    pub value: i64,
}

api!(ApiKey::ControllerOperation, ControllerOperationRequest => ControllerOperationResponse);
no_raw_section!(
    ControllerOperationRequest,
    ArchivedControllerOperationRequest,
    ControllerOperationResponse,
    ArchivedControllerOperationResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, few, name, noise, optional_name,
        round_trip_request, round_trip_response,
    };

    fn op() -> impl Strategy<Value = ControllerOp> {
        let config = (name(), name()).prop_map(|(key, value)| ConfigEntry { key, value });
        prop_oneof![
            (
                name(),
                any::<u32>(),
                any::<u16>(),
                few(config),
                any::<bool>()
            )
                .prop_map(
                    |(name, partitions, replication_factor, configs, validate_only)| {
                        ControllerOp::CreateTopic {
                            name,
                            partitions,
                            replication_factor,
                            configs,
                            validate_only,
                        }
                    }
                ),
            name().prop_map(|name| ControllerOp::DeleteTopic { name }),
            any::<u32>().prop_map(|count| ControllerOp::AllocateProducerIds { count }),
            (any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
                |(topic_id, partition, node_id, epoch)| ControllerOp::ResignLeadership {
                    topic_id,
                    partition,
                    node_id,
                    epoch,
                }
            ),
            (
                name(),
                few(crate::message::alter_users::tests::credential())
            )
                .prop_map(|(name, credentials)| ControllerOp::PutUser { name, credentials }),
            name().prop_map(|name| ControllerOp::DeleteUser { name }),
            crate::message::describe_acls::tests::entry()
                .prop_map(|acl| ControllerOp::PutAcl { acl }),
            crate::message::describe_acls::tests::entry()
                .prop_map(|acl| ControllerOp::DeleteAcl { acl }),
            crate::message::describe_quotas::tests::entry()
                .prop_map(|quota| ControllerOp::PutQuota { quota }),
            name().prop_map(|entity| ControllerOp::DeleteQuota { entity }),
            (name(), any::<u32>(), any::<bool>(), name()).prop_map(
                |(name, partitions, validate_only, owner)| ControllerOp::CreateOwnedTopic {
                    name,
                    partitions,
                    replication_factor: 3,
                    configs: Vec::new(),
                    validate_only,
                    owner,
                }
            ),
            crate::message::describe_quotas::tests::entry_v1()
                .prop_map(|quota| ControllerOp::PutQuotaV1 { quota }),
            (any::<u32>(), any::<u64>()).prop_map(|(node_id, incarnation)| {
                ControllerOp::LeaveCluster {
                    node_id,
                    incarnation,
                }
            }),
            (any::<u64>(), any::<u32>(), any::<Option<u32>>()).prop_map(
                |(topic_id, partition, to)| ControllerOp::ElectLeader {
                    topic_id,
                    partition,
                    to,
                }
            ),
            (any::<u32>(), any::<bool>()).prop_map(|(node_id, enabled)| {
                ControllerOp::SetBrokerMaintenance { node_id, enabled }
            }),
            (any::<u64>(), any::<u32>(), few(any::<u32>()), any::<u64>()).prop_map(
                |(topic_id, partition, replicas, throttle_bytes_per_s)| {
                    ControllerOp::StartReassignment {
                        topic_id,
                        partition,
                        replicas,
                        throttle_bytes_per_s,
                    }
                }
            ),
            (any::<u64>(), any::<u32>()).prop_map(|(topic_id, partition)| {
                ControllerOp::CancelReassignment {
                    topic_id,
                    partition,
                }
            }),
            (any::<u32>(), any::<bool>(), any::<u64>(), any::<u16>()).prop_map(
                |(node_id, enabled, throttle_bytes_per_s, max_moves)| {
                    ControllerOp::SetBrokerDecommission {
                        node_id,
                        enabled,
                        throttle_bytes_per_s,
                        max_moves,
                    }
                }
            ),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = ControllerOperationRequest> {
        op().prop_map(|op| ControllerOperationRequest { op })
    }

    pub(crate) fn response() -> impl Strategy<Value = ControllerOperationResponse> {
        (
            any::<u16>(),
            optional_name(),
            any::<Option<u32>>(),
            any::<i64>(),
        )
            .prop_map(|(error_code, error_message, leader_hint, value)| {
                ControllerOperationResponse {
                    error_code,
                    error_message,
                    leader_hint,
                    value,
                }
            })
    }

    /// A renumbered tag would make an old controller apply the wrong change.
    #[test]
    fn operation_tags_are_pinned() {
        let create = ControllerOp::CreateTopic {
            name: "t".to_owned(),
            partitions: 3,
            replication_factor: 3,
            configs: Vec::new(),
            validate_only: false,
        };
        let delete = ControllerOp::DeleteTopic {
            name: "t".to_owned(),
        };
        let allocate = ControllerOp::AllocateProducerIds { count: 1000 };
        let resign = ControllerOp::ResignLeadership {
            topic_id: 1,
            partition: 0,
            node_id: 2,
            epoch: 3,
        };
        assert_eq!(archived_tag(&create), 0);
        assert_eq!(archived_tag(&delete), 1);
        assert_eq!(archived_tag(&allocate), 2);
        assert_eq!(archived_tag(&resign), 3);
        let put = ControllerOp::PutUser {
            name: "u".to_owned(),
            credentials: Vec::new(),
        };
        assert_eq!(archived_tag(&put), 4);
        let delete_user = ControllerOp::DeleteUser {
            name: "u".to_owned(),
        };
        assert_eq!(archived_tag(&delete_user), 5);
        let acl = AclEntry {
            principal: "*".to_owned(),
            resource_type: 1,
            pattern: 1,
            name: "t".to_owned(),
            operation: 1,
            permission: 1,
        };
        assert_eq!(archived_tag(&ControllerOp::PutAcl { acl: acl.clone() }), 6);
        assert_eq!(archived_tag(&ControllerOp::DeleteAcl { acl }), 7);
        let quota = QuotaEntry {
            entity: "user:*".to_owned(),
            produce_bytes_per_second: Some(1),
            fetch_bytes_per_second: None,
            request_percent: None,
            connections: None,
        };
        assert_eq!(archived_tag(&ControllerOp::PutQuota { quota }), 8);
        let entity = "user:*".to_owned();
        assert_eq!(archived_tag(&ControllerOp::DeleteQuota { entity }), 9);
        let owned = ControllerOp::CreateOwnedTopic {
            name: "t".to_owned(),
            partitions: 1,
            replication_factor: 1,
            configs: Vec::new(),
            validate_only: false,
            owner: "alice".to_owned(),
        };
        assert_eq!(archived_tag(&owned), 10);
        let quota = QuotaEntryV1 {
            quota: QuotaEntry {
                entity: "user:*".to_owned(),
                produce_bytes_per_second: None,
                fetch_bytes_per_second: None,
                request_percent: None,
                connections: None,
            },
            topics: Some(1),
            partitions: None,
            groups: None,
        };
        assert_eq!(archived_tag(&ControllerOp::PutQuotaV1 { quota }), 10 + 1);
        let leave = ControllerOp::LeaveCluster {
            node_id: 2,
            incarnation: 9,
        };
        assert_eq!(archived_tag(&leave), 12);
        let elect = ControllerOp::ElectLeader {
            topic_id: 1,
            partition: 0,
            to: None,
        };
        assert_eq!(archived_tag(&elect), 13);
        let maintenance = ControllerOp::SetBrokerMaintenance {
            node_id: 1,
            enabled: true,
        };
        assert_eq!(archived_tag(&maintenance), 14);
        let reassign = ControllerOp::StartReassignment {
            topic_id: 1,
            partition: 0,
            replicas: vec![2],
            throttle_bytes_per_s: 0,
        };
        assert_eq!(archived_tag(&reassign), 15);
        let cancel = ControllerOp::CancelReassignment {
            topic_id: 1,
            partition: 0,
        };
        assert_eq!(archived_tag(&cancel), 16);
        let decommission = ControllerOp::SetBrokerDecommission {
            node_id: 4,
            enabled: false,
            throttle_bytes_per_s: 0,
            max_moves: 1,
        };
        assert_eq!(archived_tag(&decommission), 17);
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
