use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::command::ImportedTopic;
use crate::testing::{arb_applicable_command, sample_state};

fn register(node: u64, incarnation: u64, shard_count: u16) -> Command {
    Command::RegisterBroker {
        node: NodeId(node),
        host: format!("broker-{node}"),
        port: 7100,
        rack: None,
        shard_count,
        incarnation,
    }
}

fn create(name: &str, assignments: Vec<Vec<Replica>>) -> Command {
    Command::CreateTopic {
        name: name.to_owned(),
        internal: name.starts_with("__"),
        config: BTreeMap::new(),
        assignments,
        created_at_ms: 0,
        owner: None,
    }
}

fn replica(node: u64, shard: u16) -> Replica {
    Replica {
        node: NodeId(node),
        shard: ShardId(shard),
    }
}

/// Applies commands at consecutive indexes after the state's version.
fn apply_all(
    state: &mut MetadataState,
    commands: &[Command],
) -> Vec<Result<Outcome, CommandError>> {
    commands
        .iter()
        .map(|command| state.apply(state.version() + 1, command))
        .collect()
}

fn two_live_brokers() -> MetadataState {
    let mut state = MetadataState::default();
    for result in apply_all(
        &mut state,
        &[
            register(1, 1, 2),
            register(2, 1, 2),
            Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 1,
            },
            Command::UnfenceBroker {
                node: NodeId(2),
                incarnation: 1,
            },
        ],
    ) {
        result.unwrap();
    }
    state
}

#[test]
fn brokers_register_fenced_and_unfence_only_for_their_incarnation() {
    let mut state = MetadataState::default();
    let results = apply_all(
        &mut state,
        &[
            register(1, 5, 2),
            Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 4,
            },
            Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 5,
            },
            register(1, 5, 2),
            register(1, 4, 2),
            register(1, 6, 2),
        ],
    );
    assert_eq!(
        results[0],
        Ok(Outcome::BrokerRegistered {
            node: NodeId(1),
            incarnation: 5
        })
    );
    assert!(matches!(
        results[1],
        Err(CommandError::StaleIncarnation { .. })
    ));
    assert_eq!(
        results[2],
        Ok(Outcome::BrokerUnfenced {
            node: NodeId(1),
            changed: true
        })
    );
    assert!(results[3].is_ok(), "a retried registration is accepted");
    assert!(matches!(
        results[4],
        Err(CommandError::StaleIncarnation { .. })
    ));
    assert!(results[5].is_ok());
    assert!(
        state.brokers()[&NodeId(1)].fenced,
        "a new incarnation starts fenced"
    );
    assert_eq!(state.version(), 6);
}

#[test]
fn topics_get_ids_that_are_never_reused() {
    let mut state = two_live_brokers();
    let results = apply_all(
        &mut state,
        &[
            create("orders", vec![vec![replica(1, 0), replica(2, 1)]]),
            create("orders", vec![vec![replica(2, 0)]]),
            Command::DeleteTopic {
                topic_id: TopicId(0),
            },
            create("orders", vec![vec![replica(2, 0)]]),
        ],
    );
    assert_eq!(
        results[0],
        Ok(Outcome::TopicCreated {
            topic_id: TopicId(0)
        })
    );
    assert_eq!(
        results[1],
        Err(CommandError::TopicExists("orders".to_owned()))
    );
    assert_eq!(
        results[3],
        Ok(Outcome::TopicCreated {
            topic_id: TopicId(1)
        })
    );
    let topic = state.topic_by_name("orders").unwrap();
    assert_eq!(topic.id, TopicId(1));
    assert_eq!(topic.partitions[0].leader, Some(NodeId(2)));
    assert_eq!(topic.partitions[0].leader_epoch, LeaderEpoch(0));
}

