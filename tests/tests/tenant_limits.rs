//! Per-principal limits on topics, partitions and consumer groups (issue
//! 35, item 2): one tenant could create topics and groups without bound
//! and so fill the cluster's metadata and every broker's `/metrics` (3,000
//! groups grew `/metrics` from 44 KB to 7.2 MB in 0.7 s). A principal now
//! owns at most its limit of topics and partitions (counted by the
//! controller before it commits a topic) and creates at most its limit of
//! groups on a coordinator; an administrator changes the limits with a
//! quota entry, and super users are exempt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_broker::group::service::groups_partition_for;
use corelog_tests::tenants::Tenants;
use corelog_tests::wire_client::{Client, ask};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitResponse, OffsetCommitTopic,
};

fn create(tenants: &Tenants, user: &str, topic: &str, partitions: u32) -> Result<(), String> {
    let output = tenants.run(
        user,
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
        None,
    );
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[track_caller]
fn refused_by_limit(result: Result<(), String>, limit: &str) {
    let error = result.expect_err("the creation was served");
    assert!(error.contains("PRINCIPAL_LIMIT_REACHED"), "{error}");
    assert!(error.contains(&format!("may own {limit}")), "{error}");
}

#[test]
fn a_tenant_stops_at_its_topic_and_partition_limits() {
    let mut tenants = Tenants::start(&["alice", "bob"], &[], &[]);
    tenants.grant_prefix("alice", "alice.", &["create", "delete", "describe"]);
    tenants.grant_prefix("bob", "bob.", &["create", "describe"]);
    let set = tenants.ok(
        "admin",
        &[
            "quota",
            "set",
            "user:alice",
            "--topics",
            "2",
            "--partitions",
            "5",
        ],
        None,
    );
    assert!(set.contains("set the quota of user:alice"), "{set}");
    let described = tenants.ok("admin", &["quota", "describe", "user:alice"], None);
    assert!(described.contains("TOPICS"), "{described}");

    create(&tenants, "alice", "alice.a", 2).unwrap();
    refused_by_limit(create(&tenants, "alice", "alice.b", 4), "5 partitions");
    create(&tenants, "alice", "alice.b", 3).unwrap();
    refused_by_limit(create(&tenants, "alice", "alice.c", 1), "2 topics");
    // Another tenant has its own budget, and a super user has none.
    create(&tenants, "bob", "bob.a", 8).unwrap();
    create(&tenants, "admin", "alice.by-admin", 8).unwrap();

    // The owners are part of the metadata: a restarted broker replays them.
    tenants.broker.terminate();
    tenants.broker.spawn();
    refused_by_limit(create(&tenants, "alice", "alice.c", 1), "2 topics");
    // A deleted topic gives its share back.
    let _served = tenants.ok("alice", &["topic", "delete", "alice.a"], None);
    create(&tenants, "alice", "alice.c", 2).unwrap();
    // Removing the quota brings the defaults back (1,000 topics).
    let _served = tenants.ok("admin", &["quota", "remove", "user:alice"], None);
    create(&tenants, "alice", "alice.d", 1).unwrap();
}

#[test]
fn the_default_entry_limits_every_principal_without_its_own() {
    let tenants = Tenants::start(&["alice", "bob"], &[], &[]);
    tenants.grant_prefix("alice", "alice.", &["create"]);
    tenants.grant_prefix("bob", "bob.", &["create"]);
    let _served = tenants.ok("admin", &["quota", "set", "user:*", "--topics", "1"], None);
    let _served = tenants.ok(
        "admin",
        &["quota", "set", "user:bob", "--topics", "3"],
        None,
    );
    create(&tenants, "alice", "alice.a", 1).unwrap();
    refused_by_limit(create(&tenants, "alice", "alice.b", 1), "1 topics");
    for topic in ["bob.a", "bob.b", "bob.c"] {
        create(&tenants, "bob", topic, 1).unwrap();
    }
    refused_by_limit(create(&tenants, "bob", "bob.d", 1), "3 topics");
}
fn join(client: &mut Client, group: &str) -> JoinGroupResponse {
    ask(
        client,
        &JoinGroupRequest {
            group: group.to_owned(),
            member_id: None,
            instance_id: None,
            client_id: "tests".to_owned(),
            topics: vec!["shared.orders".to_owned()],
            session_timeout_ms: 30_000,
            rebalance_timeout_ms: 3_000,
            owned: Vec::new(),
        },
    )
}

#[track_caller]
fn joined(response: &JoinGroupResponse) {
    assert_eq!(response.error_code, 0, "{response:?}");
}

#[test]
fn a_tenant_stops_at_its_group_limit() {
    let tenants = Tenants::start(&["alice", "bob"], &[("shared.orders", 1)], &[]);
    for user in ["alice", "bob"] {
        tenants.grant(&[
            "--allow",
            user,
            "--operation",
            "fetch",
            "--topic",
            "shared.orders",
        ]);
        tenants.grant_prefix(user, &format!("{user}."), &["group-read", "group-admin"]);
    }
    // 16 groups over the 8 `__groups` partitions: 2 on each coordinator.
    let _served = tenants.ok(
        "admin",
        &["quota", "set", "user:alice", "--groups", "16"],
        None,
    );
    let [one, two, three] = same_coordinator("alice");
    let mut alice = tenants.client_as("alice");
    joined(&join(&mut alice, &one));
    joined(&join(&mut alice, &two));
    let refused = join(&mut alice, &three);
    assert_eq!(
        ErrorCode::from_code(refused.error_code),
        Some(ErrorCode::GroupLimitReached),
        "{refused:?}"
    );
    let message = refused.error_message.clone().unwrap_or_default();
    assert!(message.contains("may own 16 groups, 2 on"), "{message}");
    // A manual commit cannot create it either.
    let committed = commit(&mut alice, &three);
    assert_eq!(committed, ErrorCode::GroupLimitReached.code());
    // Another tenant has its own budget.
    let mut bob = tenants.client_as("bob");
    for group in same_coordinator("bob") {
        joined(&join(&mut bob, &group));
    }
    // Raising the limit lets her go on.
    let _served = tenants.ok(
        "admin",
        &["quota", "set", "user:alice", "--groups", "24"],
        None,
    );
    joined(&join(&mut alice, &three));
}

/// Three group names of `user`'s namespace that one coordinator (of the
/// default 8 `__groups` partitions) coordinates.
fn same_coordinator(user: &str) -> [String; 3] {
    let name = |index: u32| format!("{user}.group-{index}");
    let target = groups_partition_for(&name(0), 8);
    let found: Vec<String> = (0..)
        .map(name)
        .filter(|group| groups_partition_for(group, 8) == target)
        .take(3)
        .collect();
    [found[0].clone(), found[1].clone(), found[2].clone()]
}

/// A commit outside a generation of offset 0 on `shared.orders`/0; its
/// partition's error code.
fn commit(client: &mut Client, group: &str) -> u16 {
    let response: OffsetCommitResponse = ask(
        client,
        &OffsetCommitRequest {
            group: group.to_owned(),
            generation: -1,
            member_id: String::new(),
            topics: vec![OffsetCommitTopic {
                name: "shared.orders".to_owned(),
                partitions: vec![OffsetCommitPartition {
                    partition: 0,
                    next_offset: 0,
                    metadata: None,
                }],
            }],
        },
    );
    response.topics[0].partitions[0].error_code
}
