//! Strategies and fixtures shared by the unit tests.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::acls::{AclBinding, Operation, PatternType, Permission, ResourceType};
use crate::command::{Command, ImportedTopic};
use crate::decommission::Decommission;
use crate::quotas::{QuotaEntity, QuotaLimits};
use crate::state::MetadataState;
use crate::types::{LeaderEpoch, NodeId, Replica, ShardId, TopicId};
use corelog_wire::sasl::scram::{ITERATIONS_MIN, ScramMechanism, StoredCredential};

/// A credential whose keys have the mechanism's length, filled with
/// `fill` (no PBKDF2: strategies make thousands).
pub(crate) fn credential(mechanism: ScramMechanism, fill: u8) -> StoredCredential {
    let key_bytes = mechanism.key_bytes();
    StoredCredential {
        mechanism,
        salt: vec![fill; 16],
        iterations: ITERATIONS_MIN,
        stored_key: vec![fill; key_bytes],
        server_key: vec![fill.wrapping_add(1); key_bytes],
    }
}

fn arb_credentials() -> impl Strategy<Value = Vec<StoredCredential>> {
    (any::<u8>(), 0u8..3).prop_map(|(fill, which)| match which {
        0 => vec![credential(ScramMechanism::Sha256, fill)],
        1 => vec![credential(ScramMechanism::Sha512, fill)],
        _ => vec![
            credential(ScramMechanism::Sha256, fill),
            credential(ScramMechanism::Sha512, fill),
        ],
    })
}

fn arb_name() -> impl Strategy<Value = String> {
    "[a-z0-9._-]{1,40}"
}

fn arb_config() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map("[a-z.]{1,20}", "[0-9a-z-]{0,12}", 0..5)
}

fn arb_replicas() -> impl Strategy<Value = Vec<Replica>> {
    proptest::collection::vec(
        (any::<u64>(), any::<u16>()).prop_map(|(node, shard)| Replica {
            node: NodeId(node),
            shard: ShardId(shard),
        }),
        0..5,
    )
}