#[test]
fn bad_assignments_are_refused() {
    let mut state = two_live_brokers();
    apply_all(&mut state, &[register(3, 1, 1)]);
    let cases = [
        (create("t", vec![]), "no partitions"),
        (create("t", vec![vec![]]), "no replicas"),
        (
            create("t", vec![vec![replica(1, 0), replica(1, 1)]]),
            "same broker twice",
        ),
        (create("t", vec![vec![replica(1, 2)]]), "missing shard"),
        (create("t", vec![vec![replica(9, 0)]]), "unknown broker"),
        (create("t", vec![vec![replica(3, 0)]]), "fenced broker"),
        (
            Command::CreateTopic {
                name: "__t".to_owned(),
                internal: false,
                config: BTreeMap::new(),
                assignments: vec![vec![replica(1, 0)]],
                created_at_ms: 0,
                owner: None,
            },
            "a user topic named like an internal one",
        ),
        (create("a/b", vec![vec![replica(1, 0)]]), "bad name"),
    ];
    for (command, case) in cases {
        let before = state.clone();
        assert!(
            state.apply(state.version() + 1, &command).is_err(),
            "{case}"
        );
        assert_eq!(state.topics(), before.topics(), "{case}");
    }
    let internal_without_prefix = Command::CreateTopic {
        name: "groups".to_owned(),
        internal: true,
        config: BTreeMap::new(),
        assignments: vec![vec![replica(1, 0)]],
        created_at_ms: 0,
        owner: None,
    };
    assert!(
        state
            .apply(state.version() + 1, &internal_without_prefix)
            .is_err()
    );
}

#[test]
fn leaders_need_a_greater_epoch_and_a_live_replica() {
    let mut state = two_live_brokers();
    apply_all(
        &mut state,
        &[create("t", vec![vec![replica(1, 0), replica(2, 0)]])],
    );
    let set = |leader: Option<u64>, epoch: u32| Command::SetLeader {
        topic_id: TopicId(0),
        partition: 0,
        leader: leader.map(NodeId),
        epoch: LeaderEpoch(epoch),
    };
    let results = apply_all(
        &mut state,
        &[
            set(Some(2), 0),
            set(Some(2), 1),
            set(Some(1), 1),
            set(None, 2),
            Command::FenceBroker { node: NodeId(1) },
            set(Some(1), 3),
            set(Some(2), 3),
            Command::SetLeader {
                topic_id: TopicId(0),
                partition: 1,
                leader: None,
                epoch: LeaderEpoch(9),
            },
        ],
    );
    assert!(matches!(results[0], Err(CommandError::StaleEpoch { .. })));
    assert!(results[1].is_ok());
    assert!(matches!(results[2], Err(CommandError::StaleEpoch { .. })));
    assert!(results[3].is_ok());
    assert_eq!(results[5], Err(CommandError::BrokerFenced(NodeId(1))));
    assert!(results[6].is_ok());
    assert!(matches!(
        results[7],
        Err(CommandError::UnknownPartition { .. })
    ));
    let partition = state.partition(TopicId(0), 0).unwrap();
    assert_eq!(partition.leader, Some(NodeId(2)));
    assert_eq!(partition.leader_epoch, LeaderEpoch(3));
}

#[test]
fn shards_holding_replicas_cannot_be_removed() {
    let mut state = two_live_brokers();
    apply_all(&mut state, &[create("t", vec![vec![replica(1, 1)]])]);
    let results = apply_all(&mut state, &[register(1, 2, 1), register(1, 3, 4)]);
    assert!(matches!(
        results[0],
        Err(CommandError::ShardsInUse {
            in_use: ShardId(1),
            ..
        })
    ));
    assert!(results[1].is_ok());
}

#[test]
fn producer_id_blocks_are_disjoint_and_bounded() {
    let mut state = MetadataState::default();
    let results = apply_all(
        &mut state,
        &[
            Command::AllocateProducerIds { count: 10 },
            Command::AllocateProducerIds { count: 0 },
            Command::AllocateProducerIds { count: 5 },
        ],
    );
    assert_eq!(
        results[0],
        Ok(Outcome::ProducerIdsAllocated { start: 0, end: 10 })
    );
    assert!(results[1].is_err());
    assert_eq!(
        results[2],
        Ok(Outcome::ProducerIdsAllocated { start: 10, end: 15 })
    );
    state.producer_id_block_end = i64::MAX - 1;
    assert_eq!(
        state.apply(
            state.version() + 1,
            &Command::AllocateProducerIds { count: 5 }
        ),
        Err(CommandError::ProducerIdsExhausted)
    );
}

#[test]
fn the_sample_state_keeps_its_invariants() {
    sample_state().check_invariants().unwrap();
}

#[test]
#[should_panic(expected = "applied after")]
fn entries_must_apply_in_order() {
    let mut state = MetadataState::default();
    state.note_applied(5);
    state.note_applied(5);
}

proptest! {
    #[test]
    fn apply_sequences_keep_every_invariant(
        commands in proptest::collection::vec(arb_applicable_command(), 0..80),
    ) {
        let mut state = MetadataState::default();
        let mut ids_seen = std::collections::BTreeSet::new();
        for (index, command) in (1u64..).zip(&commands) {
            let before = state.clone();
            let result = state.apply(index, command);
            prop_assert_eq!(state.version(), index);
            prop_assert!(state.check_invariants().is_ok(), "{:?}", state.check_invariants());
            match &result {
                Err(_) => {
                    let mut unchanged = before.clone();
                    unchanged.version = index;
                    prop_assert_eq!(&state, &unchanged, "a refused command changed the state");
                }
                Ok(Outcome::TopicCreated { topic_id }) => {
                    prop_assert!(ids_seen.insert(*topic_id), "topic id reused");
                    prop_assert!(ids_seen.iter().all(|id| id <= topic_id));
                }
                Ok(_) => {}
            }
            // Epochs only grow, and a partition keeps its replica set.
            for (id, topic) in before.topics() {
                if let Some(after) = state.topics().get(id) {
                    for (old, new) in topic.partitions.iter().zip(&after.partitions) {
                        prop_assert!(new.leader_epoch >= old.leader_epoch);
                        prop_assert_eq!(&new.replicas, &old.replicas);
                    }
                }
            }
            prop_assert!(state.producer_id_block_end() >= before.producer_id_block_end());
            prop_assert!(state.next_topic_id() >= before.next_topic_id());
        }
    }

    #[test]
    fn decoding_an_applied_state_gives_it_back(
        commands in proptest::collection::vec(arb_applicable_command(), 0..60),
    ) {
        let mut state = MetadataState::default();
        for (index, command) in (1u64..).zip(&commands) {
            let _ = state.apply(index, command);
        }
        prop_assert_eq!(MetadataState::decode(&state.encode()), Ok(state));
    }
}