/// Any command, with strings inside the format's limits (the codec round
/// trip needs that; [`arb_applicable_command`] aims at the state instead).
pub(crate) fn arb_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (
            any::<u64>(),
            "[a-z0-9.-]{0,255}",
            any::<u16>(),
            proptest::option::of("[a-z0-9-]{0,255}"),
            any::<u16>(),
            any::<u64>()
        )
            .prop_map(|(node, host, port, rack, shard_count, incarnation)| {
                Command::RegisterBroker {
                    node: NodeId(node),
                    host,
                    port,
                    rack,
                    shard_count,
                    incarnation,
                }
            }),
        any::<u64>().prop_map(|node| Command::FenceBroker { node: NodeId(node) }),
        (any::<u64>(), any::<u64>()).prop_map(|(node, incarnation)| Command::UnfenceBroker {
            node: NodeId(node),
            incarnation
        }),
        (any::<u64>(), any::<bool>()).prop_map(|(node, enabled)| {
            Command::SetBrokerMaintenance {
                node: NodeId(node),
                enabled,
            }
        }),
        (any::<u64>(), proptest::option::of(any::<(u64, u16)>())).prop_map(|(node, plan)| {
            Command::SetBrokerDecommission {
                node: NodeId(node),
                decommission: plan.map(|(throttle_bytes_per_s, max_moves)| Decommission {
                    throttle_bytes_per_s,
                    max_moves,
                }),
            }
        }),
        (
            arb_name(),
            any::<bool>(),
            arb_config(),
            proptest::collection::vec(arb_replicas(), 0..6),
            any::<i64>(),
            proptest::option::of("[a-zA-Z0-9._@-]{1,255}")
        )
            .prop_map(
                |(name, internal, config, assignments, created_at_ms, owner)| {
                    Command::CreateTopic {
                        name,
                        internal,
                        config,
                        assignments,
                        created_at_ms,
                        owner,
                    }
                }
            ),
        any::<u64>().prop_map(|id| Command::DeleteTopic {
            topic_id: TopicId(id)
        }),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(
            |(topic, partition, leader, epoch)| Command::SetLeader {
                topic_id: TopicId(topic),
                partition,
                leader: (leader != 0).then_some(NodeId(leader)),
                epoch: LeaderEpoch(epoch),
            }
        ),
        any::<u32>().prop_map(|count| Command::AllocateProducerIds { count }),
        (
            any::<u64>(),
            any::<u32>(),
            arb_replicas(),
            any::<u64>(),
            any::<i64>()
        )
            .prop_map(
                |(topic, partition, target, throttle_bytes_per_s, started_at_ms)| {
                    Command::StartReassignment {
                        topic_id: TopicId(topic),
                        partition,
                        target,
                        throttle_bytes_per_s,
                        started_at_ms,
                    }
                }
            ),
        (any::<u64>(), any::<u32>()).prop_map(|(topic, partition)| {
            Command::CancelReassignment {
                topic_id: TopicId(topic),
                partition,
            }
        }),
        (
            any::<u64>(),
            any::<u32>(),
            arb_replicas(),
            any::<u64>(),
            any::<u32>()
        )
            .prop_map(|(topic, partition, replicas, leader, epoch)| {
                Command::ChangeReplicaSet {
                    topic_id: TopicId(topic),
                    partition,
                    replicas,
                    leader: (leader != 0).then_some(NodeId(leader)),
                    epoch: LeaderEpoch(epoch),
                }
            }),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(
            |(topic, partition, leader, epoch)| Command::ResignLeader {
                topic_id: TopicId(topic),
                partition,
                leader: NodeId(leader),
                epoch: LeaderEpoch(epoch),
            }
        ),
        (
            proptest::collection::vec(
                (
                    any::<u64>(),
                    arb_name(),
                    any::<bool>(),
                    arb_config(),
                    proptest::collection::vec((arb_replicas(), 0u32..4), 0..4),
                    any::<i64>()
                )
                    .prop_map(
                        |(id, name, internal, config, partitions, created_at_ms)| {
                            let (partitions, leader_epochs) = partitions
                                .into_iter()
                                .map(|(replicas, epoch)| (replicas, LeaderEpoch(epoch)))
                                .unzip();
                            ImportedTopic {
                                id: TopicId(id),
                                name,
                                internal,
                                config,
                                partitions,
                                leader_epochs,
                                created_at_ms,
                            }
                        }
                    ),
                0..4
            ),
            any::<u64>(),
            any::<i64>()
        )
            .prop_map(|(topics, next_topic_id, producer_id_block_end)| {
                Command::ImportTopics {
                    topics,
                    next_topic_id,
                    producer_id_block_end,
                }
            }),
        ("[a-zA-Z0-9._@-]{1,255}", arb_credentials())
            .prop_map(|(name, credentials)| Command::PutUser { name, credentials }),
        "[a-zA-Z0-9._@-]{1,255}".prop_map(|name| Command::DeleteUser { name }),
        arb_acl("[a-zA-Z0-9._@*-]{1,255}", "[a-zA-Z0-9._*-]{1,255}")
            .prop_map(|binding| Command::PutAcl { binding }),
        arb_acl("[a-z*]{1,8}", "[a-z.*]{1,8}").prop_map(|binding| Command::DeleteAcl { binding }),
        (arb_quota_entity(), arb_quota_limits())
            .prop_map(|(entity, limits)| Command::PutQuota { entity, limits }),
        arb_quota_entity().prop_map(|entity| Command::DeleteQuota { entity }),
    ]
}

/// A quota entity of each kind.
pub(crate) fn arb_quota_entity() -> impl Strategy<Value = QuotaEntity> {
    prop_oneof![
        "[a-z]{1,8}".prop_map(QuotaEntity::User),
        Just(QuotaEntity::DefaultUser),
        any::<[u8; 4]>().prop_map(|octets| QuotaEntity::Ip(core::net::IpAddr::from(octets))),
        Just(QuotaEntity::DefaultIp),
    ]
}

/// Limits, well-formed for a principal or not: `check` decides.
pub(crate) fn arb_quota_limits() -> impl Strategy<Value = QuotaLimits> {
    (
        proptest::option::of(0u64..1 << 30),
        proptest::option::of(0u64..1 << 30),
        proptest::option::of(0u32..120),
        proptest::option::of(0u32..1000),
        // Small object limits, so that random creations meet them.
        proptest::option::of(0u32..4),
        proptest::option::of(0u32..8),
        proptest::option::of(0u32..4),
    )
        .prop_map(
            |(
                produce_bytes_per_second,
                fetch_bytes_per_second,
                request_percent,
                connections,
                topics,
                partitions,
                groups,
            )| {
                QuotaLimits {
                    produce_bytes_per_second,
                    fetch_bytes_per_second,
                    request_percent,
                    connections,
                    topics,
                    partitions,
                    groups,
                }
            },
        )
}

/// An access rule over the given principal and resource name patterns
/// (well-formed or not: `check` decides).
pub(crate) fn arb_acl(
    principal: &'static str,
    name: &'static str,
) -> impl Strategy<Value = AclBinding> {
    (
        principal,
        proptest::sample::select(ResourceType::ALL),
        proptest::sample::select(PatternType::ALL),
        name,
        proptest::sample::select(Operation::ALL),
        proptest::sample::select(Permission::ALL),
    )
        .prop_map(
            |(principal, resource_type, pattern, name, operation, permission)| AclBinding {
                principal,
                resource_type,
                pattern,
                name,
                operation,
                permission,
            },
        )
}

/// Commands over small id ranges, so that a random sequence mostly
/// succeeds and exercises every path of `apply`.
pub(crate) fn arb_applicable_command() -> impl Strategy<Value = Command> {
    let node = (0u64..6).prop_map(NodeId);
    let replica = (1u64..6, 0u16..4).prop_map(|(node, shard)| Replica {
        node: NodeId(node),
        shard: ShardId(shard),
    });
    let replicas = proptest::collection::vec(replica, 1..4);
    prop_oneof![
        (
            node.clone(),
            proptest::option::of(prop_oneof![Just("a"), Just("b")]),
            1u16..4,
            0u64..4
        )
            .prop_map(|(node, rack, shard_count, incarnation)| {
                Command::RegisterBroker {
                    node,
                    host: format!("broker-{node}"),
                    port: 7100,
                    rack: rack.map(str::to_owned),
                    shard_count,
                    incarnation,
                }
            }),
        node.clone().prop_map(|node| Command::FenceBroker { node }),
        (node.clone(), 0u64..4)
            .prop_map(|(node, incarnation)| Command::UnfenceBroker { node, incarnation }),
        (node.clone(), any::<bool>())
            .prop_map(|(node, enabled)| Command::SetBrokerMaintenance { node, enabled }),
        (node.clone(), proptest::option::of(1u16..3)).prop_map(|(node, max_moves)| {
            Command::SetBrokerDecommission {
                node,
                decommission: max_moves.map(|max_moves| Decommission {
                    throttle_bytes_per_s: 0,
                    max_moves,
                }),
            }
        }),
        (
            prop_oneof![Just("a"), Just("b"), Just("__groups"), Just("c.d")],
            any::<bool>(),
            proptest::collection::vec(replicas.clone(), 0..4),
            proptest::option::of(prop_oneof![Just("alice"), Just("bob")]),
        )
            .prop_map(
                |(name, internal, assignments, owner)| Command::CreateTopic {
                    name: name.to_owned(),
                    internal,
                    config: BTreeMap::from([("retention.ms".to_owned(), "1000".to_owned())]),
                    assignments,
                    created_at_ms: 0,
                    owner: owner.map(str::to_owned),
                }
            ),
        (0u64..6).prop_map(|id| Command::DeleteTopic {
            topic_id: TopicId(id)
        }),
        (0u64..6, 0u32..4, proptest::option::of(1u64..6), 0u32..6).prop_map(
            |(topic, partition, leader, epoch)| Command::SetLeader {
                topic_id: TopicId(topic),
                partition,
                leader: leader.map(NodeId),
                epoch: LeaderEpoch(epoch),
            }
        ),
        (0u64..6, 0u32..4, replicas.clone(), 0u64..3).prop_map(
            |(topic, partition, target, throttle)| Command::StartReassignment {
                topic_id: TopicId(topic),
                partition,
                target,
                throttle_bytes_per_s: throttle << 20,
                started_at_ms: 0,
            }
        ),
        (0u64..6, 0u32..4).prop_map(|(topic, partition)| Command::CancelReassignment {
            topic_id: TopicId(topic),
            partition,
        }),
        (
            0u64..6,
            0u32..4,
            replicas.clone(),
            proptest::option::of(1u64..6),
            0u32..6
        )
            .prop_map(|(topic, partition, replicas, leader, epoch)| {
                Command::ChangeReplicaSet {
                    topic_id: TopicId(topic),
                    partition,
                    replicas,
                    leader: leader.map(NodeId),
                    epoch: LeaderEpoch(epoch),
                }
            }),
        (0u32..3000).prop_map(|count| Command::AllocateProducerIds { count }),
        (prop_oneof![Just("alice"), Just("bob")], arb_credentials()).prop_map(
            |(name, credentials)| Command::PutUser {
                name: name.to_owned(),
                credentials,
            }
        ),
        prop_oneof![Just("alice"), Just("bob")].prop_map(|name| Command::DeleteUser {
            name: name.to_owned()
        }),
        arb_acl("alice|\\*", "a|\\*").prop_map(|binding| Command::PutAcl { binding }),
        arb_acl("alice|\\*", "a|\\*").prop_map(|binding| Command::DeleteAcl { binding }),
        (arb_quota_entity(), arb_quota_limits())
            .prop_map(|(entity, limits)| Command::PutQuota { entity, limits }),
        arb_quota_entity().prop_map(|entity| Command::DeleteQuota { entity }),
    ]
}