#[test]
fn a_new_incarnation_of_a_leader_leaves_its_partitions_leaderless() {
    let mut state = two_live_brokers();
    let results = apply_all(
        &mut state,
        &[
            create(
                "orders",
                vec![
                    vec![replica(1, 0), replica(2, 0)],
                    vec![replica(2, 0), replica(1, 0)],
                ],
            ),
            register(1, 1, 2),
        ],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let leaders = |state: &MetadataState| -> Vec<Option<NodeId>> {
        state.topics()[&TopicId(0)]
            .partitions
            .iter()
            .map(|partition| partition.leader)
            .collect()
    };
    assert_eq!(
        leaders(&state),
        vec![Some(NodeId(1)), Some(NodeId(2))],
        "a retried registration of the same process changes nothing"
    );
    apply_all(&mut state, &[register(1, 2, 2)])[0]
        .clone()
        .unwrap();
    assert_eq!(
        leaders(&state),
        vec![None, Some(NodeId(2))],
        "the restarted broker cannot lead its old epochs again"
    );
    assert_eq!(
        state.topics()[&TopicId(0)].partitions[0].leader_epoch,
        LeaderEpoch(0),
        "the epoch moves only when an election publishes a leader"
    );
    state.check_invariants().unwrap();
}

#[test]
fn topic_settings_are_checked_by_the_state_machine() {
    let mut state = two_live_brokers();
    let bad = Command::CreateTopic {
        name: "orders".to_owned(),
        internal: false,
        config: BTreeMap::from([("segment.bytes".to_owned(), "10".to_owned())]),
        assignments: vec![vec![replica(1, 0)]],
        created_at_ms: 0,
        owner: None,
    };
    let checked = state.check(&bad);
    assert!(
        matches!(&checked, Err(CommandError::InvalidConfig { reason }) if reason.contains("segment.bytes")),
        "{checked:?}"
    );
    let results = apply_all(&mut state, &[bad]);
    assert_eq!(
        results[0].clone().err(),
        checked.err(),
        "apply refuses with the check's reason"
    );
    assert!(state.topics().is_empty());
    let unknown = Command::CreateTopic {
        name: "orders".to_owned(),
        internal: false,
        config: BTreeMap::from([("colour".to_owned(), "blue".to_owned())]),
        assignments: vec![vec![replica(1, 0)]],
        created_at_ms: 0,
        owner: None,
    };
    assert!(state.check(&unknown).is_err());
    let bad_name = create("orders/2024", vec![vec![replica(1, 0)]]);
    assert!(matches!(
        state.check(&bad_name),
        Err(CommandError::InvalidTopicName(_))
    ));
}

#[test]
fn internal_topics_cannot_be_deleted() {
    let mut state = two_live_brokers();
    apply_all(&mut state, &[create("__groups", vec![vec![replica(1, 0)]])])[0]
        .clone()
        .unwrap();
    let delete = Command::DeleteTopic {
        topic_id: TopicId(0),
    };
    assert!(matches!(
        state.check(&delete),
        Err(CommandError::InternalTopic(name)) if name == "__groups"
    ));
    assert!(apply_all(&mut state, &[delete])[0].is_err());
    assert!(state.topic_by_name("__groups").is_some());
}

fn imported(id: u64, name: &str, partitions: u32) -> ImportedTopic {
    ImportedTopic {
        id: TopicId(id),
        name: name.to_owned(),
        internal: name.starts_with("__"),
        config: BTreeMap::from([("retention.ms".to_owned(), "-1".to_owned())]),
        partitions: (0..partitions).map(|_| vec![replica(1, 0)]).collect(),
        leader_epochs: vec![IMPORTED_LEADER_EPOCH; partitions as usize],
        created_at_ms: 1_796_159_008_892,
    }
}

#[test]
fn an_import_keeps_the_catalog_ids_and_can_be_applied_again() {
    let mut state = two_live_brokers();
    let import = Command::ImportTopics {
        topics: vec![imported(0, "__groups", 2), imported(4, "ledger", 1)],
        next_topic_id: 5,
        producer_id_block_end: 2048,
    };
    let results = apply_all(&mut state, &[import.clone(), import]);
    assert_eq!(results[0], Ok(Outcome::TopicsImported { imported: 2 }));
    assert_eq!(
        results[1],
        Ok(Outcome::TopicsImported { imported: 0 }),
        "a migration that crashed after its import committed proposes it again"
    );
    let ledger = state.topic_by_name("ledger").unwrap();
    assert_eq!(ledger.id, TopicId(4));
    assert_eq!(ledger.partitions[0].leader, Some(NodeId(1)));
    assert_eq!(ledger.partitions[0].leader_epoch, IMPORTED_LEADER_EPOCH);
    assert_eq!(state.next_topic_id(), TopicId(5));
    assert_eq!(state.producer_id_block_end(), 2048);
    state.check_invariants().unwrap();
    let created = apply_all(&mut state, &[create("orders", vec![vec![replica(2, 0)]])]);
    assert_eq!(
        created[0],
        Ok(Outcome::TopicCreated {
            topic_id: TopicId(5)
        }),
        "new topics get ids above the imported ones"
    );
}

#[test]
fn an_import_that_conflicts_changes_nothing() {
    let mut state = two_live_brokers();
    apply_all(&mut state, &[create("orders", vec![vec![replica(1, 0)]])])[0]
        .clone()
        .unwrap();
    let before = state.clone();
    for import in [
        // The name is taken by another id.
        vec![imported(3, "orders", 1)],
        // The id is taken by another name.
        vec![imported(0, "ledger", 1)],
        // The same topic with another partition count.
        vec![imported(0, "orders", 2)],
        // An id the cluster may have handed out already is not reused.
        vec![imported(9, "ledger", 1), imported(9, "other", 1)],
    ] {
        let command = Command::ImportTopics {
            topics: import,
            next_topic_id: 10,
            producer_id_block_end: 0,
        };
        assert!(state.check(&command).is_err(), "{command:?}");
        let mut applied = state.clone();
        assert!(applied.apply(applied.version() + 1, &command).is_err());
        let mut expected = before.clone();
        expected.note_applied(applied.version());
        assert_eq!(applied, expected);
    }
}

#[test]
fn a_resigning_leader_leaves_its_partition_leaderless_only_in_its_epoch() {
    let mut state = two_live_brokers();
    apply_all(
        &mut state,
        &[create("orders", vec![vec![replica(1, 0), replica(2, 0)]])],
    )[0]
    .clone()
    .unwrap();
    let resign = |leader: u64, epoch: u32| Command::ResignLeader {
        topic_id: TopicId(0),
        partition: 0,
        leader: NodeId(leader),
        epoch: LeaderEpoch(epoch),
    };
    let results = apply_all(&mut state, &[resign(2, 0), resign(1, 1), resign(1, 0)]);
    assert_eq!(
        results,
        vec![
            Ok(Outcome::LeaderResigned { changed: false }),
            Ok(Outcome::LeaderResigned { changed: false }),
            Ok(Outcome::LeaderResigned { changed: true }),
        ],
        "another broker's or another epoch's resignation changes nothing"
    );
    let partition = &state.topics()[&TopicId(0)].partitions[0];
    assert_eq!(partition.leader, None);
    assert_eq!(partition.leader_epoch, LeaderEpoch(0));
    state.check_invariants().unwrap();
}

mod users {
    use corelog_wire::sasl::scram::ScramMechanism;

    use super::*;
    use crate::testing::credential;

    fn put(name: &str, fill: u8) -> Command {
        Command::PutUser {
            name: name.to_owned(),
            credentials: vec![credential(ScramMechanism::Sha256, fill)],
        }
    }

    #[test]
    fn a_user_is_created_its_password_replaced_and_deleted() {
        let mut state = MetadataState::default();
        assert_eq!(
            state.apply(1, &put("alice", 1)),
            Ok(Outcome::UserPut { created: true })
        );
        assert_eq!(state.users()["alice"].changed_at, 1);
        assert_eq!(
            state.apply(2, &put("alice", 2)),
            Ok(Outcome::UserPut { created: false })
        );
        let alice = &state.users()["alice"];
        assert_eq!(
            alice.changed_at, 2,
            "a new password is a change brokers see"
        );
        assert_eq!(
            alice.credential(ScramMechanism::Sha256),
            Some(&credential(ScramMechanism::Sha256, 2))
        );
        assert_eq!(alice.credential(ScramMechanism::Sha512), None);
        state.check_invariants().unwrap();
        let delete = Command::DeleteUser {
            name: "alice".to_owned(),
        };
        assert_eq!(state.check(&delete), Ok(()));
        assert_eq!(state.apply(3, &delete), Ok(Outcome::UserDeleted));
        assert!(state.users().is_empty());
        assert_eq!(
            state.apply(4, &delete),
            Err(CommandError::UnknownUser("alice".to_owned()))
        );
        assert_eq!(
            state.check(&delete),
            Err(CommandError::UnknownUser("alice".to_owned()))
        );
    }

    #[test]
    fn bad_names_and_credentials_are_refused_and_change_nothing() {
        let mut state = MetadataState::default();
        let before = state.clone();
        let weak = Command::PutUser {
            name: "bob".to_owned(),
            credentials: vec![StoredCredential {
                iterations: 1000,
                ..credential(ScramMechanism::Sha256, 1)
            }],
        };
        for command in [put("a,b", 1), put("", 1), weak] {
            assert!(matches!(
                state.check(&command),
                Err(CommandError::InvalidUser(_))
            ));
            assert!(matches!(
                state.apply(state.version() + 1, &command),
                Err(CommandError::InvalidUser(_))
            ));
        }
        assert_eq!(state.users(), before.users());
    }

    #[test]
    fn a_state_without_users_keeps_the_first_snapshot_version() {
        let mut state = MetadataState::default();
        state.apply(1, &put("alice", 1)).unwrap();
        assert_eq!(state.encode()[4], 2);
        let decoded = MetadataState::decode(&state.encode()).unwrap();
        assert_eq!(decoded, state);
        state
            .apply(
                2,
                &Command::DeleteUser {
                    name: "alice".to_owned(),
                },
            )
            .unwrap();
        assert_eq!(state.encode()[4], 1, "readable by brokers before users");
        assert_eq!(MetadataState::decode(&state.encode()), Ok(state));
    }
}

mod acls {
    use super::*;
    use crate::acls::{AclBinding, Operation, PatternType, Permission, ResourceType};

    fn fetch_prefix(principal: &str, prefix: &str) -> AclBinding {
        AclBinding {
            principal: principal.to_owned(),
            resource_type: ResourceType::Topic,
            pattern: PatternType::Prefix,
            name: prefix.to_owned(),
            operation: Operation::Fetch,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn an_acl_is_added_once_removed_and_decides_requests() {
        let mut state = MetadataState::default();
        let binding = fetch_prefix("alice", "tenant-a.");
        let put = Command::PutAcl {
            binding: binding.clone(),
        };
        assert_eq!(state.check(&put), Ok(()));
        assert_eq!(state.apply(1, &put), Ok(Outcome::AclPut { created: true }));
        assert_eq!(state.apply(2, &put), Ok(Outcome::AclPut { created: false }));
        assert_eq!(state.acls().len(), 1);
        assert!(state.acls().authorize(
            Some("alice"),
            Operation::Fetch,
            ResourceType::Topic,
            "tenant-a.orders"
        ));
        state.check_invariants().unwrap();
        let delete = Command::DeleteAcl { binding };
        assert_eq!(state.apply(3, &delete), Ok(Outcome::AclDeleted));
        assert!(state.acls().is_empty());
        assert!(matches!(
            state.apply(4, &delete),
            Err(CommandError::UnknownAcl(_))
        ));
        assert!(matches!(
            state.check(&delete),
            Err(CommandError::UnknownAcl(_))
        ));
    }

    #[test]
    fn a_malformed_acl_is_refused_and_changes_nothing() {
        let mut state = MetadataState::default();
        let wrong_type = Command::PutAcl {
            binding: AclBinding {
                operation: Operation::GroupAdmin,
                ..fetch_prefix("alice", "x")
            },
        };
        assert!(matches!(
            state.check(&wrong_type),
            Err(CommandError::InvalidAcl(_))
        ));
        assert!(matches!(
            state.apply(1, &wrong_type),
            Err(CommandError::InvalidAcl(_))
        ));
        assert!(state.acls().is_empty());
    }

    #[test]
    fn the_snapshot_version_rises_only_with_acls() {
        let mut state = MetadataState::default();
        let put = Command::PutAcl {
            binding: fetch_prefix("*", "public."),
        };
        state.apply(1, &put).unwrap();
        assert_eq!(state.encode()[4], 3);
        assert_eq!(MetadataState::decode(&state.encode()).as_ref(), Ok(&state));
        let Command::PutAcl { binding } = put else {
            unreachable!()
        };
        state.apply(2, &Command::DeleteAcl { binding }).unwrap();
        assert_eq!(state.encode()[4], 1, "readable by brokers before ACLs");
        assert_eq!(MetadataState::decode(&state.encode()), Ok(state));
    }
}

mod quotas {
    use super::*;
    use crate::quotas::{QuotaEntity, QuotaLimits};

    fn produce_limit(bytes: u64) -> QuotaLimits {
        QuotaLimits {
            produce_bytes_per_second: Some(bytes),
            ..QuotaLimits::default()
        }
    }

    #[test]
    fn a_quota_is_set_replaced_and_removed() {
        let mut state = MetadataState::default();
        let entity = QuotaEntity::User("tenant-a".to_owned());
        let put = |bytes| Command::PutQuota {
            entity: entity.clone(),
            limits: produce_limit(bytes),
        };
        assert_eq!(
            state.apply(1, &put(100)),
            Ok(Outcome::QuotaPut { created: true })
        );
        assert_eq!(
            state.apply(2, &put(200)),
            Ok(Outcome::QuotaPut { created: false })
        );
        assert_eq!(state.quotas()[&entity], produce_limit(200));
        state.check_invariants().unwrap();
        assert_eq!(state.encode()[4], 4);
        assert_eq!(MetadataState::decode(&state.encode()).as_ref(), Ok(&state));
        let delete = Command::DeleteQuota {
            entity: entity.clone(),
        };
        assert_eq!(state.apply(3, &delete), Ok(Outcome::QuotaDeleted));
        assert!(matches!(
            state.apply(4, &delete),
            Err(CommandError::UnknownQuota(_))
        ));
        assert_eq!(state.encode()[4], 1, "readable by brokers before quotas");
    }

    #[test]
    fn a_rate_on_an_address_is_refused_and_changes_nothing() {
        let mut state = MetadataState::default();
        let command = Command::PutQuota {
            entity: QuotaEntity::DefaultIp,
            limits: produce_limit(1),
        };
        assert!(matches!(
            state.check(&command),
            Err(CommandError::InvalidQuota(_))
        ));
        assert!(matches!(
            state.apply(1, &command),
            Err(CommandError::InvalidQuota(_))
        ));
        assert!(state.quotas().is_empty());
    }
}

#[test]
fn a_rebuilt_catalog_is_imported_at_each_partitions_epoch() {
    let mut state = two_live_brokers();
    let mut topic = imported(3, "orders", 2);
    topic.leader_epochs = vec![LeaderEpoch(7), LeaderEpoch(1)];
    let import = Command::ImportTopics {
        topics: vec![topic.clone()],
        next_topic_id: 4,
        producer_id_block_end: 1 << 40,
    };
    assert_eq!(
        state.apply(state.version() + 1, &import),
        Ok(Outcome::TopicsImported { imported: 1 })
    );
    let orders = state.topic_by_name("orders").unwrap();
    let epochs: Vec<LeaderEpoch> = orders.partitions.iter().map(|p| p.leader_epoch).collect();
    assert_eq!(epochs, [LeaderEpoch(7), LeaderEpoch(1)]);

    let mut state = two_live_brokers();
    topic.leader_epochs = vec![LeaderEpoch(0), LeaderEpoch(1)];
    let refused = Command::ImportTopics {
        topics: vec![topic.clone()],
        next_topic_id: 4,
        producer_id_block_end: 1 << 40,
    };
    assert!(matches!(
        state.apply(state.version() + 1, &refused),
        Err(CommandError::ImportConflict { .. })
    ));
    topic.leader_epochs = vec![LeaderEpoch(2)];
    assert!(
        state
            .check(&Command::ImportTopics {
                topics: vec![topic],
                next_topic_id: 4,
                producer_id_block_end: 1 << 40,
            })
            .is_err(),
        "one epoch per partition"
    );
}

fn owned(name: &str, partitions: u64, owner: Option<&str>) -> Command {
    Command::CreateTopic {
        name: name.to_owned(),
        internal: name.starts_with("__"),
        config: BTreeMap::new(),
        assignments: (0..partitions)
            .map(|index| vec![replica(1 + index % 2, 0)])
            .collect(),
        created_at_ms: 0,
        owner: owner.map(str::to_owned),
    }
}

fn limit(principal: &str, topics: Option<u32>, partitions: Option<u32>) -> Command {
    Command::PutQuota {
        entity: crate::quotas::QuotaEntity::User(principal.to_owned()),
        limits: crate::quotas::QuotaLimits {
            topics,
            partitions,
            ..crate::quotas::QuotaLimits::default()
        },
    }
}

fn exceeded(result: &Result<Outcome, CommandError>) -> Option<&'static str> {
    match result {
        Err(CommandError::LimitExceeded(error)) => Some(error.what),
        _ => None,
    }
}

#[test]
fn an_owner_creates_topics_and_partitions_up_to_its_limits() {
    let mut state = two_live_brokers();
    let results = apply_all(
        &mut state,
        &[
            limit("alice", Some(2), Some(3)),
            owned("a", 2, Some("alice")),
            owned("b", 2, Some("alice")),
            owned("c", 1, Some("alice")),
            owned("d", 1, Some("alice")),
            owned("bob.a", 3, Some("bob")),
            owned("nobody", 3, None),
        ],
    );
    assert!(results[1].is_ok() && results[3].is_ok(), "{results:?}");
    assert_eq!(exceeded(&results[2]), Some("partitions"), "2 + 2 > 3");
    assert_eq!(
        exceeded(&results[4]),
        Some("topics"),
        "a and c are 2 topics"
    );
    assert!(
        results[5].is_ok(),
        "bob has the built-in limits: {results:?}"
    );
    assert!(
        results[6].is_ok(),
        "a topic without an owner counts for nobody"
    );
    let message = results[4].as_ref().unwrap_err().to_string();
    assert!(
        message.contains("\"alice\" may own 2 topics and owns 2"),
        "{message}"
    );
    // Deleting a topic gives its budget back; the check is the same before
    // a proposal as when it applies.
    let a = state.topic_by_name("a").map(|topic| topic.id).unwrap();
    assert!(state.check(&owned("d", 1, Some("alice"))).is_err());
    apply_all(&mut state, &[Command::DeleteTopic { topic_id: a }])[0]
        .as_ref()
        .unwrap();
    assert!(state.check(&owned("d", 1, Some("alice"))).is_ok());
    assert_eq!(
        state.topic_by_name("c").unwrap().owner.as_deref(),
        Some("alice")
    );
    state.check_invariants().unwrap();
}

#[test]
fn the_default_entry_and_the_built_in_limit_apply_without_an_own_entry() {
    let mut state = two_live_brokers();
    let too_many = crate::limits::DEFAULT_PARTITIONS_PER_PRINCIPAL as u64 + 1;
    let results = apply_all(
        &mut state,
        &[
            owned(
                "big",
                too_many.min(u64::from(PARTITIONS_MAX)),
                Some("carol"),
            ),
            Command::PutQuota {
                entity: crate::quotas::QuotaEntity::DefaultUser,
                limits: crate::quotas::QuotaLimits {
                    topics: Some(0),
                    ..crate::quotas::QuotaLimits::default()
                },
            },
            owned("small", 1, Some("carol")),
            owned("__groups", 1, Some("carol")),
        ],
    );
    // PARTITIONS_MAX (10,000) equals the built-in partition limit: a topic
    // of that size fits, the next partition would not.
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(exceeded(&results[2]), Some("topics"), "user:* allows none");
    assert!(
        matches!(results[3], Err(CommandError::InvalidTopicOwner(_))),
        "internal topics count for nobody: {results:?}"
    );
}

#[test]
fn owners_and_object_limits_survive_a_snapshot_and_older_snapshots_read() {
    let mut state = two_live_brokers();
    let before = state.encode();
    assert_eq!(before[4], 1, "no users, ACLs, quotas or owners: version 1");
    apply_all(&mut state, &[owned("plain", 1, None)]);
    apply_all(
        &mut state,
        &[Command::PutQuota {
            entity: crate::quotas::QuotaEntity::DefaultUser,
            limits: crate::quotas::QuotaLimits {
                connections: Some(5),
                ..crate::quotas::QuotaLimits::default()
            },
        }],
    );
    assert_eq!(state.encode()[4], 4, "rates only: still version 4");
    assert_eq!(MetadataState::decode(&state.encode()), Ok(state.clone()));
    apply_all(&mut state, &[owned("mine", 2, Some("alice"))]);
    assert_eq!(state.encode()[4], 5);
    let decoded = MetadataState::decode(&state.encode()).unwrap();
    assert_eq!(
        decoded.topic_by_name("mine").unwrap().owner.as_deref(),
        Some("alice")
    );
    assert_eq!(decoded.topic_by_name("plain").unwrap().owner, None);
    assert_eq!(decoded, state);
    apply_all(&mut state, &[limit("bob", None, Some(9))]);
    let decoded = MetadataState::decode(&state.encode()).unwrap();
    assert_eq!(decoded, state);
}

#[test]
fn one_broker_at_a_time_is_in_maintenance_and_it_outlives_a_restart() {
    let mut state = two_live_brokers();
    let maintenance = |node: u64, enabled: bool| Command::SetBrokerMaintenance {
        node: NodeId(node),
        enabled,
    };
    assert_eq!(
        state.apply(state.version() + 1, &maintenance(1, true)),
        Ok(Outcome::BrokerMaintenance {
            node: NodeId(1),
            changed: true,
        })
    );
    assert_eq!(state.broker_in_maintenance(), Some(NodeId(1)));
    assert_eq!(
        state.check(&maintenance(2, true)),
        Err(CommandError::MaintenanceBusy {
            node: NodeId(2),
            in_maintenance: NodeId(1),
        })
    );
    assert!(
        state
            .apply(state.version() + 1, &maintenance(2, true))
            .is_err()
    );
    assert_eq!(
        state.apply(state.version() + 1, &maintenance(9, false)),
        Err(CommandError::UnknownBroker(NodeId(9)))
    );
    // A restart registers a new incarnation: still in maintenance.
    state
        .apply(state.version() + 1, &register(1, 2, 2))
        .unwrap();
    assert!(state.brokers()[&NodeId(1)].maintenance);
    assert_eq!(
        state.apply(state.version() + 1, &maintenance(1, false)),
        Ok(Outcome::BrokerMaintenance {
            node: NodeId(1),
            changed: true,
        })
    );
    assert_eq!(state.broker_in_maintenance(), None);
    assert!(
        state
            .apply(state.version() + 1, &maintenance(2, true))
            .is_ok()
    );
    state.check_invariants().unwrap();
}