/// A state reached by applying a random command sequence.
pub(crate) fn arb_state() -> impl Strategy<Value = MetadataState> {
    proptest::collection::vec(arb_applicable_command(), 0..40).prop_map(|commands| {
        let mut state = MetadataState::default();
        for (index, command) in (1u64..).zip(&commands) {
            let _ = state.apply(index, command);
        }
        state
    })
}

/// Three brokers, two racks, a user topic and an internal one, a leader
/// change and a producer-id block.
pub(crate) fn sample_state() -> MetadataState {
    let mut state = MetadataState::default();
    let mut index = 0;
    let mut apply = |state: &mut MetadataState, command: Command| {
        index += 1;
        state
            .apply(index, &command)
            .expect("sample command applies");
    };
    for node in 1..=3u64 {
        apply(
            &mut state,
            Command::RegisterBroker {
                node: NodeId(node),
                host: format!("broker-{node}"),
                port: 7100,
                rack: Some(if node == 3 { "b" } else { "a" }.to_owned()),
                shard_count: 2,
                incarnation: 1,
            },
        );
        apply(
            &mut state,
            Command::UnfenceBroker {
                node: NodeId(node),
                incarnation: 1,
            },
        );
    }
    let replicas = |first: u64| {
        (0..3)
            .map(|offset| Replica {
                node: NodeId((first + offset) % 3 + 1),
                shard: ShardId((offset % 2) as u16),
            })
            .collect::<Vec<_>>()
    };
    apply(
        &mut state,
        Command::CreateTopic {
            name: "orders".to_owned(),
            internal: false,
            config: BTreeMap::from([
                ("retention.ms".to_owned(), "60000".to_owned()),
                ("segment.bytes".to_owned(), "1048576".to_owned()),
            ]),
            assignments: (0..4).map(replicas).collect(),
            created_at_ms: 1_700_000_000_000,
            owner: Some("alice".to_owned()),
        },
    );
    apply(
        &mut state,
        Command::CreateTopic {
            name: "__groups".to_owned(),
            internal: true,
            config: BTreeMap::new(),
            assignments: (0..2).map(replicas).collect(),
            created_at_ms: 1_700_000_000_001,
            owner: None,
        },
    );
    apply(
        &mut state,
        Command::SetLeader {
            topic_id: TopicId(0),
            partition: 1,
            leader: Some(NodeId(3)),
            epoch: LeaderEpoch(1),
        },
    );
    apply(&mut state, Command::AllocateProducerIds { count: 1024 });
    apply(
        &mut state,
        Command::PutUser {
            name: "alice".to_owned(),
            credentials: vec![
                credential(ScramMechanism::Sha256, 7),
                credential(ScramMechanism::Sha512, 7),
            ],
        },
    );
    state
}
